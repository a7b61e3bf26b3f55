// The pieces every figure shares (colours, fonts, token axes, margins, the hatching of masked
// cells, number formats) and the chosen head's heatmap, which the head view and the scaling
// view both draw. Each view's own figures sit in its module (views/), the lessons' in
// lessons/figures.js.
//
// Pure functions: API data in, Plotly figure objects ({data, layout}) out. Matrices are arrays of
// rows, indexed [query][key] as in the API. Every number a figure shows is the server's; the
// words come from captions.js.

import { maskedWhy } from "./captions.js";

export const FONT_FAMILY =
  'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans", "Liberation Sans", Arial, sans-serif';
export const INK = "#1f2430";
export const MUTED = "#5c6370";
export const ACCENT = "#4338ca";
export const MASK_BG = "#eceef2";
export const HATCH_INK = "#c3c8d2"; // the stripes over MASK_BG on a masked cell
// Okabe–Ito colours: distinguishable with every common colour-vision deficiency.
export const BLUE = "#0072B2";
export const ORANGE = "#E69F00";
export const GREEN = "#009E73";
export const WEIGHT_SCALE = "Viridis";
export const SCORE_SCALE = "Cividis";
// things told apart by colour (heads in the Lines view, tokens in the Atlas's queries and keys):
// Okabe-Ito, then Tableau's, told apart by most eyes
export const QUALITATIVE = [
  "#0072B2",
  "#E69F00",
  "#009E73",
  "#CC79A7",
  "#D55E00",
  "#56B4E9",
  "#F0E442",
  "#000000",
  "#4E79A7",
  "#F28E2B",
  "#59A14F",
  "#B07AA1",
  "#E15759",
  "#76B7B2",
  "#EDC948",
  "#9C755F",
];
// THE diverging scale of every signed map on the page (a head's signed map, two texts or models, the why box,
// attribution, patching, head effects): Plotly's RdBu, centred on 0, red = positive (raises the logit, more),
// blue = negative; no view reverses it (docs/VIEWS.md)
export const SIGNED_SCALE = "RdBu";

/** The symmetric colour range of a signed matrix: its largest |value| (nulls skipped), at least 1e-6. */
export function signedRange(matrix) {
  let m = 1e-6;
  for (const row of matrix) for (const v of row) if (v != null && Math.abs(v) > m) m = Math.abs(v);
  return m;
}

export const MAX_TICKS_BIG = 40;

// ---------------------------------------------------------------- small helpers

/** At most `n` characters of a token label, with an ellipsis when cut. */
export function shortToken(token, n = 12) {
  return token.length > n ? token.slice(0, n - 1) + "…" : token;
}

/** Tick positions and labels for a token axis, thinned to about `maxTicks` labels. */
export function tokenTicks(tokens, maxTicks = MAX_TICKS_BIG, maxChars = 12) {
  const T = tokens.length;
  const step = Math.max(1, Math.ceil(T / maxTicks));
  const tickvals = [];
  const ticktext = [];
  for (let i = 0; i < T; i += step) {
    tickvals.push(i);
    ticktext.push(shortToken(tokens[i], maxChars));
  }
  return { tickvals, ticktext, step };
}

/** Copy of `matrix` with `null` wherever `mask` is 0: masked cells become gaps in a heatmap. */
export function maskNull(matrix, mask) {
  return matrix.map((row, i) => row.map((v, j) => (mask[i][j] ? v : null)));
}

/**
 * An array of `n` rows, each made by `makeRow(i)` on its first read and kept: the hover data of a large
 * heatmap (65,536 cells at 256 tokens) costs nothing until a tooltip or a test reads a row.
 */
export function lazyRows(n, makeRow) {
  const rows = new Array(n);
  for (let i = 0; i < n; i++)
    Object.defineProperty(rows, i, {
      get() {
        const row = makeRow(i);
        Object.defineProperty(rows, i, { value: row, writable: true, enumerable: true, configurable: true });
        return row;
      },
      enumerable: true,
      configurable: true,
    });
  return rows;
}

export const rowSums = (m) => m.map((row) => row.reduce((a, v) => a + (v ?? 0), 0));

/** Every non-null entry of a matrix, flattened. */
export function unmaskedValues(m) {
  const out = [];
  for (const row of m) for (const v of row) if (v !== null && v !== undefined) out.push(v);
  return out;
}

/** `v` with about three significant digits, fixed notation for ordinary sizes. */
export function fmtSig(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1000 || a < 1e-3) return v.toExponential(2);
  return v.toPrecision(3);
}

/** `v` with `digits` decimals, "–" for a missing number. */
export const fmtFixed = (v, digits = 3) =>
  v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits);

/**
 * A layout image that hatches the masked cells of one subplot (axis ids like "x", "x3").
 * `mask` is the T×T 0/1 mask (or a pooled one); the image is an SVG with one rectangle per
 * run of masked cells, filled with diagonal stripes, stretched over the subplot and drawn
 * below the heatmap, whose masked cells are gaps. A zero weight is a dark cell; a masked
 * key shows stripes. `stripes` sets roughly how many stripes cross the plot. A data: URI, so
 * nothing is requested over the network. Returns null when nothing is masked.
 */
export function hatchImage(mask, xaxis = "x", yaxis = "y", stripes = 60) {
  const n = mask.length; // rows
  const w = n ? mask[0].length : 0; // columns
  const runs = []; // [row, first masked column, one past the last]
  for (let i = 0; i < n; i++) {
    const row = mask[i];
    let j = 0;
    while (j < w) {
      if (row[j]) {
        j++;
        continue;
      }
      const a = j;
      while (j < w && !row[j]) j++;
      runs.push([i, a, j]);
    }
  }
  if (!runs.length) return null;
  const image = {
    xref: `${xaxis} domain`,
    yref: `${yaxis} domain`,
    x: 0,
    y: 1,
    sizex: 1,
    sizey: 1,
    sizing: "stretch",
    xanchor: "left",
    yanchor: "top",
    layer: "below",
    // the runs themselves, for a renderer that fills them with stripes (canvasplot.js) instead of the SVG
    hatch: { runs, rows: n, cols: w, stripes },
  };
  // the SVG, written when a renderer reads it (Plotly does; the canvas plot of the head view does not)
  Object.defineProperty(image, "source", { get: () => hatchSvg(runs, n, w, stripes), enumerable: true });
  return image;
}

/** The hatching of `hatchImage` as an SVG data: URI: one rectangle a run, filled with diagonal stripes. */
function hatchSvg(runs, n, w, stripes) {
  const path = runs.map(([i, a, b]) => `M${a} ${i}h${b - a}v1h${a - b}z`).join("");
  const s = n / stripes;
  const svg =
    `<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 ${w} ${n}' preserveAspectRatio='none'>` +
    `<defs><pattern id='h' patternUnits='userSpaceOnUse' width='${s}' height='${s}' patternTransform='rotate(45)'>` +
    `<rect width='${s}' height='${s}' fill='${MASK_BG}'/><rect width='${s * 0.3}' height='${s}' ` +
    `fill='${HATCH_INK}'/></pattern></defs>` +
    `<path d='${path}' fill='url(#h)'/></svg>`;
  return "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svg);
}

/** `hatchImage` as a list for `layout.images`: empty when nothing is masked. */
export const hatchImages = (...args) => {
  const img = hatchImage(...args);
  return img ? [img] : [];
};

export function baseLayout(extra = {}) {
  return {
    font: { family: FONT_FAMILY, size: 12, color: INK },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "#ffffff",
    // dark text on white, 15.9:1 (WCAG AA asks 4.5:1); Plotly would take the text colour from the border
    hoverlabel: { font: { family: FONT_FAMILY, size: 12, color: INK }, bgcolor: "#ffffff", bordercolor: "#4a5160" },
    autosize: true,
    ...extra,
  };
}

/** Font size of token tick labels: smaller as the axis gets crowded. */
const tickFontSize = (T) => (T > 64 ? 9 : T > 24 ? 10 : 11);

/** Rough pixel width of a label (system sans-serif averages about 0.6 em per character). */
const labelPx = (text, size) => Math.ceil(text.length * size * 0.6);

/**
 * Margins that fit the token labels: left for the query labels, top for the key labels
 * rotated by `angle` degrees. Computed here rather than with Plotly's automargin, which
 * costs a second layout pass on every draw.
 */
export function tokenMargins(tokens, maxTicks, angle = -55, titles = true) {
  const size = tickFontSize(tokens.length);
  const { ticktext } = tokenTicks(tokens, maxTicks);
  const widest = ticktext.reduce((w, t) => Math.max(w, labelPx(t, size)), 0);
  const a = (Math.abs(angle) * Math.PI) / 180;
  const extra = titles ? 22 : 4;
  return {
    l: Math.min(140, widest + extra + 6),
    t: Math.min(140, Math.ceil(widest * Math.sin(a) + size * Math.cos(a)) + extra + 4),
  };
}

export function tokenAxis(tokens, { side, reversed, title, maxTicks = MAX_TICKS_BIG, showLabels = true, angle }) {
  const T = tokens.length;
  const { tickvals, ticktext } = tokenTicks(tokens, maxTicks);
  return {
    tickmode: "array",
    tickvals: showLabels ? tickvals : [],
    ticktext: showLabels ? ticktext : [],
    range: reversed ? [T - 0.5, -0.5] : [-0.5, T - 0.5],
    side,
    tickangle: angle ?? 0,
    // "allow": Plotly's default here measures every label's box on each draw to hide the
    // ones that overflow the div, the costliest part of redrawing a labelled heatmap
    ticklabeloverflow: "allow",
    showgrid: false,
    zeroline: false,
    ticks: "",
    tickfont: { size: tickFontSize(T) },
    title: title ? { text: title, font: { size: 11, color: MUTED }, standoff: 4 } : undefined,
  };
}

/** A white-on-black outline around query row `p` (of `T` rows, `K` keys): the row whose predictions are shown. */
export function rowOutline(p, T, xref = "x", yref = "y", K = T) {
  if (p === null || p === undefined || p < 0 || p >= T) return [];
  const box = { type: "rect", xref, yref, x0: -0.5, x1: K - 0.5, y0: p - 0.5, y1: p + 0.5, layer: "above" };
  return [
    { ...box, line: { color: "#000000", width: 3 } },
    { ...box, line: { color: "#ffffff", width: 1.5 } },
  ];
}

// ---------------------------------------------------------------- head view

/**
 * Per cell of `mask`, why the key is masked (the words of captions.js), null where it is
 * seen; one string per kind of reason, shared by the cells.
 */
export function maskedReasons(mask, window = null, chunk = null) {
  const words = new Map();
  return lazyRows(mask.length, (i) =>
    Array.from(mask[i], (seen, j) => {
      if (seen) return null;
      const kind = Math.sign(j - i);
      if (!words.has(kind)) words.set(kind, maskedWhy({ mask, i, j, window, chunk }));
      return words.get(kind);
    }),
  );
}

/** Whether any cell of `mask` is masked (0). */
export const anyMasked = (mask) => mask.some((row) => Array.prototype.some.call(row, (seen) => !seen));
