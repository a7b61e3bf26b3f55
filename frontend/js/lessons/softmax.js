// Lesson 2, softmax punishes large scores: its controls (a row of scores, a factor), its request
// to POST /api/lessons/softmax-scaling and its drawing of the answer. A chart that no longer
// matches the scores box is faded and says which row it still shows.

import { errorText } from "../api.js";
import { byId, idOf, setHidden, setText } from "../dom.js";
import { fmtSig } from "../draw/figures.js";
import { softmaxBarsFigure } from "./figures.js";
import { lessonRequest, onRange, plot, showFieldError, showNumbers, showRange } from "./parts.js";

/**
 * The lesson, made by install: the row and factor asked for (the request's body), what the box holds now
 * (parseLogits of its text), the box's complaint, the answer, the answer the chart and the numbers show
 * (`drawn`) and whether the chart is older than the box; the server's limits on the row
 * (SoftmaxScalingRequest in /openapi.json; while null, the server's 422 names them), and the page's banner.
 * The stale mark is set when the box goes wrong and when an answer comes, not while a good row is on its way,
 * so that typing does not make it blink.
 */
const createLesson = (banner) => ({
  ask: { logits: [0.1, -0.2, 0.3, -0.2, 0.5], factor: 8 },
  typed: { values: null, error: null }, // read from the box by install()
  error: null,
  answer: null,
  drawn: null,
  stale: false,
  limits: { count: null, abs: null },
  banner,
});

/** 1000000 -> "1e6"; smaller numbers as they are. */
const limitText = (v) => (Math.abs(v) >= 1e5 ? v.toExponential().replace("e+", "e") : String(v));

/**
 * "0.1, -0.2 0.3" -> {values: [0.1, -0.2, 0.3]}; otherwise {values: null, error} with a message
 * naming the first problem: nothing typed, a part that is not a number, too many, too large
 * (`count` and `abs`, the server's limits, where known).
 */
export function parseLogits(text, { count = null, abs = null } = {}) {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length) return { values: null, error: "type at least one score, for example 0.1, -0.2, 0.3" };
  if (count !== null && parts.length > count)
    return { values: null, error: `at most ${count} scores, got ${parts.length}` };
  const values = [];
  for (const [i, part] of parts.entries()) {
    const v = Number(part);
    if (!Number.isFinite(v)) {
      return { values: null, error: `"${part}" (score ${i + 1}) is not a number; separate numbers with commas` };
    }
    if (abs !== null && Math.abs(v) > abs) {
      return {
        values: null,
        error: `score ${i + 1} is ${part}; scores must be from ${limitText(-abs)} to ${limitText(abs)}`,
      };
    }
    values.push(v);
  }
  return { values, error: null };
}

/** Whether the box holds other numbers than the row the chart was drawn for. */
function boxDiffersFromChart(state) {
  const shown = state.answer?.logits ?? null;
  const current = state.typed.values;
  if (shown === null) return false;
  return current === null || current.length !== shown.length || current.some((v, i) => v !== shown[i]);
}

/** The box's complaint, the stale marks, the factor, and the answer once it is new. */
function render(state) {
  showFieldError("softmax-logits", "softmax-logits-error", state.error);
  showRange("softmax-factor", state.ask.factor);
  const section = byId("lesson-softmax");
  if (state.stale) section.dataset.stale = "true";
  else delete section.dataset.stale;
  const note = byId("softmax-stale");
  setHidden(note, !state.stale);
  setText(
    note,
    state.stale ? `Not updated: the chart and numbers are still for ${state.answer.logits.join(", ")}.` : "",
  );

  const res = state.answer;
  if (!res || res === state.drawn) return;
  state.drawn = res;
  plot(state.banner, "softmax-bars", String(idOf(res)), () => softmaxBarsFigure(res), "attnscope-softmax-scaling");
  const f = res.factor;
  const largest = (row) => row.reduce((a, v) => Math.max(a, v), 0).toFixed(3);
  showNumbers("softmax-numbers", [
    ["var(scores)", fmtSig(res.var)],
    [`var(scores × ${f})`, fmtSig(res.var_scaled)],
    ["entropy", `${res.entropy.toFixed(3)} nats`],
    [`entropy × ${f}`, `${res.entropy_scaled.toFixed(3)} nats`],
    ["largest weight", largest(res.softmax)],
    [`largest weight × ${f}`, largest(res.softmax_scaled), true],
  ]);
}

/** The lesson's request for the row and factor; a refused row is named under the box. */
function lessonSend(state) {
  const onAnswer = (answer) => {
    state.answer = answer;
    if (!state.typed.error) state.error = null;
    state.stale = boxDiffersFromChart(state);
    render(state);
  };
  const onError = (err) => {
    if (err.status !== 422) {
      state.banner.say("softmax", err);
      return;
    }
    state.error = `scores: ${errorText(err)}`; // the server's limit, named
    state.stale = boxDiffersFromChart(state);
    render(state);
  };
  const send = lessonRequest(state.banner, "softmax", "/api/lessons/softmax-scaling", onAnswer, onError);
  return () => send(state.ask);
}

/** Read the box: a bad row is named and the chart marked stale, a good one is asked for (`run`). */
function readBox(state, run) {
  state.typed = parseLogits(byId("softmax-logits").value, state.limits);
  state.error = state.typed.error ? `scores: ${state.typed.error}` : null;
  if (state.typed.error) {
    state.stale = boxDiffersFromChart(state);
    render(state);
    return;
  }
  state.ask.logits = state.typed.values; // the answer clears the stale mark
  render(state);
  run();
}

/** Wire the lesson's controls, read the server's limits and ask for the first row. */
export function install({ banner, requestSchema }) {
  const state = createLesson(banner);
  const run = lessonSend(state);
  state.typed = parseLogits(byId("softmax-logits").value);
  byId("softmax-logits").addEventListener("input", () => readBox(state, run));
  onRange("softmax-factor", (v) => {
    state.ask.factor = v;
    render(state);
    run();
  });
  requestSchema("SoftmaxScalingRequest").then((schema) => {
    const logits = schema?.properties?.logits;
    state.limits.count = logits?.maxItems ?? null;
    state.limits.abs = logits?.items?.maximum ?? null;
    // a row typed before the limits came is named now if it breaks them
    if (parseLogits(byId("softmax-logits").value, state.limits).error) readBox(state, run);
  });
  run();
}
