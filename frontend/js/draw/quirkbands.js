// The token-axis bands of an answer, from the `sits: "band"` rows of /api/model `fields` (quirks.js): the
// image's run of tokens (`token_kinds`) and a conversation's messages (`spans`, one band a message named by its
// role). Each is a coloured bar along the keys' axis (top) and the queries' (left) of a token map; a band
// of a kind of token (the image's) folds into one label on the axes unless expanded. A label and a shape on
// what the answer drew: no number is recomputed, every cell stays where it was.

import { tokenMargins } from "./figures.js";
import { fill, quirks } from "./quirks.js";

// a colour per value of every band row, in the table's order (token_kinds' "image" is the second: orange)
const PALETTE = ["#b8b8b8", "#f0b060", "#c8c8c8", "#a58fd6", "#5fa8d3", "#6cbf84"];

/** The first and last token of `kind` (the tokens between them too) and how many there are; null without one. */
function runOf(kinds, kind) {
  const at = [];
  kinds.forEach((k, i) => k === kind && at.push(i));
  return at.length ? { from: at[0], to: at.at(-1), n: at.length } : null;
}

/** "image · 1 tokens" as English has it. */
const oneToken = (words) => words.replace(/\b1 tokens\b/, "1 token");

/**
 * The answer's bands: `{label, title, from, to, n, color, folds, row}`, `to` inclusive, `row` the band's row of the
 * table among the bands (its bars stand apart from another row's), `folds` whether it stands for its tokens.
 */
export function tokenBands(model, answer) {
  const out = [];
  let offset = 0;
  quirks(model)
    .filter((f) => f.sits === "band")
    .forEach((f, row) => {
      const value = answer?.[f.name];
      const first = offset;
      const color = (v) => PALETTE[(first + Math.max(0, f.values.indexOf(v))) % PALETTE.length];
      offset += f.values.length;
      if (!value) return;
      if (f.kind === "kinds") {
        const run = runOf(value, f.label);
        const label = run && oneToken(fill(f.words.band, { n: String(run.n) }));
        if (run) out.push({ ...run, label, title: label, color: color(f.label), folds: true, row });
        return;
      }
      for (const s of value) {
        if (s.end <= s.start) continue;
        const words = { role: s.role, message: String(s.message) };
        const label = fill(f.words.band, words);
        const title = `${fill(f.words.hover ?? f.words.band, words)}, tokens ${s.start}–${s.end - 1}`;
        out.push({ from: s.start, to: s.end - 1, n: s.end - s.start, label, title, color: color(s.role), row });
      }
    });
  return out;
}

/** `axis` (a Plotly token axis) with the run's ticks replaced by the band's label in its middle. */
function foldAxis(axis, band) {
  const ticks = (axis.tickvals ?? [])
    .map((v, i) => [v, axis.ticktext[i]])
    .filter(([v]) => v < band.from || v > band.to);
  ticks.push([(band.from + band.to) / 2, band.label]);
  ticks.sort((a, b) => a[0] - b[0]);
  return { ...axis, tickvals: ticks.map((t) => t[0]), ticktext: ticks.map((t) => t[1]) };
}

/**
 * The bars of one band along each panel's keys (top) and queries (left), `pairs` its panels' [x, y] axes, the bars
 * placed by the axes' domains; a row of bands further out.
 */
function bandShapes(band, pairs) {
  const out = 0.02 * band.row;
  const common = { type: "rect", name: band.title, fillcolor: band.color, line: { width: 0 }, layer: "above" };
  const [from, to] = [band.from - 0.5, band.to + 0.5];
  return pairs.flatMap(([x, y]) => [
    { ...common, opacity: 0.9, xref: x, yref: `${y} domain`, x0: from, x1: to, y0: 1 + out, y1: 1.015 + out },
    { ...common, opacity: 0.9, xref: `${x} domain`, yref: y, x0: -0.015 - out, x1: -out, y0: from, y1: to },
  ]);
}

const axisKey = (ref) => `${ref[0]}axis${ref.slice(1)}`; // "x2" -> "xaxis2"

/**
 * A token map's figure (`{data, layout}`; `pairs` the [keys, queries] axes of each of its panels, one panel by
 * default: `xaxis` keys, `yaxis` queries) with the answer's bands (tokenBands) drawn: bars along both axes of
 * every panel, a band that folds shown as one label unless `expanded`.
 */
export function withBands(fig, { tokens, bands, expanded, maxTicks, pairs = [["x", "y"]] }) {
  if (!bands?.length) return fig;
  const layout = fig.layout;
  layout.shapes = [...(layout.shapes ?? []), ...bands.flatMap((b) => bandShapes(b, pairs))];
  const folded = expanded ? [] : bands.filter((b) => b.folds);
  if (!folded.length) return fig;
  const keys = new Set(pairs.flat().map(axisKey));
  for (const band of folded) for (const key of keys) layout[key] = foldAxis(layout[key], band);
  // room for the labels as now shown
  const shown = tokens.map((t, i) => folded.find((b) => i >= b.from && i <= b.to)?.label ?? t);
  const room = tokenMargins(shown, maxTicks);
  const margin = layout.margin ?? {};
  layout.margin = { ...margin, l: Math.max(margin.l ?? 0, room.l + 12), t: Math.max(margin.t ?? 0, room.t) };
  return fig;
}

/** The bands that name messages, in words for a caption ("" without them): what each band is. */
export function bandWords(bands) {
  const named = (bands ?? []).filter((b) => !b.folds);
  if (!named.length) return "";
  const each = named.map((b) => `${b.label} ${b.from}–${b.to}`).join(", ");
  return ` The coloured bands on the axes are the messages: ${each}.`;
}
