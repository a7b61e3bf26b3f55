// The "Next token" card: the model's top guesses after the chosen token, from the chosen-head
// answer (its `predictions` hold every position), each bar as long as its probability; and
// under them what the text goes on with. On an encoder (a masked LM) the guesses are at the chosen
// token, not after it: the card says so and compares them with the token that is there. On an encoder–decoder
// they are the decoder's, at the target's tokens (none on the encoder stack's source rows). An answer for
// another text, what-if or temperature is dimmed and says so until the new one is in.

import { idOf, setText } from "../dom.js";
import { changedInputs, outOfDateWords } from "../measured.js";
import { selectedPosition } from "../state.js";
import { querySide } from "../stacks.js";

/** The predictions card from `state.detail` (whatever head it was asked for: the guesses do not depend on it). */
export function renderPredictions(state, els) {
  const d = state.detail;
  if (!d?.response?.predictions || !d.response.tokens) return;
  // the guesses follow the chosen token (every position is in the answer); another text or
  // what-if, or another temperature, needs a new answer: until it is in, the card says so
  const changed = changedInputs({ ...d.inputs, temperature: d.temperature }, state);
  els.predictions.classList.toggle("stale", changed.length > 0);
  if (querySide(state) === "source" && state.model.architecture === "encoder-decoder") {
    // the encoder stack's rows are the source's tokens; the decoder's guesses are at the target's
    setText(els.predictionsTitle, "The decoder guesses each next token of the target: choose the Decoder or Cross " +
      "stack to see its guesses.");
    els.predictionsList.replaceChildren();
    els.predictionsList.dataset.signature = "";
    setText(els.predictionsActual, "");
    return;
  }
  const { tokens, predictions } = d.response;
  const T = tokens.length;
  const p = selectedPosition(state, T);
  const encoder = state.model?.architecture === "encoder";
  const actual = encoder ? tokens[p] : p + 1 < T ? tokens[p + 1] : null;
  setText(els.predictions.querySelector("h2"), encoder ? "Guesses at this position" : "Next token");
  const rows = predictions[p] ?? [];
  setText(
    els.predictionsActual,
    changed.length
      ? outOfDateWords(changed, "these guesses were measured")
      : encoder
        ? atWords(rows, actual)
        : actualWords(rows, actual),
  );
  const sig = `${idOf(d.response)}|${p}`;
  if (els.predictionsList.dataset.signature === sig) return;
  els.predictionsList.dataset.signature = sig;
  els.predictionsTitle.replaceChildren();
  const lead = document.createTextNode(encoder ? "At " : "After ");
  const tok = document.createElement("code");
  tok.textContent = tokens[p];
  const where = document.createTextNode(` (position ${p})`);
  els.predictionsTitle.append(lead, tok, where);
  const list = document.createDocumentFragment();
  rows.forEach((pred, rank) => {
    const li = document.createElement("li");
    if (actual !== null && pred.token === actual) li.classList.add("actual");
    const name = document.createElement("span");
    name.className = "pred-token";
    name.textContent = pred.token;
    const bar = document.createElement("span");
    bar.className = "pred-bar";
    const fill = document.createElement("span");
    // the whole track is probability 1: a bar is as long as its probability, not scaled to the top guess
    fill.style.width = `${100 * pred.prob}%`;
    bar.append(fill);
    const pct = document.createElement("span");
    pct.className = "pred-prob";
    pct.textContent = pred.prob < 0.0005 ? "<0.1%" : `${(100 * pred.prob).toFixed(pred.prob < 0.1 ? 1 : 0)}%`;
    li.title = `#${rank + 1}: ${pred.token} (id ${pred.id}) p = ${pred.prob.toFixed(4)}`;
    li.append(name, bar, pct);
    list.append(li);
  });
  els.predictionsList.replaceChildren(list);
}

/** Under an encoder's list: the token that is there, and where that is among the masked LM's guesses. */
function atWords(rows, actual) {
  const rank = rows.findIndex((r) => r.token === actual);
  const what = "The masked-LM head's guesses for the token at this position";
  return rank >= 0
    ? `${what}: “${actual}” is there, its #${rank + 1} guess.`
    : `${what}: “${actual}” is there, not in its top ${rows.length}.`;
}

/** Under the list: what the text goes on with, and where that is among the guesses. */
function actualWords(rows, actual) {
  if (actual === null) return "This is the last token: the model's guess for what comes next.";
  const rank = rows.findIndex((r) => r.token === actual);
  return rank >= 0
    ? `The text continues with “${actual}”, the model's #${rank + 1} guess.`
    : `The text continues with “${actual}”, not in the model's top ${rows.length}.`;
}
