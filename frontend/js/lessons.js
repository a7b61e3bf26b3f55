// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.

import { errorText, latestOnly, postJSON } from "./api.js";
import { fmtSig } from "./figures.js";
import { bowWeightsFigure, softmaxBarsFigure, varianceLessonFigure, varianceSweepFigure } from "./lessonfigures.js";

const $ = (id) => document.getElementById(id);

const HEAD_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const VARIANCE_T = 16;
const VARIANCE_SAMPLES = 16;
const VARIANCE_SEED = 1337;

// How each seed notebook draws x in its bag-of-words cell (model/lessons.py PRESETS): B, T, C = 4, 8, 2.
const NOTEBOOK_SHAPE = { B: 4, T: 8, C: 2 };
const PRESETS = {
  "notebook-000": { draw: "rand", seed: 42, seeding: "set_seed(42)  # calls torch.manual_seed(42)" },
  "notebook-001-003": { draw: "randn", seed: 42, seeding: "torch.manual_seed(42)" },
  lecture: { draw: "randn", seed: 1337, seeding: "torch.manual_seed(1337)" },
};
const DEFAULT_PRESET = "notebook-000";
const MAX_LOGITS = 64; // lessons.MAX_LOGITS
const LOGIT_ABS_MAX = 1e6; // schemas.LOGIT_ABS_MAX

const state = {
  bow: { ...NOTEBOOK_SHAPE, draw: PRESETS[DEFAULT_PRESET].draw, seed: PRESETS[DEFAULT_PRESET].seed },
  softmax: { logits: [0.1, -0.2, 0.3, -0.2, 0.5], factor: 8 },
  headSize: 16,
  sweep: null,
  softmaxShown: null, // the logits the chart was drawn for
  errors: {},
};

const config = {
  responsive: true,
  displaylogo: false,
  showSendToCloud: false,
  displayModeBar: "hover",
  modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines", "sendChartToCloud"],
};

function draw(el, fig, name) {
  if (!window.Plotly) {
    state.errors.plotly = "The charting library did not load from /vendor/plotly.min.js.";
    showErrors();
    return;
  }
  window.Plotly.react(el, fig.data, fig.layout, { ...config, toImageButtonOptions: { format: "png", filename: name, scale: 2 } });
  el.classList.add("drawn");
}

function showErrors() {
  const messages = Object.values(state.errors).filter(Boolean);
  $("error-banner").hidden = messages.length === 0;
  $("error-text").textContent = messages.join(" · ");
}

function setError(lesson, err) {
  state.errors[lesson] = err ? `${lesson}: ${errorText(err)}` : null;
  showErrors();
}

function number(label, value, key = false) {
  const box = document.createElement("div");
  box.className = key ? "number key" : "number";
  const l = document.createElement("span");
  l.className = "label";
  l.textContent = label;
  const v = document.createElement("span");
  v.className = "value";
  v.textContent = value;
  box.append(l, v);
  return box;
}

function matrixTable(title, m, digits = 3) {
  const box = document.createElement("div");
  box.className = "matrix-box";
  const h = document.createElement("h3");
  h.textContent = title;
  const table = document.createElement("table");
  table.className = "matrix";
  for (const row of m) {
    const tr = document.createElement("tr");
    for (const v of row) {
      const td = document.createElement("td");
      td.textContent = v.toFixed(digits);
      tr.append(td);
    }
    table.append(tr);
  }
  box.append(h, table);
  return box;
}

// ---------------------------------------------------------------- lesson 1

const sendBow = latestOnly("/api/lessons/bag-of-words");

/** The preset whose draw, seed and shape the current controls match, else "custom". */
function matchingPreset(bow) {
  const shapeMatches = bow.B === NOTEBOOK_SHAPE.B && bow.T === NOTEBOOK_SHAPE.T && bow.C === NOTEBOOK_SHAPE.C;
  const hit = Object.entries(PRESETS).find(([, p]) => shapeMatches && p.draw === bow.draw && p.seed === bow.seed);
  return hit ? hit[0] : "custom";
}

/** The Python that draws the same x: what to type in a notebook to check the numbers. */
function bowCode(bow) {
  const preset = PRESETS[matchingPreset(bow)];
  const seeding = preset ? preset.seeding : `torch.manual_seed(${bow.seed})`;
  return `${seeding}\nx = torch.${bow.draw}(${bow.B}, ${bow.T}, ${bow.C})  # B, T, C; shown: x[0], xbow[0]`;
}

function showBowControls() {
  const bow = state.bow;
  $("bow-preset").value = matchingPreset(bow);
  $("bow-draw").value = bow.draw;
  if (document.activeElement !== $("bow-seed")) $("bow-seed").value = String(bow.seed);
  for (const key of ["T", "C"]) {
    $(`bow-${key}`).value = String(bow[key]);
    $(`bow-${key}-value`).textContent = String(bow[key]);
  }
  $("bow-code").textContent = bowCode(bow);
}

async function runBow() {
  showBowControls();
  try {
    const r = await sendBow(state.bow);
    if (r.stale) return;
    const res = r.value;
    setError("bag-of-words", null);
    draw($("bow-weights"), bowWeightsFigure(res.weights), "attnscope-bag-of-words");
    // 4 decimals, as torch prints them in the notebooks
    $("bow-matrices").replaceChildren(
      matrixTable(`x[0] (torch.${res.draw})`, res.x, 4),
      matrixTable("loop", res.loop, 4),
      matrixTable("tril matmul", res.matmul, 4),
      matrixTable("masked softmax", res.softmax, 4),
    );
    const verdict = $("bow-verdict");
    verdict.dataset.agree = String(res.agree);
    verdict.classList.toggle("bad", !res.agree);
    verdict.textContent = res.agree
      ? `✓ All three averages agree: the largest difference is ${res.max_abs_diff.toExponential(1)}.`
      : `✗ The averages differ by up to ${fmtSig(res.max_abs_diff)}.`;
  } catch (err) {
    setError("bag-of-words", err);
  }
}

function bindRange(id, onChange, show = (v) => String(v)) {
  const input = $(id);
  const out = $(`${id}-value`);
  input.addEventListener("input", () => {
    const v = Number(input.value);
    out.textContent = show(v);
    onChange(v);
  });
}

bindRange("bow-T", (v) => {
  state.bow.T = v;
  runBow();
});
bindRange("bow-C", (v) => {
  state.bow.C = v;
  runBow();
});
$("bow-preset").addEventListener("change", (ev) => {
  const preset = PRESETS[ev.target.value];
  if (!preset) return; // "your own draw": keep the current one and let the controls change it
  Object.assign(state.bow, NOTEBOOK_SHAPE, { draw: preset.draw, seed: preset.seed });
  showSeedError(null);
  runBow();
});
$("bow-draw").addEventListener("change", (ev) => {
  state.bow.draw = ev.target.value;
  runBow();
});

/** "42" -> 42; a message naming the problem for anything that is not a whole number from 0 to 2^53 - 1. */
export function parseSeed(text) {
  const t = text.trim();
  if (!t) return { error: "seed: type a whole number, for example 42" };
  if (!/^\d+$/.test(t)) return { error: `seed: "${t}" is not a whole number from 0 to ${Number.MAX_SAFE_INTEGER}` };
  const v = Number(t);
  if (!Number.isSafeInteger(v)) return { error: `seed: at most ${Number.MAX_SAFE_INTEGER}, got ${t}` };
  return { value: v };
}

function showSeedError(message) {
  const box = $("bow-seed-error");
  box.hidden = !message;
  box.textContent = message || "";
  $("bow-seed").setAttribute("aria-invalid", message ? "true" : "false");
}

$("bow-seed").addEventListener("input", (ev) => {
  const { value, error } = parseSeed(ev.target.value);
  showSeedError(error);
  if (error) return;
  state.bow.seed = value;
  runBow();
});
$("bow-seed").addEventListener("blur", () => {
  if ($("bow-seed").getAttribute("aria-invalid") !== "true") $("bow-seed").value = String(state.bow.seed);
});
$("bow-reseed").addEventListener("click", () => {
  state.bow.seed = (state.bow.seed * 48271 + 11) % 2147483647;
  showSeedError(null);
  runBow();
});

// ---------------------------------------------------------------- lesson 2

const sendSoftmax = latestOnly("/api/lessons/softmax-scaling");

/** What the chart shows, and whether it is still what the box says. */
function markSoftmaxStale(shownLogits) {
  const current = parseLogits($("softmax-logits").value);
  const same =
    current.values !== null &&
    shownLogits !== null &&
    current.values.length === shownLogits.length &&
    current.values.every((v, i) => v === shownLogits[i]);
  const stale = shownLogits !== null && !same;
  const section = $("lesson-softmax");
  if (stale) section.dataset.stale = "true";
  else delete section.dataset.stale;
  const note = $("softmax-stale");
  note.hidden = !stale;
  note.textContent = stale ? `Not updated: the chart and numbers are still for ${shownLogits.join(", ")}.` : "";
}

function showLogitsError(message) {
  const box = $("softmax-logits-error");
  box.hidden = !message;
  box.textContent = message || "";
  $("softmax-logits").setAttribute("aria-invalid", message ? "true" : "false");
}

async function runSoftmax() {
  try {
    const r = await sendSoftmax(state.softmax);
    if (r.stale) return;
    const res = r.value;
    setError("softmax", null);
    state.softmaxShown = res.logits;
    draw($("softmax-bars"), softmaxBarsFigure(res), "attnscope-softmax-scaling");
    const f = res.factor;
    $("softmax-numbers").replaceChildren(
      number("var(scores)", fmtSig(res.var)),
      number(`var(scores × ${f})`, fmtSig(res.var_scaled)),
      number("entropy", `${res.entropy.toFixed(3)} nats`),
      number(`entropy × ${f}`, `${res.entropy_scaled.toFixed(3)} nats`),
      number("largest weight", res.softmax.reduce((a, v) => Math.max(a, v), 0).toFixed(3)),
      number(`largest weight × ${f}`, res.softmax_scaled.reduce((a, v) => Math.max(a, v), 0).toFixed(3), true),
    );
    if (!parseLogits($("softmax-logits").value).error) showLogitsError(null);
    markSoftmaxStale(state.softmaxShown);
  } catch (err) {
    if (err.status === 422) {
      showLogitsError(`scores: ${errorText(err)}`); // the server's limit, named
      markSoftmaxStale(state.softmaxShown);
    } else {
      setError("softmax", err);
    }
  }
}

/**
 * "0.1, -0.2 0.3" -> {values: [0.1, -0.2, 0.3]}; otherwise {values: null, error} with a message
 * naming the first problem: nothing typed, a part that is not a number, too many, too large.
 */
export function parseLogits(text) {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length) return { values: null, error: "type at least one score, for example 0.1, -0.2, 0.3" };
  if (parts.length > MAX_LOGITS) return { values: null, error: `at most ${MAX_LOGITS} scores, got ${parts.length}` };
  const values = [];
  for (const [i, part] of parts.entries()) {
    const v = Number(part);
    if (!Number.isFinite(v)) {
      return { values: null, error: `"${part}" (score ${i + 1}) is not a number; separate numbers with commas` };
    }
    if (Math.abs(v) > LOGIT_ABS_MAX) {
      return { values: null, error: `score ${i + 1} is ${part}; scores must be from -1e6 to 1e6` };
    }
    values.push(v);
  }
  return { values, error: null };
}

$("softmax-logits").addEventListener("input", (ev) => {
  const { values, error } = parseLogits(ev.target.value);
  showLogitsError(error ? `scores: ${error}` : null);
  if (error) {
    markSoftmaxStale(state.softmaxShown);
    return;
  }
  state.softmax.logits = values; // the answer clears the stale mark
  runSoftmax();
});
bindRange("softmax-factor", (v) => {
  state.softmax.factor = v;
  runSoftmax();
});

// ---------------------------------------------------------------- lesson 3

const sendVariance = latestOnly("/api/lessons/variance");
const varianceBody = (headSize) => ({ head_size: headSize, T: VARIANCE_T, seed: VARIANCE_SEED, samples: VARIANCE_SAMPLES });

async function runVariance() {
  try {
    const r = await sendVariance(varianceBody(state.headSize));
    if (r.stale) return;
    const res = r.value;
    setError("variance", null);
    draw($("variance-lesson-hist"), varianceLessonFigure(res), "attnscope-variance-lesson");
    $("variance-numbers").replaceChildren(
      number("var(q)", fmtSig(res.var_q)),
      number("var(k)", fmtSig(res.var_k)),
      number("var(q·kᵀ)", fmtSig(res.var_scores_raw), true),
      number(`var(q·kᵀ / √${res.head_size})`, fmtSig(res.var_scores), true),
      number("ratio", fmtSig(res.ratio)),
    );
    if (state.sweep) draw($("variance-sweep"), varianceSweepFigure(state.sweep, state.headSize), "attnscope-variance-sweep");
  } catch (err) {
    setError("variance", err);
  }
}

async function runSweep() {
  try {
    state.sweep = await Promise.all(HEAD_SIZES.map((hs) => postJSON("/api/lessons/variance", varianceBody(hs))));
    draw($("variance-sweep"), varianceSweepFigure(state.sweep, state.headSize), "attnscope-variance-sweep");
  } catch (err) {
    setError("variance", err);
  }
}

bindRange(
  "variance-size",
  (i) => {
    state.headSize = HEAD_SIZES[i];
    $("variance-size").setAttribute("aria-valuetext", String(state.headSize));
    runVariance();
  },
  (i) => String(HEAD_SIZES[i]),
);

$("error-close").addEventListener("click", () => {
  state.errors = {};
  showErrors();
});

runBow();
runSoftmax();
runVariance();
runSweep();
