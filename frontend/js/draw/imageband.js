// The image's run of tokens (an answer's `token_kinds`) as one labelled band: on a head heatmap's
// token axes (a tick "image · N tokens" in the middle of the run and a bar along it, the run's own
// ticks left out) and in the token strip (one chip), unless the user expanded it to its tokens. A
// label and a shape on what the answer drew: no number is recomputed, every cell stays where it was.

import { tokenMargins } from "./figures.js";
import { imageMask, imagePositions } from "./imagemap.js";

export const BAND_COLOR = "#f0b060";

/**
 * The image's run: `{from, to, n}`, from its first image token to its last (the markers between them too: Pixtral's
 * row breaks, Idefics3's tile tags), `n` the image tokens in it; null without image tokens.
 */
export function imageRun(kinds) {
  const img = kinds ? imagePositions(kinds) : [];
  if (!img.length) return null;
  return { from: img[0], to: img.at(-1), n: img.length };
}

/** The band's words: "image · 256 tokens". */
export const bandLabel = (run) => `image · ${run.n} token${run.n === 1 ? "" : "s"}`;

/** `axis` (a Plotly token axis) with the run's ticks replaced by the band's label in its middle. */
function foldAxis(axis, run, label) {
  const ticks = (axis.tickvals ?? []).map((v, i) => [v, axis.ticktext[i]]).filter(([v]) => v < run.from || v > run.to);
  ticks.push([(run.from + run.to) / 2, label]);
  ticks.sort((a, b) => a[0] - b[0]);
  return { ...axis, tickvals: ticks.map((t) => t[0]), ticktext: ticks.map((t) => t[1]) };
}

/** The bars along the keys' axis (top) and the queries' (left) that mark the run. */
function bandShapes(run) {
  const common = { type: "rect", fillcolor: BAND_COLOR, line: { width: 0 }, layer: "above", opacity: 0.9 };
  return [
    { ...common, xref: "x", yref: "paper", x0: run.from - 0.5, x1: run.to + 0.5, y0: 1, y1: 1.015 },
    { ...common, xref: "paper", yref: "y", x0: -0.015, x1: 0, y0: run.from - 0.5, y1: run.to + 0.5 },
  ];
}

/**
 * A head heatmap figure (`{data, layout}`, its axes `xaxis` keys and `yaxis` queries) with the image's run drawn as a
 * band: folded (one label) unless `expanded`. `tokens` and `kinds` are the answer's; `maxTicks` the figure's.
 */
export function withImageBand(fig, { tokens, kinds, expanded, maxTicks }) {
  const run = imageRun(kinds);
  if (!run) return fig;
  const layout = fig.layout;
  layout.shapes = [...(layout.shapes ?? []), ...bandShapes(run)];
  if (expanded) return fig;
  const label = bandLabel(run);
  layout.xaxis = foldAxis(layout.xaxis, run, label);
  layout.yaxis = foldAxis(layout.yaxis, run, label);
  // room for the label: the margins of the labels as now shown
  const shown = tokens.map((t, i) => (i >= run.from && i <= run.to ? label : t));
  const room = tokenMargins(shown, maxTicks);
  const margin = layout.margin ?? {};
  layout.margin = { ...margin, l: Math.max(margin.l ?? 0, room.l + 12), t: Math.max(margin.t ?? 0, room.t) };
  return fig;
}

const MASK_WORDS = {
  none: () => "",
  "both ways": (l) =>
    `Inside the image the mask of layer ${l} is not causal: each image token also sees the image tokens after it.`,
  windowed: (l) =>
    `Inside the image the mask of layer ${l} is not causal: each image token also sees the image tokens after it, ` +
    "and the earlier ones within the sliding window.",
  causal: (l) => `The mask of layer ${l} is causal inside the image too: an image token sees the ones before it.`,
};

/** What the answer's T×T `mask` of `layer` does inside the image, in words ("" without an image or a mask). */
export function imageMaskWords(mask, kinds, layer) {
  const shape = kinds ? imageMask(mask, kinds) : null;
  return shape ? MASK_WORDS[shape](layer) : "";
}
