// The stack picker (Encoder · Decoder · Cross) in the view bar, shown where GET /api/model `stacks` has more than
// one (an encoder–decoder). A click chooses `state.stack`: every request's subject carries it (subject.js), so the
// grid, the chosen head and every per-head view are the chosen stack's, and the link keeps it (`stack=`). The
// layer and head are fitted to the stack's own shape (modelload.js `fitToModel`).

import { setAttr, setHidden, setText } from "../dom.js";
import { STACK_LABELS, chooseStack, chosenStack, manyStacks, sharedSoftmaxWords, stacksOf } from "../stacks.js";
import { chooseToken, clearNotice } from "../state.js";
import { unzoom } from "../draw/zoom.js";

/** Each stack's hover: what its rows and columns are. */
const STACK_TITLES = {
  encoder: "The encoder's self-attention: the source's tokens attend to each other, every way (no triangle)",
  decoder: "The decoder's self-attention: each target token attends to itself and the target tokens before it",
  cross: "Cross-attention: each target token (a query of the decoder) attends to the source's tokens (the encoder's)",
};

/** The picker's buttons, one per stack of the model, in the model's order. */
function buttons(model) {
  return stacksOf(model).map((s) => {
    const b = Object.assign(document.createElement("button"), { type: "button", className: "btn stack-btn" });
    b.textContent = STACK_LABELS[s.name] ?? s.name;
    b.title = `${STACK_TITLES[s.name] ?? s.name}: ${s.n_layer} layers × ${s.n_head} heads`;
    b.dataset.stack = s.name;
    b.dataset.testid = `stack-${s.name}`;
    return b;
  });
}

/** The picker drawn from the state: hidden for a model of one stack; the chosen stack pressed. */
function drawPicker(state, field) {
  const many = manyStacks(state.model);
  setHidden(field, !many);
  if (!many) return;
  const sig = JSON.stringify(stacksOf(state.model));
  if (field.dataset.signature !== sig) {
    field.dataset.signature = sig;
    field.querySelector(".stack-buttons").replaceChildren(...buttons(state.model));
  }
  const chosen = chosenStack(state);
  for (const b of field.querySelectorAll("[data-stack]"))
    setAttr(b, "aria-pressed", b.dataset.stack === chosen ? "true" : "false");
  const note = field.querySelector(".stack-note"); // a stack sharing its softmax with another says so
  const words = sharedSoftmaxWords(state);
  setText(note, words);
  setHidden(note, !words);
}

/**
 * The picker in `field` (the page's `#stack-field`, a notebook widget's own), wired once; `app`: {state, update,
 * refreshNow, data} (the widget's refreshNow sends the stack to the kernel). Returns the card.
 */
export function installStacks(app, field = document.getElementById("stack-field")) {
  if (!field) return { draw() {} };
  field.innerHTML = `<span class="field-label">Stack</span>
    <span class="stack-buttons" role="group" aria-label="Attention stack"></span>
    <span class="stack-note" data-testid="stack-note" hidden></span>`;
  const { state } = app;
  field.addEventListener("click", (ev) => {
    const name = ev.target.closest("[data-stack]")?.dataset.stack;
    if (!name || name === chosenStack(state)) return;
    chooseStack(state, name);
    // the stack's own layers and heads, its own query tokens: the chosen head and row start again
    chooseToken(state, null);
    unzoom(state);
    clearNotice(state);
    app.data.fitToModel();
    app.update();
    app.refreshNow();
  });
  return { draw: (s) => drawPicker(s, field) };
}
