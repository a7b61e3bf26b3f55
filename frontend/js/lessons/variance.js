// Lesson 3, why divide by √d_k: its control (the head size), its requests to
// POST /api/lessons/variance (one for the chosen size, one per size for the sweep) and its drawing
// of the answers.

import { postJSON } from "../api.js";
import { byId, idOf, setAttr } from "../dom.js";
import { fmtSig } from "../draw/figures.js";
import { varianceLessonFigure, varianceSweepFigure } from "./figures.js";
import { lessonRequest, onRange, plot, showNumbers, showRange } from "./parts.js";

const HEAD_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]; // the slider's steps
const VARIANCE_T = 16;
const VARIANCE_SAMPLES = 16;
const VARIANCE_SEED = 1337;

/**
 * The lesson, made by install: the head size asked for, its answer, the answer the histograms and the numbers
 * show (`drawn`), the answers for every size (the sweep), and the page's banner.
 */
const createLesson = (banner) => ({ headSize: 16, answer: null, drawn: null, sweep: null, banner });

const body = (headSize) => ({ head_size: headSize, T: VARIANCE_T, seed: VARIANCE_SEED, samples: VARIANCE_SAMPLES });

/** The slider, the answer once it is new, and the sweep marked at the answer's head size. */
function render(state) {
  showRange("variance-size", HEAD_SIZES.indexOf(state.headSize), String(state.headSize));
  setAttr(byId("variance-size"), "aria-valuetext", String(state.headSize));

  const res = state.answer;
  if (res && res !== state.drawn) {
    state.drawn = res;
    const figure = () => varianceLessonFigure(res);
    plot(state.banner, "variance-lesson-hist", String(idOf(res)), figure, "attnscope-variance-lesson");
    showNumbers("variance-numbers", [
      ["var(q)", fmtSig(res.var_q)],
      ["var(k)", fmtSig(res.var_k)],
      ["var(q·kᵀ)", fmtSig(res.var_scores_raw), true],
      [`var(q·kᵀ / √${res.head_size})`, fmtSig(res.var_scores), true],
      ["ratio", fmtSig(res.ratio)],
    ]);
  }
  if (state.sweep) {
    const marked = res ? res.head_size : state.headSize;
    plot(
      state.banner,
      "variance-sweep",
      `${idOf(state.sweep)}:${marked}`,
      () => varianceSweepFigure(state.sweep, marked),
      "attnscope-variance-sweep",
    );
  }
}

/** Ask for every head size at once, for the chart of variance against head size. */
async function runSweep(state) {
  try {
    state.sweep = await Promise.all(HEAD_SIZES.map((hs) => postJSON("/api/lessons/variance", body(hs))));
    render(state);
  } catch (err) {
    state.banner.say("variance", err);
  }
}

/** Wire the slider and ask for the chosen size and the sweep. */
export function install({ banner }) {
  const state = createLesson(banner);
  const send = lessonRequest(banner, "variance", "/api/lessons/variance", (answer) => {
    state.answer = answer;
    render(state);
  });
  const run = () => send(body(state.headSize)); // the chosen head size
  onRange("variance-size", (i) => {
    state.headSize = HEAD_SIZES[i];
    render(state);
    run();
  });
  run();
  runSweep(state);
}
