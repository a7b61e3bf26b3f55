// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.

import { errorText, latestOnly, postJSON } from "./api.js";
import {
  bowWeightsFigure,
  fmtSig,
  softmaxBarsFigure,
  varianceLessonFigure,
  varianceSweepFigure,
} from "./figures.js";

const $ = (id) => document.getElementById(id);

const HEAD_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const VARIANCE_T = 16;
const VARIANCE_SAMPLES = 16;
const VARIANCE_SEED = 1337;

const state = {
  bow: { T: 8, C: 2, seed: 1337 },
  softmax: { logits: [0.1, -0.2, 0.3, -0.2, 0.5], factor: 8 },
  headSize: 16,
  sweep: null,
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

async function runBow() {
  try {
    const r = await sendBow(state.bow);
    if (r.stale) return;
    const res = r.value;
    setError("bag-of-words", null);
    draw($("bow-weights"), bowWeightsFigure(res.weights), "attnscope-bag-of-words");
    $("bow-matrices").replaceChildren(
      matrixTable("loop", res.loop),
      matrixTable("tril matmul", res.matmul),
      matrixTable("masked softmax", res.softmax),
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
$("bow-reseed").addEventListener("click", () => {
  state.bow.seed = (state.bow.seed * 48271 + 11) % 2147483647;
  runBow();
});

// ---------------------------------------------------------------- lesson 2

const sendSoftmax = latestOnly("/api/lessons/softmax-scaling");

async function runSoftmax() {
  try {
    const r = await sendSoftmax(state.softmax);
    if (r.stale) return;
    const res = r.value;
    setError("softmax", null);
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
  } catch (err) {
    setError("softmax", err);
  }
}

/** "0.1, -0.2 0.3" -> [0.1, -0.2, 0.3]; null if any part is not a number. */
export function parseLogits(text) {
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length) return null;
  const values = parts.map(Number);
  return values.every(Number.isFinite) ? values : null;
}

$("softmax-logits").addEventListener("input", (ev) => {
  const values = parseLogits(ev.target.value);
  ev.target.setAttribute("aria-invalid", values ? "false" : "true");
  if (!values) {
    state.errors.softmax = "softmax: type numbers separated by commas, for example 0.1, -0.2, 0.3";
    showErrors();
    return;
  }
  state.softmax.logits = values;
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
