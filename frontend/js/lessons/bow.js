// Lesson 1, averaging the past three ways (a loop, a matrix product, a masked softmax): its
// controls (which notebook's x, the draw, the seed, T and C), its request to
// POST /api/lessons/bag-of-words and its drawing of the answer.

import { byId, idOf, setText } from "../dom.js";
import { fmtSig } from "../draw/figures.js";
import { bowWeightsFigure } from "./figures.js";
import { lessonRequest, onRange, plot, showFieldError, showRange } from "./parts.js";

// How each seed notebook draws x in its bag-of-words cell (model/lessons.py PRESETS): B, T, C = 4, 8, 2.
const NOTEBOOK_SHAPE = { B: 4, T: 8, C: 2 };
const PRESETS = {
  "notebook-000": { draw: "rand", seed: 42, seeding: "set_seed(42)  # calls torch.manual_seed(42)" },
  "notebook-001-003": { draw: "randn", seed: 42, seeding: "torch.manual_seed(42)" },
  lecture: { draw: "randn", seed: 1337, seeding: "torch.manual_seed(1337)" },
};
const DEFAULT_PRESET = "notebook-000";

/**
 * The lesson, made by install: the x asked for (the request's body), the seed box's complaint, the answer and
 * the answer the tables and the verdict show (`drawn`), and the page's banner.
 */
const createLesson = (banner) => ({
  ask: { ...NOTEBOOK_SHAPE, draw: PRESETS[DEFAULT_PRESET].draw, seed: PRESETS[DEFAULT_PRESET].seed },
  seedError: null,
  answer: null,
  drawn: null,
  banner,
});

/** The preset whose draw, seed and shape the current controls match, else "custom". */
function matchingPreset(x) {
  const shapeMatches = x.B === NOTEBOOK_SHAPE.B && x.T === NOTEBOOK_SHAPE.T && x.C === NOTEBOOK_SHAPE.C;
  const hit = Object.entries(PRESETS).find(([, p]) => shapeMatches && p.draw === x.draw && p.seed === x.seed);
  return hit ? hit[0] : "custom";
}

/** The Python that draws the same x: what to type in a notebook to check the numbers. */
function bowCode(x) {
  const preset = PRESETS[matchingPreset(x)];
  const seeding = preset ? preset.seeding : `torch.manual_seed(${x.seed})`;
  return `${seeding}\nx = torch.${x.draw}(${x.B}, ${x.T}, ${x.C})  # B, T, C; shown: x[0], xbow[0]`;
}

/** "42" -> {value: 42}; {error} naming the problem for anything that is not a whole number from 0 to 2^53 - 1. */
export function parseSeed(text) {
  const t = text.trim();
  if (!t) return { error: "seed: type a whole number, for example 42" };
  if (!/^\d+$/.test(t)) return { error: `seed: "${t}" is not a whole number from 0 to ${Number.MAX_SAFE_INTEGER}` };
  const v = Number(t);
  if (!Number.isSafeInteger(v)) return { error: `seed: at most ${Number.MAX_SAFE_INTEGER}, got ${t}` };
  return { value: v };
}

/** A titled table of the matrix `m`, each number with `digits` decimals. */
function matrixTable(title, m, digits) {
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

/** The controls as the lesson has them, and the answer once it is new. */
function render(state) {
  const x = state.ask;
  byId("bow-preset").value = matchingPreset(x);
  byId("bow-draw").value = x.draw;
  if (document.activeElement !== byId("bow-seed")) byId("bow-seed").value = String(x.seed);
  showFieldError("bow-seed", "bow-seed-error", state.seedError);
  showRange("bow-T", x.T);
  showRange("bow-C", x.C);
  setText(byId("bow-code"), bowCode(x));

  const res = state.answer;
  if (!res || res === state.drawn) return;
  state.drawn = res;
  const weights = () => bowWeightsFigure(res.weights);
  plot(state.banner, "bow-weights", String(idOf(res)), weights, "attnscope-bag-of-words");
  // 4 decimals, as torch prints them in the notebooks
  byId("bow-matrices").replaceChildren(
    matrixTable(`x[0] (torch.${res.draw})`, res.x, 4),
    matrixTable("loop", res.loop, 4),
    matrixTable("tril matmul", res.matmul, 4),
    matrixTable("masked softmax", res.softmax, 4),
  );
  const verdict = byId("bow-verdict");
  verdict.dataset.agree = String(res.agree);
  verdict.classList.toggle("bad", !res.agree);
  verdict.textContent = res.agree
    ? `✓ All three averages agree: the largest difference is ${res.max_abs_diff.toExponential(1)}.`
    : `✗ The averages differ by up to ${fmtSig(res.max_abs_diff)}.`;
}

/** Wire the lesson's controls and ask for the first x. */
export function install({ banner }) {
  const state = createLesson(banner);
  const send = lessonRequest(banner, "bag-of-words", "/api/lessons/bag-of-words", (answer) => {
    state.answer = answer;
    render(state);
  });
  /** Show the changed controls, then ask the server for this x. */
  const run = () => {
    render(state);
    send(state.ask);
  };
  onRange("bow-T", (v) => {
    state.ask.T = v;
    run();
  });
  onRange("bow-C", (v) => {
    state.ask.C = v;
    run();
  });
  byId("bow-preset").addEventListener("change", (ev) => {
    const preset = PRESETS[ev.target.value];
    if (!preset) return; // "your own draw": keep the current one and let the controls change it
    Object.assign(state.ask, NOTEBOOK_SHAPE, { draw: preset.draw, seed: preset.seed });
    state.seedError = null;
    run();
  });
  byId("bow-draw").addEventListener("change", (ev) => {
    state.ask.draw = ev.target.value;
    run();
  });
  byId("bow-seed").addEventListener("input", (ev) => {
    const { value, error } = parseSeed(ev.target.value);
    state.seedError = error ?? null;
    if (error) {
      render(state);
      return;
    }
    state.ask.seed = value;
    run();
  });
  byId("bow-seed").addEventListener("blur", () => {
    if (!state.seedError) byId("bow-seed").value = String(state.ask.seed);
  });
  byId("bow-reseed").addEventListener("click", () => {
    state.ask.seed = (state.ask.seed * 48271 + 11) % 2147483647;
    state.seedError = null;
    run();
  });
  run();
}
