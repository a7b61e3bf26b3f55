// The target beside the text, on an encoder–decoder (GET /api/model `architecture`: "encoder-decoder"): the
// decoder's text, teacher-forced after the model's decoder start (docs/API.md "Encoders and encoder–decoders").
// While it is blank no `target` is sent and the model writes one greedily (the answer says `target_generated`);
// "Write it" asks for that written target alone and puts its text in the field, so that the link keeps it
// (`target=`) and every view reads the same target. The field is `#target-field`, built here; the state's
// `target` is written here alone (and by a link).

import { errorText, postJSON } from "../api.js";
import { setHidden, setText } from "../dom.js";
import { chooseToken, currentGrid, currentDetail } from "../state.js";
import { modelTakes, subject } from "../subject.js";

const URL = "/api/attention";

const FIELD = `
  <span class="field-label">Target <span class="muted small">(the decoder's text)</span></span>
  <textarea class="target-input" data-testid="target-input" rows="1" spellcheck="false" autocomplete="off"
    aria-label="Target: the decoder's text" placeholder="blank: the model writes it"></textarea>
  <div class="target-row">
    <button type="button" class="btn" data-testid="target-write"
      title="Let the model write the target for this text (greedily, as generate() does) and put it here"
      >Write it</button>
    <span class="muted small" data-testid="target-note" aria-live="polite"></span>
  </div>`;

/** The body that asks for the model's own target of the text: no `target`, no layers, no guesses. */
export function writeBody(state) {
  const body = { ...subject(state, URL), layers: [], include: [], top_k: 0 };
  delete body.target;
  return body;
}

/** The text of the target an answer's decoder read: the server's own (`target`), or null where it sent none. */
export const targetText = (answer) => (typeof answer?.target === "string" ? answer.target : null);

/** The note under the field: what the current answer's target is, from its `target_tokens` and `target_generated`. */
function noteOf(state, writing) {
  if (writing.on) return "the model is writing…";
  if (writing.error) return `Could not write the target: ${writing.error}`;
  const answer = currentGrid(state) ?? currentDetail(state);
  if (!answer?.target_tokens) return "";
  const n = answer.target_tokens.length;
  const tokens = `${n} token${n === 1 ? "" : "s"}`;
  return answer.target_generated
    ? `written by the model (${tokens}, greedily): “Write it” puts its text here`
    : `${tokens}, teacher-forced after the decoder's start`;
}

/** The field, drawn from the state: hidden without an encoder–decoder; the text as `state.target` has it. */
function drawField(state, field, writing) {
  const on = modelTakes(state, "target");
  setHidden(field, !on);
  if (!on) return;
  const input = field.querySelector("textarea");
  if (input.value !== state.target && document.activeElement !== input) input.value = state.target;
  const button = field.querySelector("button");
  if (button.disabled !== writing.on) button.disabled = writing.on;
  setText(field.querySelector("[data-testid=target-note]"), noteOf(state, writing));
}

/** "Write it" on the page: the server's own target of the text, asked with `writeBody`. */
const writeByServer = async (state) => targetText(await postJSON(URL, writeBody(state)));

/**
 * The field in `field` (the page's `#target-field`, a notebook widget's own), wired once; `app`: {state, update,
 * refreshNow, data, write}: `write(state)` resolves to the model's own target (default: asked of the server; the
 * widget's: of the kernel). Returns the card.
 */
export function installTarget(app, field = document.getElementById("target-field")) {
  if (!field) return { draw() {} };
  const write = app.write ?? writeByServer;
  field.innerHTML = FIELD;
  const { state } = app;
  const writing = { on: false, error: null }; // "Write it" on its way, or its refusal
  const change = (target, typing) => {
    writeTarget(state, target);
    writing.error = null;
    app.update();
    if (typing) app.data.scheduleRefresh();
    else app.refreshNow();
  };
  field.querySelector("textarea").addEventListener("input", (ev) => change(ev.target.value, true));
  field.querySelector("button").addEventListener("click", async () => {
    Object.assign(writing, { on: true, error: null });
    app.update();
    try {
      const text = await write(state);
      if (typeof text !== "string") throw new Error("the answer holds no target text");
      writing.on = false;
      if (text !== state.target) change(text, false);
    } catch (err) {
      Object.assign(writing, { on: false, error: errorText(err) });
    }
    app.update();
  });
  return { draw: (s) => drawField(s, field, writing) };
}

/** The decoder's text as the target (typed, written, or continued: cards/generate.js); the last token again. */
export function writeTarget(state, target) {
  state.target = target;
  chooseToken(state, null);
}
