// The Mask pipeline view's figure (views/pipeline.js): one head's steps as small heatmaps side by side, q·kᵀ →
// ÷ divisor → (softcap) → masked → softmax, and the row sums, each panel the server's numbers. Its queries are the
// rows and its keys the columns: a cross stack's keys are the source's tokens, as many as they are.

import { divisorShort, num, softcapWords } from "../draw/captions.js";
import {
  INK,
  MUTED,
  SCORE_SCALE,
  WEIGHT_SCALE,
  baseLayout,
  fmtFixed,
  hatchImages,
  maskNull,
  rowSums,
  unmaskedValues,
} from "../draw/figures.js";

const CIRCLED = ["①", "②", "③", "④", "⑤", "⑥"];

/** The smallest and largest value a matrix holds, masked (null) cells aside; [0, 1] when it holds none. */
function valueRange(m) {
  const vals = unmaskedValues(m);
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of vals) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return vals.length ? [lo, hi] : [0, 1];
}

/**
 * The steps' panels, in order: each its matrix `z`, its colour axis, its title and hover, and
 * `hatched` on the masked step. On a phone (`narrow`) a title's value and range stand on lines of
 * their own: panels are ~110 px wide.
 */
function stepPanels({ raw, uncapped, scores, mask, pattern, layer, kinds, causal, visible, cells, narrow }) {
  const sub = (...parts) =>
    `<br><span style="font-size:10px;color:${MUTED}">${parts.join(narrow ? "<br>" : ", ")}</span>`;
  const span = (m, digits) => {
    const [lo, hi] = valueRange(m);
    return cells ? `largest ${fmtFixed(hi, digits)}` : `[${fmtFixed(lo, digits)}, ${fmtFixed(hi, digits)}]`;
  };
  const short = divisorShort(layer);
  const divisorValue = short.startsWith("√") ? [`= ${num(layer.divisor)}`] : [];
  const steps = [
    { z: raw, axis: "coloraxis", title: `q·kᵀ${sub(span(raw, 1))}`, hover: "q·kᵀ %{z:.3f}" },
    {
      z: uncapped ?? scores,
      axis: "coloraxis2",
      // the name on the title line, its value under it: long names (√query_pre_attn_scalar) fit a panel;
      // on a phone a long name is wider than a panel: "the divisor" there, named under the plot
      title: `÷ ${narrow && short.length > 8 ? "divisor" : short}${sub(...divisorValue, span(uncapped ?? scores, 2))}`,
      hover: `q·kᵀ ÷ ${short} %{z:.3f}`,
    },
  ];
  if (layer.softcap) {
    steps.push({
      z: scores,
      axis: "coloraxis2",
      title: `softcap${sub(softcapWords(layer.softcap), span(scores, 2))}`,
      hover: `${softcapWords(layer.softcap)} %{z:.3f}`,
    });
  }
  // a stack that sees every key (`visible`: an encoder's, cross-attention) masks nothing but a local layer's band
  const hidden = visible && layer.window ? "outside the band = −∞" : "hatched = −∞";
  const maskTitle = kinds.any
    ? `masked_fill(−∞)${sub(hidden)}`
    : visible
      ? `no mask${sub("all visible")}`
      : causal
        ? `masked_fill(−∞)${sub("nothing to mask")}`
        : `no mask (what-if)${sub("nothing hidden")}`;
  steps.push({
    z: maskNull(scores, mask),
    axis: "coloraxis2",
    title: maskTitle,
    hover: "score %{z:.3f}",
    hatched: true,
  });
  steps.push({ z: pattern, axis: "coloraxis3", title: `softmax${sub("rows → weights")}`, hover: "weight %{z:.4f}" });
  return steps;
}

/**
 * Where each of `n` panels stands ({x, y} paper domains), then the row sums' column beside the
 * softmax unless `cells` (pooled: no sums). `columns` panels a row (all in one row unless given: a
 * phone gets two rows of two), never more than two rows: the narrow plot's height is two rows'
 * (style.css); 5 steps (a softcap) stand 3 + 2.
 */
function panelDomains(n, { columns, narrow, cells }) {
  const perRow = Math.min(columns === null ? n : Math.max(columns, Math.ceil(n / 2)), n);
  const rows = Math.ceil(n / perRow);
  const gap = 0.03;
  const gapY = rows > 1 ? (narrow ? 0.17 : 0.12) : 0; // room for the next row's titles (three lines on a phone)
  const rowH = (1 - gapY * (rows - 1)) / rows;
  const sumW = cells ? 0 : perRow < n ? 0.07 : 0.045;
  const stepW = (1 - sumW - gap * perRow) / perRow;
  const rowOf = (r) => [1 - r * (rowH + gapY) - rowH, 1 - r * (rowH + gapY)];
  const doms = Array.from({ length: n }, (_, i) => ({
    x: [(i % perRow) * (stepW + gap), (i % perRow) * (stepW + gap) + stepW],
    y: rowOf(Math.floor(i / perRow)),
  }));
  if (!cells) doms.push({ x: [1 - sumW, 1], y: doms[n - 1].y }); // the row sums beside the softmax
  return doms;
}

const axisId = (i) => (i === 0 ? "" : String(i + 1));

/** The row sums as a one-column heatmap on the axes after the `n` steps', printed in their cells up to 20 rows. */
const sumsTrace = (sums, labels, n, T) => ({
  type: "heatmap",
  z: sums,
  x: [0],
  customdata: labels.map((l) => [[l]]), // one cell per row, its customdata the array [label]
  colorscale: [
    [0, "#f3f4f7"],
    [1, "#f3f4f7"],
  ],
  showscale: false,
  xaxis: `x${n + 1}`,
  yaxis: `y${n + 1}`,
  texttemplate: T <= 20 ? "%{z:.3f}" : "",
  textfont: { size: 9, color: INK },
  ygap: T <= 16 ? 1 : 0,
  hovertemplate: "row %{customdata[0]}<br>sum %{z:.6f}<extra></extra>",
});

/** Each panel's title centred over it (`n`: the steps, whose count sets the font). */
const panelTitles = (titles, doms, n) =>
  titles.map((text, i) => ({
    text,
    xref: "paper",
    yref: "paper",
    x: (doms[i].x[0] + doms[i].x[1]) / 2,
    xanchor: "center", // "auto" would anchor a title near an edge by that edge, off its panel
    y: doms[i].y[1],
    yanchor: "bottom",
    yshift: 4,
    showarrow: false,
    font: { size: n > 4 ? 11 : 12, color: INK },
  }));

/**
 * Hidden, fixed axes a panel, T rows and S columns (a cross stack's keys), the row sums' one cell wide (the panel
 * after the `n` steps).
 */
function addPanelAxes(layout, doms, n, T, S = T) {
  const axis = { visible: false, fixedrange: true };
  doms.forEach((dom, i) => {
    const id = axisId(i);
    const isSum = i === n;
    layout["xaxis" + id] = { ...axis, domain: dom.x, range: isSum ? [-0.5, 0.5] : [-0.5, S - 0.5], anchor: "y" + id };
    layout["yaxis" + id] = { ...axis, domain: dom.y, range: [T - 0.5, -0.5], anchor: "x" + id };
  });
}

/**
 * The steps of one head as small heatmaps, plus the row sums after softmax, each drawn from
 * the server's numbers: q·kᵀ (`raw`) → ÷ divisor (`uncapped`: the answer's
 * attn_scores_uncapped, or attn_scores where the layer has no softcap) → the softcap, where
 * `layer.softcap` is set (`scores`) → masked_fill(−∞) (`scores`, hatched where `mask` is 0)
 * → softmax (`pattern`). `kinds` (captions.maskKinds) says what the mask hides.
 */
export function maskStepsFigure(args) {
  const { tokens, keys = tokens, axes = null, mask, pattern, cells = null, columns = null } = args;
  // `cells` ({rows, cols}: words per pooled row and column) for a long text's max-pooled matrices:
  // each value is a block's largest, so no row sums (those need every cell) and "largest" in the hover
  // `keys` (a cross stack's: the source's tokens) on the columns, `axes` ({query, key}: stacks.js stackAxes) their
  // sides in words, under the panels and in every hover
  const T = cells ? cells.rows.length : tokens.length;
  const S = cells ? cells.cols.length : keys.length;
  const sums = cells ? null : rowSums(pattern).map((s) => [s]);
  const labels = cells ? cells.rows : tokens.map((t, i) => `${i} ${t}`);
  const keyLabels = cells ? cells.cols : keys.map((t, i) => `${i} ${t}`);
  const side = (name) => (axes ? `${axes[name].split(" ")[1]} ` : ""); // "target ", "source "
  const cd = labels.map((q) => keyLabels.map((k) => [side("query") + q, side("key") + k]));
  // on a phone (`columns` given) a title's value and range stand on lines of their own
  const narrow = columns !== null;
  const steps = stepPanels({ ...args, cells, narrow });
  const n = steps.length;
  const doms = panelDomains(n, { columns, narrow, cells });
  const hover = (what) =>
    `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${cells ? "largest " : ""}${what}<extra></extra>`;
  const common = { customdata: cd, hoverongaps: false, xgap: T <= 16 ? 1 : 0, ygap: T <= 16 ? 1 : 0 };
  const data = steps.map((step, i) => ({
    ...common,
    type: "heatmap",
    z: step.z,
    coloraxis: step.axis,
    xaxis: `x${axisId(i)}`,
    yaxis: `y${axisId(i)}`,
    hovertemplate: hover(step.hover),
  }));
  if (sums) data.push(sumsTrace(sums, labels, n, T));
  const titles = [...steps.map((step, i) => `${CIRCLED[i]} ${step.title}`), ...(sums ? ["Σ row"] : [])];
  const hatchedAt = steps.findIndex((step) => step.hatched);
  const layout = baseLayout({
    margin: { l: 8, r: 8, t: narrow ? 60 : 46, b: axes ? 24 : 8 },
    coloraxis: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis2: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis3: { colorscale: WEIGHT_SCALE, cmin: 0, cmax: 1, showscale: false },
    annotations: [
      ...panelTitles(titles, doms, n),
      // past 20 rows the sums are too small to print in their cells: their range, written along the column
      ...(sums && T > 20 ? [sumsNote(sums, doms[n])] : []),
      ...(axes ? [axesNote(axes)] : []),
    ],
    images: hatchImages(mask, `x${axisId(hatchedAt)}`, `y${axisId(hatchedAt)}`, 24),
    uirevision: "steps",
  });
  addPanelAxes(layout, doms, n, T, S);
  return { data, layout };
}

/** The row sums' smallest and largest, written along their column (`dom`: its x and y domains). */
function sumsNote(sums, dom) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const [s] of sums) {
    lo = Math.min(lo, s);
    hi = Math.max(hi, s);
  }
  return {
    text: `${fmtFixed(lo, 4)} … ${fmtFixed(hi, 4)}`,
    xref: "paper",
    yref: "paper",
    x: (dom.x[0] + dom.x[1]) / 2,
    y: (dom.y[0] + dom.y[1]) / 2,
    textangle: -90,
    showarrow: false,
    font: { size: 10, color: INK },
  };
}

/** Under the panels, whose tokens their rows and columns are (a model of several stacks): "rows: query: target …". */
const axesNote = (axes) => ({
  text: `rows: ${axes.query} · columns: ${axes.key}`,
  xref: "paper",
  yref: "paper",
  x: 0,
  xanchor: "left",
  y: 0,
  yanchor: "top",
  yshift: -4,
  showarrow: false,
  font: { size: 11, color: MUTED },
});
