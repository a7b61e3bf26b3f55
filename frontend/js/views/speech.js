// The "Speech" view (a speech model: GET /api/model `audio`): where each written token listens. The recording's
// log-mel spectrogram (the server's own features, pooled: `audio.spectrogram`) is the cross stack's key axis, in
// seconds, under the waveform (`audio.waveform`: each column's min and max); under it the chosen cross head's
// pattern or the alignment heads' mean (`alignment_mean`), a row per target token over the same frames; under that
// the words at their times (`words`, from the alignment heads by transformers' dynamic time warping). A click on a
// word plays the recording from its start, and the word is lit while it plays. Only the recording's own frames
// are drawn: the window's padding after it is left out (`audio.audio_frames`). It asks for its one answer.

import { answerIn, question } from "../answers.js";
import { byId, setText } from "../dom.js";
import { blankSubject, subject } from "../subject.js";

export const id = "speech";
export const label = "Speech";
export const hidden = true; // shown on a speech model (cards/audiopick.js)
export const state = { speech: null, speechRows: "head" }; // speechRows: "head" or "mean"
export const answers = ["speech"];
export const needs = [];

const URL = "/api/attention";
const WAVE = 40; // the waveform's height in CSS pixels
const BAND = 120; // the spectrogram's height
const ROW = 14; // a target token's row

/** The cross stack's layer and head asked: the chosen ones, within the cross stack. */
function crossHead(state) {
  const cross = state.model?.stacks?.find((s) => s.name === "cross");
  if (!cross) return null;
  return [Math.min(state.layer ?? 0, cross.n_layer - 1), Math.min(state.head ?? 0, cross.n_head - 1)];
}

function speechQuestion(state) {
  const head = crossHead(state);
  if (!head || blankSubject(state) || !state.model?.audio) return null;
  const body = { ...subject(state, URL), stack: "cross", spectrogram: true, layers: [head[0]], heads: [head[1]] };
  const mean = state.speechRows === "mean";
  Object.assign(body, { include: mean ? [] : ["pattern"], encoding: "b64", top_k: 0, alignment_mean: mean });
  return question("speech", URL, body);
}

export const need = (state) => [speechQuestion(state)];

const PANEL = `
  <article class="card fig-card">
    <header class="card-head row"><h2>Where each token listens</h2>
      <label class="small">rows: <select id="speech-rows" data-testid="speech-rows">
        <option value="head">the chosen head</option><option value="mean">the alignment heads' mean</option>
      </select></label></header>
    <p id="speech-caption" class="muted small" data-testid="speech-caption"></p>
    <div class="speech-figure">
      <canvas id="speech-canvas" class="speech-canvas" data-testid="speech-canvas" role="img"
        aria-label="The recording's spectrogram over seconds, and the chosen cross head's attention over it"></canvas>
      <div id="speech-words" class="speech-words" data-testid="speech-words"></div>
    </div>
  </article>`;

export function install(app) {
  byId("view-speech").innerHTML = PANEL;
  byId("speech-rows").addEventListener("change", (e) => {
    app.state.speechRows = e.target.value;
    app.update();
  });
  byId("speech-words").addEventListener("click", (e) => {
    const word = e.target.closest("[data-start]");
    const player = byId("audio-player");
    if (!word || !player) return;
    player.currentTime = Number(word.dataset.start);
    player.play().catch(() => {});
  });
  byId("audio-player")?.addEventListener("timeupdate", () => lightWord(byId("audio-player").currentTime));
}

/** The word playing at `t` seconds lit, the others not. */
function lightWord(t) {
  for (const el of byId("speech-words").children)
    el.classList.toggle("playing", Number(el.dataset.start) <= t && t < Number(el.dataset.end));
}

/** A weight (or a feature scaled to [0, 1]) as a colour: dark to light. */
const shade = (x) => {
  const v = Math.round(255 * Math.max(0, Math.min(1, x)));
  return [v, Math.round(v * 0.85), Math.round(80 + v * 0.6)];
};

/** The waveform's columns (each its min to max, scaled to the loudest) over `frames` columns of `perFrame` s. */
function paintWave(ctx, { seconds_per_column: per, min, max }, perFrame) {
  const peak = Math.max(...min.map(Math.abs), ...max, 1e-9);
  const half = WAVE / 2 - 1;
  const width = Math.max(1, per / perFrame);
  ctx.fillStyle = "#9fd4ff";
  min.forEach((lo, c) => {
    const top = WAVE / 2 - (max[c] / peak) * half;
    ctx.fillRect(Math.floor((c * per) / perFrame), top, width, Math.max(1, ((max[c] - lo) / peak) * half));
  });
}

/** The waveform, the spectrogram band and the rows into `canvas`, `frames` columns of `perFrame` seconds. */
export function paintSpeech(canvas, { waveform, spectrogram, pattern, frames, perFrame }) {
  const rows = pattern.length;
  canvas.width = frames;
  canvas.height = WAVE + BAND + rows * ROW;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(frames, canvas.height);
  const bins = spectrogram.length;
  const flat = spectrogram.flatMap((r) => r.slice(0, frames));
  const lo = Math.min(...flat);
  const hi = Math.max(...flat);
  const put = (x, y, rgb) => img.data.set([...rgb, 255], 4 * (y * frames + x));
  for (let y = 0; y < WAVE; y++) for (let x = 0; x < frames; x++) put(x, y, [16, 20, 32]);
  for (let y = 0; y < BAND; y++) {
    const bin = bins - 1 - Math.floor((y * bins) / BAND); // the lowest band at the bottom
    for (let x = 0; x < frames; x++) put(x, WAVE + y, shade((spectrogram[bin][x] - lo) / (hi - lo || 1)));
  }
  pattern.forEach((row, r) => {
    const top = Math.max(...row.slice(0, frames), 1e-9);
    for (let y = 0; y < ROW; y++)
      for (let x = 0; x < frames; x++) put(x, WAVE + BAND + r * ROW + y, shade(row[x] / top));
  });
  ctx.putImageData(img, 0, 0);
  paintWave(ctx, waveform, perFrame);
}

function drawWords(box, words, seconds) {
  box.replaceChildren(
    ...words.map((w) => {
      const el = document.createElement("button");
      el.type = "button";
      el.className = "speech-word";
      el.textContent = w.word.trim();
      Object.assign(el.dataset, { start: w.start, end: w.end });
      el.style.left = `${(100 * w.start) / seconds}%`;
      el.title = `${w.word.trim()}: ${w.start.toFixed(2)}–${w.end.toFixed(2)} s (click: play from here)`;
      return el;
    }),
  );
}

function rowsSay(mean, aligned, layer, head) {
  if (mean) return "the alignment heads' mean cross-attention (these heads time the words)";
  return `cross layer ${layer} head ${head}${aligned ? " (an alignment head: these time the words)" : ""}`;
}

export function draw(state) {
  const q = speechQuestion(state);
  if (!q) return setText(byId("speech-caption"), "Drop, pick or record a recording beside the target.") && false;
  const { response, error } = answerIn(state, q);
  if (error || !response) {
    setText(byId("speech-caption"), error ? `Could not hear it: ${error}` : "listening…");
    return false;
  }
  const audio = response.audio;
  const frames = Math.max(1, audio.audio_frames);
  const seconds = frames * audio.seconds_per_frame;
  const [layer, head] = crossHead(state);
  const mean = state.speechRows === "mean";
  byId("speech-rows").value = state.speechRows;
  const pattern = mean ? response.alignment_mean : response.layers[0].heads[0].pattern;
  const { waveform, spectrogram, seconds_per_frame: perFrame } = audio;
  paintSpeech(byId("speech-canvas"), { waveform, spectrogram, pattern, frames, perFrame });
  drawWords(byId("speech-words"), response.words ?? [], seconds);
  const aligned = (state.model.alignment_heads ?? []).some(([l, h]) => l === layer && h === head);
  setText(
    byId("speech-caption"),
    `${audio.duration.toFixed(2)} s heard as ${frames} frames of ${audio.seconds_per_frame} s (0 to ` +
      `${seconds.toFixed(2)} s, left to right; the window's padding after it left out). Top: the waveform (each ` +
      `column's min to max, scaled to the loudest), then the log-mel spectrogram, low pitches at the bottom. ` +
      `Below: ${rowsSay(mean, aligned, layer, head)}, one row per target token ` +
      `(${response.target_tokens.length}), each row's weights over the frames, scaled to its largest. Words at ` +
      `their times (the alignment heads, dynamic time warping): click one to hear it.`,
  );
  return true;
}
