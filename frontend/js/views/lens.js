// The "Lens" view: the logit lens (POST /api/lens). A layer × token table: each cell the top guess
// after that block at that token, the model's final norm and unembedding applied to the residual
// stream there, shaded by its probability (the answer's); the last row is the model's own
// prediction; a cell's title holds the top k. It follows the text and marks the chosen token; the
// route runs the model as trained, so with a what-if on the view says so.

import { answerFor, askInto } from "../answers.js";
import { byId, idOf, setHidden, setText } from "../dom.js";
import { asTrainedWords } from "../draw/causal.js";
import { shortToken } from "../draw/figures.js";
import { imageField, imageId, selectedPosition, textTokens } from "../state.js";

export const id = "lens";
export const label = "Lens";
/** Its slice: guesses per cell in the hover, and POST /api/lens {key, response, error}. */
export const state = { lensTopK: 5, lens: null };
export const answers = ["lens"];
const TOP_K = [3, 5, 10, 20];
/** `lensk=`: the guesses per cell (5 unless given). */
export const link = {
  read(params, out) {
    const k = Number(params.get("lensk"));
    if (TOP_K.includes(k)) out.lensTopK = k;
  },
  write(s, params) {
    if (s.lensTopK !== 5) params.set("lensk", String(s.lensTopK));
  },
};
/** Its own request, asked for by draw when the view is shown. */
export const needs = [];

const lensKey = (state) => JSON.stringify([state.model?.name, state.text, imageId(state), state.lensTopK]);

/** The top-k select. */
export function install(app) {
  const select = byId("lens-k");
  select.replaceChildren(...TOP_K.map((k) => new Option(`top ${k}`, String(k))));
  select.value = String(app.state.lensTopK);
  select.addEventListener("change", () => {
    app.state.lensTopK = Number(select.value);
    app.update();
  });
}

/** A residual's row label: "embeddings", "after block 2", the last one the model's own prediction. */
export function rowLabel(after, last) {
  if (after === "embed") return "embeddings";
  return last ? `block ${after}: the output` : `after block ${after}`;
}

/** "␣window 0.765" lines: a cell's top k, for its title. */
const topWords = (top) => top.map((p) => `${p.token} ${p.prob.toFixed(3)}`).join("\n");

/** One cell: the top guess, its background as dark as its probability, the top k in its title. */
function cell(top, position, after) {
  const td = document.createElement("td");
  const best = top[0];
  td.textContent = shortToken(best.token, 10);
  td.style.setProperty("--p", String(best.prob));
  td.dataset.prob = String(best.prob);
  td.dataset.position = String(position);
  td.title = `after ${after === "embed" ? "the embeddings" : `block ${after}`}, token ${position}:\n${topWords(top)}`;
  return td;
}

/** The table of a lens answer: a header of the tokens, then one row per residual. */
export function lensTable({ tokens, residuals }) {
  const table = document.createElement("table");
  table.className = "lens-table";
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  tokens.forEach((t, i) => {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = shortToken(t, 10);
    th.title = `${i} ${t}`;
    th.dataset.position = String(i);
    head.append(th);
  });
  const body = table.createTBody();
  residuals.forEach((r, n) => {
    const row = body.insertRow();
    if (n === residuals.length - 1) row.className = "lens-output";
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = rowLabel(r.after, n === residuals.length - 1);
    row.append(th, ...r.top.map((top, i) => cell(top, i, r.after)));
  });
  return table;
}

/** Mark the chosen token's column, and scroll it into the box's view when it moved. */
function markChosen(box, position) {
  if (box.dataset.chosen === String(position)) return;
  box.dataset.chosen = String(position);
  for (const el of box.querySelectorAll(".chosen")) el.classList.remove("chosen");
  const cells = box.querySelectorAll(`[data-position="${position}"]`);
  for (const el of cells) el.classList.add("chosen");
  if (cells[0]) box.scrollLeft = Math.max(0, cells[0].offsetLeft - box.clientWidth / 2);
}

const ABOUT =
  "What the model would predict if it stopped early: its final norm and unembedding applied to the residual " +
  "stream after the embeddings and after each block (the logit lens). Each cell is the top guess for the " +
  "token after the one above it, darker the more probable; hover a cell for the top guesses. The last row " +
  "is the model's own prediction.";

export function draw(state, els, app = null) {
  const select = byId("lens-k");
  if (select.value !== String(state.lensTopK)) select.value = String(state.lensTopK);
  const note = asTrainedWords(state, "The lens shows");
  setText(byId("lens-note"), note ?? "");
  setHidden(byId("lens-note"), !note);
  const box = byId("lens-box");
  if (!state.text.trim()) {
    setHidden(box, true);
    setText(byId("lens-caption"), "Type a text to see what the model would guess after each block.");
    return false;
  }
  const key = lensKey(state);
  const body = { text: state.text, ...imageField(state), top_k: state.lensTopK };
  const ask = app && (() => askInto(app, "lens", key, "/api/lens", body));
  const { response, error } = answerFor(state, "lens", key, ask);
  setText(byId("lens-caption"), error ? `Could not compute the lens: ${error}` : response ? ABOUT : "computing…");
  setHidden(box, !response); // nothing stale under a refusal
  if (!response) return false;
  const sig = String(idOf(response));
  if (box.dataset.signature !== sig) {
    box.dataset.signature = sig;
    delete box.dataset.chosen;
    box.replaceChildren(lensTable(response));
  }
  const tokens = textTokens(state) ?? response.tokens;
  markChosen(box, selectedPosition(state, tokens.length));
  return true;
}
