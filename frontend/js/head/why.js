// The head view's "why it attends here" (POST /api/qk-attribution): for one clicked cell (query,
// key) of the chosen head, its raw score split into query-side × key-side terms of the residual
// stream entering the layer (the embeddings, each earlier head, each earlier MLP, the biases), a
// heatmap of the answer's `matrix` over its `components`, and the row and column sums of those
// terms beside it. The cell is marked on the heatmap and kept in the link (`why=21.10`). On an
// encoder–decoder's cross stack the key side's terms are the encoder's (`key_components`), and T5's
// relative position bias is the answer's own term (`position_bias`).

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setHidden, setText } from "../dom.js";
import { BLUE, ORANGE, SIGNED_SCALE, baseLayout, rowSums, signedRange } from "../draw/figures.js";
import { keyTokens } from "../stacks.js";
import { currentGrid } from "../state.js";
import { subject } from "../subject.js";
import { asTrainedWords, cellsIn, drawKnockout, knockoutShapes } from "./knockout.js";

/** Its part of the head view's slice: the clicked cell ({query, key} or null) and the answer. */
export const whyState = { whyCell: null, qk: null };

/** `why=` of the link: query.key. */
export const whyParam = (cell) => `${cell.query}.${cell.key}`;

/** The cell of a link's `why=`, or null. */
export function parseWhy(text) {
  const m = /^(\d+)\.(\d+)$/.exec(text ?? "");
  return m ? { query: Number(m[1]), key: Number(m[2]) } : null;
}

/** A ring around the clicked cell on the heatmap. */
export const whyShapes = (cell) =>
  cell
    ? [
        {
          type: "rect",
          xref: "x",
          yref: "y",
          x0: cell.key - 0.5,
          x1: cell.key + 0.5,
          y0: cell.query - 0.5,
          y1: cell.query + 0.5,
          line: { color: "#ffffff", width: 3 },
        },
      ]
    : [];

/** The clicked cell inside the current text, or null. */
function cellOf(state) {
  const grid = currentGrid(state);
  const [T, S] = grid ? [grid.tokens.length, keyTokens(state, grid).length] : [0, 0]; // a cross map: source keys
  return state.whyCell && state.whyCell.query < T && state.whyCell.key < S ? state.whyCell : null;
}

/** The split of the clicked cell's raw score: its question, or null while no cell is clicked. */
export function whyQuestion(state) {
  const cell = cellOf(state);
  if (!cell) return null;
  const url = "/api/qk-attribution";
  const { layer, head } = state;
  return question("qk", url, { ...subject(state, url), layer, head, query: cell.query, key: cell.key });
}

/** The terms as a heatmap: query-side components down, key-side across, on a signed scale centred on 0. */
export function whyFigure({ components, key_components, matrix }) {
  const r = signedRange(matrix);
  const n = Math.max(components.length, key_components?.length ?? 0);
  return {
    data: [
      {
        type: "heatmap",
        z: matrix,
        x: key_components ?? components,
        y: components,
        colorscale: SIGNED_SCALE,
        zmin: -r,
        zmax: r,
        xgap: n <= 40 ? 1 : 0,
        ygap: n <= 40 ? 1 : 0,
        hovertemplate: "query side <b>%{y}</b> × key side <b>%{x}</b>: %{z:.4f}<extra></extra>",
        colorbar: { title: { text: "term", side: "right", font: { size: 11 } }, thickness: 12, outlinewidth: 0 },
      },
    ],
    layout: baseLayout({
      margin: { l: 10, r: 10, t: 10, b: 10 },
      xaxis: {
        side: "top",
        tickangle: -55,
        automargin: true,
        title: { text: "key side", font: { size: 11 }, standoff: 6 },
        fixedrange: true,
      },
      yaxis: {
        autorange: "reversed",
        automargin: true,
        title: { text: "query side", font: { size: 11 }, standoff: 6 },
        fixedrange: true,
      },
      uirevision: "why",
    }),
  };
}

/** The sums of the shown terms: each query-side row (what the query looks with), each key-side column. */
export function whySumsFigure({ components, key_components, matrix }) {
  const rows = rowSums(matrix);
  const keys = key_components ?? components;
  const cols = keys.map((_, j) => matrix.reduce((s, row) => s + row[j], 0));
  const bar = (name, x, y, color, axis) => ({
    type: "bar",
    x,
    y,
    name,
    marker: { color },
    yaxis: axis,
    hovertemplate: `${name} of %{x}: %{y:.4f}<extra></extra>`,
  });
  return {
    data: [
      bar("row sum (query side)", components, rows, BLUE, "y"),
      bar("column sum (key side)", keys, cols, ORANGE, "y2"),
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 44, b: 70 },
      grid: { rows: 2, columns: 1, pattern: "coupled", roworder: "top to bottom" },
      xaxis: { tickangle: -55, fixedrange: true },
      yaxis: { title: { text: "rows", font: { size: 11 } }, fixedrange: true, zeroline: true },
      yaxis2: { title: { text: "columns", font: { size: 11 } }, fixedrange: true, zeroline: true },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      uirevision: "why-sums",
    }),
  };
}

/** The caption: the cell, the score, what is split and frozen, and that the terms add up to it. */
function whyWords(state, a, cell) {
  const parts = [
    `L${state.layer}H${state.head}, query ${cell.query} “${a.query_token}” → ` +
    `key ${cell.key} “${a.key_token}”: ` +
      `raw score ${a.score} (attn_scores_raw, q·kᵀ before the divisor, any softcap and the mask).`,
    whoseTerms(state, a) +
      `each taken through the query and the key projections as the model applies them, with ${a.frozen}. The ` +
      `${a.components.length} × ${(a.key_components ?? a.components).length} query-side × key-side terms add up ` +
      `to the raw score. ` +
      `Below them: the sums of the shown terms, per row (what the query looks with) and per column (what it ` +
      `matches on the key's side).`,
  ];
  if (a.position_bias !== undefined)
    parts.push(
      `The layer adds a term of its own after q·kᵀ, its relative position bias (${a.position_bias}): the raw ` +
        `score over the divisor plus it is the score the softmax sees, ${a.attn_scores}.`,
    );
  if (a.masked)
    parts.push(
      "The mask hides this key from this query: this is the q·kᵀ the model computes there, which gets weight 0.",
    );
  return parts.join(" ") + asTrainedWords(state, "this split");
}

/** Which stream the terms split: the layer's own, or on a cross stack the decoder's (queries) and the encoder's. */
function whoseTerms(state, a) {
  if (a.key_components)
    return (
      `The query side splits the decoder's residual stream entering this cross-attention into ` +
      `${a.components.length} components, the key side the encoder's output into ${a.key_components.length} ` +
      `(enc.…), `
    );
  return `The residual stream entering layer ${state.layer} is split into ${a.components.length} components, `;
}

/** Draw the why box: the hint, the refusal, or the split (asked by the head view's `need`). */
export function drawWhy(state) {
  const box = byId("why-box");
  if (!box) return; // the notebook widget has no split
  const cell = cellOf(state);
  setHidden(box, state.cellMode !== "why" && !cell);
  const caption = byId("why-caption");
  const plots = [byId("why-plot"), byId("why-sums")];
  const { response, error } = answerIn(state, whyQuestion(state));
  let words = "computing…";
  if (!cell) words = "Click a cell of the heatmap to see which earlier components write its query and its key.";
  else if (error) words = `Not split: ${error}`;
  else if (response) words = whyWords(state, response, cell);
  setText(caption, words);
  for (const el of plots) setHidden(el, !response);
  if (!response) return;
  const key = idOf(response);
  drawPlot(plots[0], `${key}|terms`, () => whyFigure(response), `attnscope-L${state.layer}H${state.head}-why`);
  drawPlot(plots[1], `${key}|sums`, () => whySumsFigure(response), `attnscope-L${state.layer}H${state.head}-sums`);
}

/** The shapes the cells' tools add to the heatmap: the knocked-out cells, the split cell's ring. */
export const cellMarks = (state, T) => [
  ...knockoutShapes(cellsIn(state.knockout, T)),
  ...whyShapes(state.whyCell && state.whyCell.query < T && state.whyCell.key < T ? state.whyCell : null),
];

/** The mode picker and the two boxes under the heatmap (the page's; the notebook widget has none). */
export function drawCellTools(state) {
  const picked = document.querySelector(`input[name=cell-mode][value=${state.cellMode}]`);
  if (picked && !picked.checked) picked.checked = true;
  drawKnockout(state);
  drawWhy(state);
}
