// The head view's knockout (POST /api/knockout): cells of the chosen head's heatmap, picked with a
// click (a shift-click adds the box from the last clicked cell to this one), set to −∞ before the
// softmax in this head or in every head of the layer; the chosen position's top guesses after,
// and log p(token) before → after, all the server's numbers. The cells are marked on the heatmap
// and kept in the link (`ko=21.10,3-5.0-2`: query.key, a range inclusive; `koall=1`).

import { answerIn, question } from "../answers.js";
import { byId, setHidden, setText } from "../dom.js";
import { fmtFixed } from "../draw/figures.js";
import { currentGrid, selectedPosition } from "../state.js";
import { subject } from "../subject.js";

/** Its part of the head view's slice: the cells ({query: [a, b], key: [c, d]}, half-open), the switch, the answer. */
export const knockoutState = { knockout: [], knockoutAll: false, knockoutAnchor: null, knockoutAnswer: null };

const span = ([a, b]) => (b - a === 1 ? `${a}` : `${a}-${b - 1}`);

/** `ko=` of the link: each cell or box as query.key, a range written inclusive (3-5). */
export const cellsParam = (cells) => cells.map((c) => `${span(c.query)}.${span(c.key)}`).join(",");

/** The cells of a link's `ko=`; what does not read as query.key is left out. */
export function parseCells(text) {
  const range = (s) => {
    const m = /^(\d+)(?:-(\d+))?$/.exec(s);
    if (!m) return null;
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    return b >= a ? [a, b + 1] : null;
  };
  const cells = [];
  for (const part of (text ?? "").split(",")) {
    const [q, k, extra] = part.split(".");
    const query = range(q ?? "");
    const key = range(k ?? "");
    if (query && key && extra === undefined) cells.push({ query, key });
  }
  return cells;
}

const inside = (c, q, k) => q >= c.query[0] && q < c.query[1] && k >= c.key[0] && k < c.key[1];

/** Box `c` without cell (q, k) inside it: up to four boxes, the rows above and below, and that row's two sides. */
function without(c, q, k) {
  const parts = [
    { query: [c.query[0], q], key: c.key },
    { query: [q + 1, c.query[1]], key: c.key },
    { query: [q, q + 1], key: [c.key[0], k] },
    { query: [q, q + 1], key: [k + 1, c.key[1]] },
  ];
  return parts.filter((p) => p.query[1] > p.query[0] && p.key[1] > p.key[0]);
}

/**
 * A click on cell (q, k) in knockout mode: a marked cell is taken back, that one cell (a box holding it
 * keeps the rest); else the cell is added, or with `shift` the box from the last clicked cell to this one.
 */
export function toggleCell(state, q, k, shift) {
  if (!shift && state.knockout.some((c) => inside(c, q, k))) {
    state.knockout = state.knockout.flatMap((c) => (inside(c, q, k) ? without(c, q, k) : [c]));
    return;
  }
  const a = shift && state.knockoutAnchor ? state.knockoutAnchor : { query: q, key: k };
  const box = {
    query: [Math.min(a.query, q), Math.max(a.query, q) + 1],
    key: [Math.min(a.key, k), Math.max(a.key, k) + 1],
  };
  state.knockout = [...state.knockout.filter((c) => !(shift && inside(c, a.query, a.key))), box];
  state.knockoutAnchor = { query: q, key: k };
}

/** The cells inside a text of `T` tokens (a shorter text keeps what still fits). */
export const cellsIn = (cells, T) =>
  cells
    .filter((c) => c.query[0] < T && c.key[0] < T)
    .map((c) => ({ query: [c.query[0], Math.min(c.query[1], T)], key: [c.key[0], Math.min(c.key[1], T)] }));

/** Plotly shapes marking the knocked-out cells on the heatmap (token coordinates, pooled or not). */
export const knockoutShapes = (cells) =>
  cells.map((c) => ({
    type: "rect",
    xref: "x",
    yref: "y",
    x0: c.key[0] - 0.5,
    x1: c.key[1] - 0.5,
    y0: c.query[0] - 0.5,
    y1: c.query[1] - 0.5,
    line: { color: "#ff3b30", width: 2 },
    fillcolor: "rgba(255, 59, 48, 0.35)",
  }));

/** What the page has on that the causal routes do not take, in words; [] when the heatmap is the model as trained. */
export function whatIfsOn(state) {
  const on = [];
  if (!state.causal) on.push("the mask removed");
  if (!state.scaled) on.push("the scaling off");
  if (state.ablate.length) on.push(`${state.ablate.length} head${state.ablate.length > 1 ? "s" : ""} switched off`);
  return on;
}

/** The sentence saying a causal answer is the model as trained while the heatmap shows a what-if; "" without one. */
export function asTrainedWords(state, what) {
  const on = whatIfsOn(state);
  if (!on.length) return "";
  return (
    ` These numbers are the model as trained: ${what} does not take the what-ifs, so it runs without ` +
    `${on.join(", ")}, unlike the heatmap above.`
  );
}

const edgeSpan = ([a, b]) => (b - a === 1 ? a : [a, b]);

/** The request's edges: each cell or box of the chosen layer, in the chosen head or (the switch) every head. */
const edgesOf = (state, cells) =>
  cells.map((c) => ({
    layer: state.layer,
    ...(state.knockoutAll ? {} : { head: state.head }),
    query: edgeSpan(c.query),
    key: edgeSpan(c.key),
  }));

/** The knockout of the marked cells at the chosen position: its question, or null while no cell is marked. */
export function knockoutQuestion(state) {
  const tokens = currentGrid(state)?.tokens;
  const cells = tokens ? cellsIn(state.knockout, tokens.length) : [];
  if (!cells.length) return null;
  const url = "/api/knockout";
  const position = selectedPosition(state, tokens.length);
  return question("knockoutAnswer", url, { ...subject(state, url), edges: edgesOf(state, cells), position });
}

/** The switch and the clear button; `app`: {state, update}. */
export function installKnockout(app) {
  const all = byId("knockout-all");
  if (!all) return;
  all.addEventListener("change", () => {
    app.state.knockoutAll = all.checked;
    app.update();
  });
  byId("knockout-clear").addEventListener("click", () => {
    app.state.knockout = [];
    app.state.knockoutAnchor = null;
    app.update();
  });
}

const cellWords = (tokens, c) => {
  const side = ([a, b]) => (b - a === 1 ? `${a} “${tokens[a]}”` : `${a}–${b - 1}`);
  return `${side(c.query)} → ${side(c.key)}`;
};

/** The top guesses after the knockout, as a list. */
function drawTop(list, top) {
  const sig = JSON.stringify(top ?? []);
  if (list.dataset.signature === sig) return;
  list.dataset.signature = sig;
  list.replaceChildren(
    ...(top ?? []).map((p) => {
      const li = document.createElement("li");
      li.textContent = `“${p.token}” ${fmtFixed(p.prob, 3)}`;
      return li;
    }),
  );
}

/** The words of an answer: what was knocked out, and log p(token) before → after at the position. */
function answerWords(state, tokens, cells, a) {
  const where = state.knockoutAll ? `every head of layer ${state.layer}` : `L${state.layer}H${state.head}`;
  const n = cells.reduce((s, c) => s + (c.query[1] - c.query[0]) * (c.key[1] - c.key[0]), 0);
  return (
    `Knocked out in ${where}: ${n} cell${n > 1 ? "s" : ""} (query → key: ` +
    `${cells.map((c) => cellWords(tokens, c)).join(", ")}), each set to −∞ before the softmax, its row ` +
    `renormalising over the keys it keeps. log p(“${a.token}”) after “${a.tokens[a.position]}” (token ` +
    `${a.position}): ${fmtFixed(a.logprob_before, 3)} → ${fmtFixed(a.logprob_after, 3)}. Its top guesses after:`
  );
}

/** Draw the knockout box: the hint, the refusal, or the answer (asked by the head view's `need`). */
export function drawKnockout(state) {
  const box = byId("knockout-box");
  if (!box) return; // the notebook widget has no knockout
  const all = byId("knockout-all");
  if (all.checked !== state.knockoutAll) all.checked = state.knockoutAll;
  const tokens = currentGrid(state)?.tokens;
  const cells = tokens ? cellsIn(state.knockout, tokens.length) : [];
  setHidden(box, state.cellMode !== "knockout" && !cells.length);
  setHidden(byId("knockout-clear"), !cells.length);
  const caption = byId("knockout-caption");
  const list = byId("knockout-top");
  if (!tokens || !cells.length) {
    setText(caption, "Click cells of the heatmap to knock them out (a shift-click: the box from the last cell).");
    drawTop(list, null);
    return;
  }
  const { response, error } = answerIn(state, knockoutQuestion(state));
  let words = "computing…";
  if (error) words = `Not knocked out: ${error}`;
  else if (response) words = answerWords(state, tokens, cells, response) + asTrainedWords(state, "the knockout");
  setText(caption, words);
  drawTop(list, response ? response.predictions[response.position] : null);
}
