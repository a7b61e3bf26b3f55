// "This head writes": under the head view's heatmap, where the server loaded a Jacobian lens (/api/model
// `jlens`), what the chosen head's write into the residual stream says at each token, read by that lens
// (POST /api/lens with `lens: "jacobian"` and `heads`: W_U · norm(J_l · write)). One row per query token,
// as the heatmap's rows: the token, then the top guesses of the head's write there (the answer's numbers).
// The chosen token's row is marked. Nothing is drawn, and nothing asked, without a lens.

import { answerIn, question } from "../answers.js";
import { idOf, mount, setHidden, setText } from "../dom.js";
import { asTrainedWords } from "../draw/causal.js";
import { shortToken } from "../draw/figures.js";
import { selectedPosition } from "../state.js";
import { blankSubject, subject } from "../subject.js";

const SHOWN = 3; // guesses per row (the answer holds the Lens view's top k)

/** The box under the heatmap, made once. */
function box() {
  let el = document.getElementById("head-writes");
  if (!el) {
    el = mount("section", "cell-box head-writes", "head-writes",
      '<h3>What this head writes <span class="muted small">(Jacobian lens)</span></h3>' +
      '<p class="small" data-testid="head-writes-caption"></p><ol class="head-writes-rows"></ol>').root;
    el.id = "head-writes";
    document.getElementById("head-heatmap").after(el);
  }
  return el;
}

/** Every head's write read by the Jacobian lens: its question where the server loaded one, else null. */
export function headWritesQuestion(state) {
  if (!state.model?.jlens || blankSubject(state)) return null;
  const url = "/api/lens";
  return question("headWrites", url, { ...subject(state, url), top_k: state.lensTopK, lens: "jacobian", heads: true });
}

/** Draw the chosen head's column; returns whether it is drawn. */
export function drawHeadWrites(state) {
  const lens = state.model?.jlens;
  const el = lens || document.getElementById("head-writes") ? box() : null;
  if (!el) return false;
  const q = headWritesQuestion(state);
  setHidden(el, !q);
  if (!q) return false;
  const { response, error } = answerIn(state, q);
  const caption = el.querySelector("[data-testid=head-writes-caption]");
  const rows = el.querySelector("ol");
  const perHead = response?.heads?.[state.layer];
  if (!response) {
    setText(caption, error ? `Could not read the head's write: ${error}` : "computing…");
    rows.replaceChildren();
    delete rows.dataset.signature;
    return false;
  }
  if (!perHead) {
    setText(caption, `The Jacobian lens has no J for block ${state.layer}: its heads' writes are not read.`);
    rows.replaceChildren();
    delete rows.dataset.signature;
    return true;
  }
  const asTrained = asTrainedWords(state, "It reads");
  setText(caption, `Layer ${state.layer} · head ${state.head}: its write into the residual stream at each ` +
    `token, carried to the last block by J (averaged over ${lens.n_prompts} prompt` +
    `${lens.n_prompts === 1 ? "" : "s"}) and read by the final norm ` +
    "and unembedding: what this head pushes the model to say later. A reading, not a share of the logit." +
    (asTrained ? ` ${asTrained}` : ""));
  const position = selectedPosition(state, response.tokens.length);
  const sig = `${idOf(response)}|${state.layer}|${state.head}|${position}`;
  if (rows.dataset.signature === sig) return true;
  rows.dataset.signature = sig;
  rows.replaceChildren(...perHead[state.head].top.map((guesses, t) => {
    const li = document.createElement("li");
    li.dataset.position = String(t);
    li.classList.toggle("chosen", t === position);
    const words = guesses.slice(0, SHOWN).map((p) => `${shortToken(p.token, 12)} ${p.prob.toFixed(2)}`);
    li.textContent = `${t} ${shortToken(response.tokens[t], 12)} → ${words.join(" · ")}`;
    return li;
  }));
  return true;
}
