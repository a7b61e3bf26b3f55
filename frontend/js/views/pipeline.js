// The "Mask pipeline" view: one head step by step, q·kᵀ → ÷ divisor → (softcap) → masked → softmax,
// each panel drawn from the server's own numbers, with the notes that say what each step did.

import { divisorShort, divisorWords, maskKinds, num, pipelineNotes, softcapWords, unscaled } from "../draw/captions.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
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
import { blockSpan, currentHead, spanWords } from "../draw/pooled.js";
import { headDim } from "../state.js";
import { imageMaskWords, imageRun } from "../draw/imageband.js";
import { imageMask } from "../draw/imagemap.js";
import { quirkWords } from "../draw/quirks.js";
import { tokenBands, withBands } from "../draw/quirkbands.js";

export const id = "pipeline";
export const label = "Mask pipeline";
export const needs = ["detail"];

/**
 * What the mask does inside the image (null without one, or when the mask is max-pooled): read from the answer's
 * exact mask, for the pipeline's notes.
 */
function imageNotes(detail, d, layer) {
  const kinds = detail.token_kinds;
  if (!imageRun(kinds) || d.block > 1) return null;
  const shape = imageMask(d.mask, kinds);
  return { open: shape === "both ways" || shape === "windowed", words: imageMaskWords(d.mask, kinds, layer) };
}

/** Draw the view from the current chosen-head answer; false while there is none. */
export function draw(state) {
  const head = currentHead(state);
  if (!head) return false;
  // the server's own numbers and words: its q·kᵀ, its scores before and after the softcap
  // (masked entries null), the layer's divisor, softcap, window and mask
  const { detail, layer, d } = head;
  const T = detail.tokens.length;
  // a head of two softmaxes (a quirk's weights parts): the steps are its first softmax's (the head view draws both)
  const first = firstPart(state.model, d);
  const pattern = first ?? d.pattern;
  // a long text's matrices are max-pooled: the rows and columns are blocks of tokens
  const spans = d.block > 1 ? d.pattern.map((_, c) => blockSpan(T, d.block, c)) : null;
  const cells = spans && {
    rows: spans.map(([a, b]) => `queries ${spanWords(detail.tokens, a, b)}`),
    cols: spans.map(([a, b]) => `keys ${spanWords(detail.tokens, a, b)}`),
  };
  const kinds = maskKinds(d.mask);
  const columns = window.matchMedia(NARROW).matches ? 2 : null;
  // the answer's bands along each step's tokens (quirkbands.js); a pooled picture's cells are blocks: none
  const bands = cells ? [] : tokenBands(state.model, detail);
  drawPlot(
    byId("mask-steps"),
    `${idOf(detail)}|${columns}`,
    () =>
      withSteps(bands, detail.tokens, maskStepsFigure({
        tokens: detail.tokens,
        raw: d.attn_scores_raw,
        uncapped: d.attn_scores_uncapped,
        scores: d.attn_scores,
        mask: d.mask,
        pattern,
        layer,
        kinds,
        causal: detail.causal || encoderOf(state),
        cells,
        columns,
      })),
    "attnscope-mask-steps",
  );
  const image = imageNotes(detail, d, layer.layer);
  const encoder = encoderOf(state);
  const notes = pipelineNotes({ causal: detail.causal, layer, kinds, headDim: headDim(state), image, encoder });
  const list = byId("pipeline-notes");
  if (list.children.length !== notes.length) {
    list.replaceChildren(...notes.map(() => document.createElement("li")));
    list.style.setProperty("--steps", String(notes.length));
  }
  [...list.children].forEach((li, i) => setText(li, notes[i]));
  if (cells) {
    // row sums need every cell of a row; these cells are block maxima
    setText(
      byId("row-sums"),
      `${T} tokens, drawn as ${d.pattern.length}×${d.pattern.length} cells: each is the largest value of a ` +
        `${d.block}×${d.block} block of queries and keys, so a row of this picture is not a row of the softmax, ` +
        `and its cells do not sum to 1 (every softmax row does).`,
    );
  } else {
    const sums = pattern.map((row) => row.reduce((a, v) => a + v, 0));
    const lo = Math.min(...sums);
    const hi = Math.max(...sums);
    setText(byId("row-sums"), rowSumWords(state.model, lo, hi, layer, d));
  }
  const words = unscaled(layer) ? "1 (what-if: no scaling)" : divisorWords(layer, headDim(state));
  setText(
    byId("pipeline-divisor"),
    layer.softcap ? `${words}, then the softcap ${softcapWords(layer.softcap)}` : words,
  );
  return true;
}

/**
 * What the Σ row column says: rows sum to 1, or what the layer's quirks say they sum to (`sums`), then what else
 * its quirks say of these steps (`steps`). `d`: the head's fields.
 */
export function rowSumWords(model, lo, hi, layer, d) {
  const range = `the smallest row sum is ${lo.toFixed(6)}, the largest ${hi.toFixed(6)}`;
  const sums = quirkWords(model, "sums", { layer, fields: d });
  const head = sums ? `${sums}: ${range}.` : `After softmax every row sums to 1: ${range}.`;
  return head + quirkWords(model, "steps", { layer, fields: d });
}

/** The steps' figure with the answer's bands along every step's keys and queries (the row sums' panel aside). */
function withSteps(bands, tokens, fig) {
  const pairs = fig.data.filter((t) => t.coloraxis).map((t) => [t.xaxis, t.yaxis]);
  return withBands(fig, { tokens, bands, expanded: true, pairs });
}

/** The first of a head's weights parts (a head of two softmaxes), null for a head of one. */
function firstPart(model, d) {
  const f = (model?.fields ?? []).find((x) => x.sits === "parts" && x.kind === "parts" && d[x.name]);
  return f ? d[f.name][0] : null;
}

const CIRCLED = ["①", "②", "③", "④", "⑤", "⑥"];
/** Below this width the steps stand in two rows (style.css gives the plot the height for them). */
const NARROW = "(max-width: 600px)";

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

/** Whether the loaded model is an encoder: its mask is its own (all visible, or a local band), never a what-if. */
function encoderOf(state) {
  return state.model?.architecture === "encoder";
}

/**
 * The steps' panels, in order: each its matrix `z`, its colour axis, its title and hover, and
 * `hatched` on the masked step. On a phone (`narrow`) a title's value and range stand on lines of
 * their own: panels are ~110 px wide.
 */
function stepPanels({ raw, uncapped, scores, mask, pattern, layer, kinds, causal, cells, narrow }) {
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
  const maskTitle = kinds.any
    ? `masked_fill(−∞)${sub("hatched = −∞")}`
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

/** Hidden, fixed axes a panel, T cells a side (the row sums' one cell wide, the panel after the `n` steps). */
function addPanelAxes(layout, doms, n, T) {
  const axis = { visible: false, fixedrange: true };
  doms.forEach((dom, i) => {
    const id = axisId(i);
    const isSum = i === n;
    layout["xaxis" + id] = { ...axis, domain: dom.x, range: isSum ? [-0.5, 0.5] : [-0.5, T - 0.5], anchor: "y" + id };
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
  const { tokens, mask, pattern, cells = null, columns = null } = args;
  // `cells` ({rows, cols}: words per pooled row and column) for a long text's max-pooled matrices:
  // each value is a block's largest, so no row sums (those need every cell) and "largest" in the hover
  const T = cells ? cells.rows.length : tokens.length;
  const sums = cells ? null : rowSums(pattern).map((s) => [s]);
  const labels = cells ? cells.rows : tokens.map((t, i) => `${i} ${t}`);
  const cd = cells
    ? cells.rows.map((q) => cells.cols.map((k) => [q, k]))
    : labels.map((q) => labels.map((k) => [q, k]));
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
    margin: { l: 8, r: 8, t: narrow ? 60 : 46, b: 8 },
    coloraxis: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis2: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis3: { colorscale: WEIGHT_SCALE, cmin: 0, cmax: 1, showscale: false },
    annotations: [
      ...panelTitles(titles, doms, n),
      // past 20 rows the sums are too small to print in their cells: their range, written along the column
      ...(sums && T > 20 ? [sumsNote(sums, doms[n])] : []),
    ],
    images: hatchImages(mask, `x${axisId(hatchedAt)}`, `y${axisId(hatchedAt)}`, 24),
    uirevision: "steps",
  });
  addPanelAxes(layout, doms, n, T);
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
