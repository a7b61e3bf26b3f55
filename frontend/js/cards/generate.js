// Generation (issue 18): "Continue" streams POST /api/generate into the text box token by
// token, and a strip shows where each new token looked: one row per new token, one column per
// earlier token, coloured by the attention of the chosen head (or the mean of every head).
// A click on "Stop" aborts the request; the server stops at the next token. The run lives in
// `state.generation` with the text and switched-off heads it produced; once either changes the
// strip is dimmed and says it is out of date.

import { errorText, formatDetail, isBlank } from "../api.js";
import { viridisLUT, weightColor, weightLegend } from "../draw/gridcanvas.js";
import { mount, setHidden, setProp, setText } from "../dom.js";
import { changedInputs, inputsFor, outOfDateWords, whatIfOn } from "../measured.js";
import { checkSampling } from "./sampling.js";
import { limitOf } from "../state.js";
import { writeTarget } from "./target.js";
import { modelTakes, subject } from "../subject.js";

/** Read an NDJSON body line by line; `onLine(obj)` for each. */
export async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (line) onLine(JSON.parse(line));
    }
  }
  if (buffer.trim()) onLine(JSON.parse(buffer));
}

/**
 * A step's row to draw: the chosen head's, or the server's mean over every layer and head. On an encoder–decoder
 * the chosen head's row is its cross-attention row over the source (`cross`), where the new target token looked.
 */
export function stripRow(step, layer, head, mode) {
  if (mode === "mean") return step.attention_mean;
  const rows = step.cross ?? step.attention;
  const first = rows.find((heads) => heads); // a hybrid's layers without softmax attention are null
  return rows[layer]?.[head] ?? first[0];
}

/**
 * The body of POST /api/generate: greedy, or sampled as `state.sampling` says, at the page's temperature. It
 * continues `text` (the text box's), so a conversation is not sent.
 */
export function generateBody(state, text, n) {
  const body = { ...subject(state, "/api/generate"), text, max_new_tokens: n, temperature: state.temperature };
  if (modelTakes(state, "target")) body.text = state.text; // an encoder–decoder writes on the target, from the text
  delete body.messages;
  const s = state.sampling;
  if (!s.on) return body;
  body.do_sample = true;
  for (const key of ["top_k", "top_p", "seed"]) if (s[key] !== null) body[key] = s[key];
  return body;
}

const SAID = {
  length: "done",
  eos: "the model ended the text",
  context: "the text fills the model's context",
  stopped: "stopped",
};

const MARKUP = `<div class="generate-controls">
      <button type="button" class="btn" data-testid="generate-run">Continue</button>
      <label class="small">tokens <input type="number" min="1" value="20" data-testid="generate-count" /></label>
      <label class="small">strip <select data-testid="generate-mode">
        <option value="head">chosen head</option><option value="mean">mean of all heads</option></select></label>
      <label class="small" title="Greedy takes the likeliest token; sampling draws at the temperature above">
        <input type="checkbox" data-testid="generate-sample" /> sample</label>
      <span class="generate-sampling small" data-testid="generate-sampling" hidden>
        <label>top-k <input type="number" min="1" placeholder="all" data-testid="generate-topk" /></label>
        <label>top-p <input type="number" min="0.01" max="1" step="0.01" placeholder="1"
          data-testid="generate-topp" /></label>
        <label>seed <input type="number" min="0" placeholder="drawn" data-testid="generate-seed" /></label>
      </span>
      <span class="muted small" data-testid="generate-status" aria-live="polite"></span>
    </div>
    <p class="generate-note small" data-testid="generate-note" role="status" hidden></p>
    <canvas class="generate-strip" data-testid="generate-strip" hidden></canvas>`;

/** Most new tokens a run may ask for; null until the model is known. */
const mostOf = (state) => limitOf(state, "max_new_tokens");

/**
 * The sampling inputs write the state (and so the link); drawSampling writes them back from it.
 * While a value is bad, Continue refuses to start (as the server would) and the note names the field.
 */
function wireSampling(gen) {
  const { sampling, state } = gen;
  const readSampling = () => {
    const checked = checkSampling({
      top_k: sampling.top_k.value,
      top_p: sampling.top_p.value,
      seed: sampling.seed.value,
    });
    state.sampling = { ...checked.sampling, on: sampling.on.checked };
    gen.samplingProblems = state.sampling.on ? checked.problems : [];
    gen.app.update();
  };
  for (const input of [sampling.on, sampling.top_k, sampling.top_p, sampling.seed])
    input.addEventListener("change", readSampling);
}

/** The strip of a run: a row a new token, a column an earlier one, in the heatmaps' colours. */
function drawStrip({ state, strip, legend, lut }, run) {
  const steps = run?.steps ?? [];
  setHidden(strip, !steps.length);
  setHidden(legend, !steps.length);
  if (!steps.length) return;
  const sig = `${steps.length}|${state.layer}.${state.head}|${run.mode}`;
  if (strip.dataset.signature === sig) return;
  strip.dataset.signature = sig;
  const keys = stripRow(steps.at(-1), state.layer, state.head, run.mode).length;
  const cell = Math.max(2, Math.min(10, Math.floor(560 / keys)));
  strip.width = keys * cell;
  strip.height = steps.length * cell;
  strip.style.width = `${strip.width}px`;
  const g = strip.getContext("2d");
  g.fillStyle = "#eceef2";
  g.fillRect(0, 0, strip.width, strip.height);
  steps.forEach((s, r) => {
    stripRow(s, state.layer, state.head, run.mode).forEach((w, k) => {
      g.fillStyle = weightColor(lut, w); // the heatmaps' scale: 0 dark, 1 yellow
      g.fillRect(k * cell, r * cell, cell, cell);
    });
  });
  const cross = run.mode === "head" && steps[0].cross; // an encoder–decoder's: the source's tokens
  strip.title =
    `Row n: where new token n looked ` +
    `(${run.mode === "head" ? `layer ${state.layer}, head ${state.head}` : "mean of all heads"}); columns: ` +
    (cross ? "the source's tokens (cross-attention)" : "the tokens before it");
}

/**
 * Stream POST /api/generate into the text box and the strip: `progress` ({text, reason}) follows
 * the text and, once the server says it is done, why it stopped.
 */
async function streamRun(gen, run, n, progress) {
  const { state, els, status, box } = gen;
  const response = await fetch("/api/generate", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/x-ndjson" },
    body: JSON.stringify(generateBody(state, progress.text, n)),
    signal: gen.controller.signal,
  });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    // "top_p: …", the field named
    throw new Error(formatDetail(body?.detail) || `the server answered ${response.status}`);
  }
  await readLines(response, (line) => {
    if (line.done) {
      progress.reason = line.reason;
      progress.text = line.text;
      // a drawn seed is kept, so the link repeats this very text
      if (state.sampling.on && line.seed !== null) state.sampling = { ...state.sampling, seed: line.seed };
      return;
    }
    run.steps.push(line);
    progress.text += line.piece;
    progress.field.value = progress.text;
    status.textContent =
      `${run.steps.length} new token${run.steps.length === 1 ? "" : "s"} · ` +
      `“${line.token}” ${(100 * line.prob).toFixed(1)} %`;
    box.dataset.steps = String(run.steps.length);
    drawStrip(gen, run);
  });
}

/** Continue the text: a new run in `state.generation`, streamed until done, stopped or refused. */
async function startRun(gen) {
  const { app, state, els, button, status, box } = gen;
  if (isBlank(state.text)) {
    setText(status, "Type a text first: Continue adds tokens after it.");
    return;
  }
  if (gen.samplingProblems.length) return; // the note names the bad field; the button is off meanwhile
  const n = Math.min(mostOf(state) ?? Infinity, Math.max(1, Number.parseInt(gen.count.value, 10) || 20));
  gen.controller = new AbortController();
  const run = { steps: [], mode: gen.mode.value, running: true, reason: null, error: null, inputs: null };
  state.generation = run;
  button.textContent = "Stop";
  button.dataset.running = "1";
  status.textContent = "generating…";
  app.update();
  // on an encoder–decoder the run writes the target (its field), from the text as the source
  const field = modelTakes(state, "target") ? document.querySelector("#target-field textarea") : null;
  const progress = { text: field ? state.target : els.textInput.value, reason: "stopped" };
  progress.field = field ?? els.textInput;
  try {
    await streamRun(gen, run, n, progress);
  } catch (err) {
    if (err.name !== "AbortError") {
      progress.reason = "error";
      run.error = `Could not generate: ${errorText(err)}`;
    }
  } finally {
    gen.controller = null;
    button.textContent = "Continue";
    delete button.dataset.running;
    progress.field.value = progress.text;
    run.running = false;
    run.reason = progress.reason;
    box.dataset.reason = progress.reason;
    if (field) writeTarget(state, progress.text);
    else app.changeText(progress.text);
    run.inputs = inputsFor(state, ["text", "target", "image", "ablate"]); // the text it produced, these heads off
    app.refreshNow();
    app.update();
  }
}

/** The sampling switch and values as the state says; a bad value stays in its box, beside the note. */
function drawSampling(gen) {
  const { state, sampling } = gen;
  const s = state.sampling;
  sampling.on.checked = s.on;
  setHidden(sampling.box, !s.on);
  if (!s.on) gen.samplingProblems = [];
  for (const key of ["top_k", "top_p", "seed"]) {
    const shown = s[key] === null ? "" : String(s[key]);
    // a bad value stays in its box, beside the note that it is ignored
    const bad = gen.samplingProblems.some((p) => p.startsWith(key.replace("_", "-") + " "));
    if (sampling[key].value !== shown && document.activeElement !== sampling[key] && !bad)
      sampling[key].value = shown;
  }
}

/** The card as the state says: the controls, the notes (bad sampling values, an out-of-date strip), the strip. */
function drawGenerate(gen) {
  const { state, box, button, note, status } = gen;
  const most = mostOf(state);
  if (most !== null) setProp(gen.count, "max", String(most));
  drawSampling(gen);
  const run = state.generation;
  const changed = run?.inputs ? changedInputs(run.inputs, state) : [];
  box.classList.toggle("stale", changed.length > 0);
  const problems = gen.samplingProblems;
  const notes = problems.map((p) => `Sampling: ${p}; Continue starts once it is.`);
  setProp(button, "disabled", !gen.controller && problems.length > 0);
  setProp(button, "title", button.disabled ? `Not started: ${problems.join("; ")}` : "");
  if (changed.length)
    notes.push(`${outOfDateWords(changed, "this strip was generated")} Continue generates from the text as it is now.`);
  if (run && whatIfOn(state))
    notes.push(
      "Generation runs the model as trained (causal mask on, its own scaling): the what-if switches do not " +
        "apply to it.",
    );
  setText(note, notes.join(" "));
  setHidden(note, notes.length === 0);
  if (run && !run.running)
    setText(
      status,
      run.error ??
        `${run.steps.length} new ${run.steps.length === 1 ? "token" : "tokens"} · ${SAID[run.reason] ?? run.reason}`,
    );
  drawStrip(gen, run);
}

/**
 * Install the button, the strip and its controls; `app`: {state, els, changeText, refreshNow, update}. Returns
 * `{draw(state)}`.
 */
export function installGenerate(app) {
  const { state, els } = app;
  const { root: box, parts } = mount("div", "generate-box", "generate", MARKUP);
  els.textInput.closest("div").append(box);
  const gen = {
    app,
    state,
    els,
    box,
    button: parts["generate-run"],
    count: parts["generate-count"],
    mode: parts["generate-mode"],
    status: parts["generate-status"],
    note: parts["generate-note"],
    strip: parts["generate-strip"],
    sampling: {
      on: parts["generate-sample"],
      box: parts["generate-sampling"],
      top_k: parts["generate-topk"],
      top_p: parts["generate-topp"],
      seed: parts["generate-seed"],
    },
    samplingProblems: [],
    controller: null,
    lut: viridisLUT(),
    legend: weightLegend("generate-legend"),
  };
  wireSampling(gen);
  gen.strip.after(gen.legend);
  gen.button.addEventListener("click", () => {
    if (gen.controller) gen.controller.abort();
    else startRun(gen);
  });
  gen.mode.addEventListener("change", () => {
    if (state.generation) state.generation.mode = gen.mode.value;
    app.update();
  });
  return { draw: () => drawGenerate(gen), answers: ["generation"] }; // a new model drops it (data.js)
}
