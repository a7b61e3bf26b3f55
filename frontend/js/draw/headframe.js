// What every picture of one head's matrix shares, exact (heatmap.js) or max-pooled (pooled.js):
// its arguments and their defaults, the title in the top-left corner, the weights' colour bar,
// the key and query axes and the layout around them. Pure functions; the numbers are the answer's.

import { MAX_TICKS_BIG, baseLayout, rowOutline, shortToken, tokenAxis, tokenMargins } from "./figures.js";

/**
 * The arguments a head heatmap takes besides its data (`tokens`, `pattern`, `mask`, `layer`,
 * `head`), with their defaults; the exact heatmap and the pooled one share them.
 */
export const HEATMAP_DEFAULTS = {
  keys: null, // the key axis's tokens where they are not the queries' (cross-attention: the source's)
  axes: null, // the axes' names where the stack names them ({query, key}: stacks.js `stackAxes`)
  raw: null,
  scaled: null,
  scaledLabel: "score",
  window: null,
  chunk: null,
  position: null,
  title: null,
  showscale: true,
  maxTicks: MAX_TICKS_BIG,
  uirevision: null,
};

/** A head heatmap's arguments with the defaults filled in for those not given (the keys: the queries' tokens). */
export function heatmapArgs(args) {
  const a = { ...HEATMAP_DEFAULTS, ...args };
  return { ...a, keys: a.keys ?? a.tokens };
}

/** The title of a head heatmap, in its top-left corner (undefined: none). */
export const heatmapTitle = (title) =>
  title
    ? {
        text: title,
        font: { size: 13 },
        x: 0,
        xanchor: "left",
        xref: "paper",
        y: 1,
        yref: "container",
        yanchor: "top",
        pad: { t: 8 },
      }
    : undefined;

/** A colour bar right of a heatmap, titled `text`, `thickness` pixels wide. */
export const weightColorbar = (text = "weight", thickness = 12) => ({
  title: { text, side: "right", font: { size: 11 } },
  thickness,
  len: 0.85,
  outlinewidth: 0,
});

/**
 * A head heatmap's axes: the keys along the top, the queries down the left (reversed: the first on top); `keys` the
 * key axis's tokens (by default the queries'), `axes` their names ({query, key}; by default the plain ones).
 */
export const headAxes = (tokens, maxTicks, keys = tokens, axes = null) => ({
  xaxis: tokenAxis(keys, { side: "top", title: axes?.key ?? "key (attended to)", maxTicks, angle: -55 }),
  yaxis: tokenAxis(tokens, { reversed: true, title: axes?.query ?? "query (attending)", maxTicks }),
});

/**
 * A head heatmap's layout: room for the token labels, the chosen query's row outlined, the title;
 * `fields` (its axes, uirevision, ...) complete it.
 */
export function headLayout({ tokens, keys = tokens, maxTicks, position, title }, fields) {
  return baseLayout({
    margin: { l: tokenMargins(tokens, maxTicks).l, t: tokenMargins(keys, maxTicks).t, r: 10, b: 10 },
    shapes: rowOutline(position, tokens.length, "x", "y", keys.length),
    title: heatmapTitle(title),
    ...fields,
  });
}

/**
 * The axes of a head heatmap, exact or pooled: fixed (the page zooms, zoom.js: a dragged box sets
 * `view`), and zoomed in on `view` ({q0, q1, k0, k1}, null for the whole head) with ticks where the
 * zoomed axis can show them: about maxTicks over the tokens in view.
 */
export function zoomedAxes(tokens, view, maxTicks, keys = tokens, axes = null) {
  const { xaxis, yaxis } = headAxes(tokens, maxTicks, keys, axes);
  xaxis.fixedrange = true;
  yaxis.fixedrange = true;
  if (!view) return { xaxis, yaxis };
  xaxis.range = [view.k0 - 0.5, view.k1 - 0.5];
  yaxis.range = [view.q1 - 0.5, view.q0 - 0.5];
  const step = Math.max(1, Math.ceil(Math.max(view.k1 - view.k0, view.q1 - view.q0) / maxTicks));
  for (const [axis, a, b, names] of [
    [xaxis, view.k0, view.k1, keys],
    [yaxis, view.q0, view.q1, tokens],
  ]) {
    axis.tickvals = [];
    axis.ticktext = [];
    for (let t = Math.ceil(a / step) * step; t < b; t += step) {
      axis.tickvals.push(t);
      axis.ticktext.push(shortToken(names[t]));
    }
  }
  return { xaxis, yaxis };
}
