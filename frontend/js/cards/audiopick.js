// The recording a speech model hears (GET /api/model `audio`), in place of the text: drop a file on the
// field, pick one, or record one with the microphone. A file is sent as it is (WAV, FLAC, OGG/Vorbis or MP3: the
// server decodes and resamples it, docs/API.md "Speech"); a recording made here is the browser's own decoding of
// what the microphone gave, written as a 16-bit WAV, since browsers record WebM or MP4, which the server does not
// read. A file over `audio_limits.max_bytes` is refused here in one line; the server's refusals (too long, not
// audio) come back as the answer's error. The recording lives in the state (`state.audio`); the link keeps only
// its key (`audio=`: the first 12 hex digits of its SHA-256, subject.js `seq2seqLink`), so a link opened again
// says which recording to drop, and whether the one dropped is that one.

import { byId, dataUrl, setHidden, setSource, setText } from "../dom.js";
import { modelTakes } from "../subject.js";

const FIELD = `
  <span class="field-label">Recording <span class="muted small">(what the model hears)</span></span>
  <div id="audio-drop" class="image-drop" data-testid="audio-drop" tabindex="0">
    <span id="audio-words" class="muted small" data-testid="audio-words">Drop a recording here, or</span>
    <label class="btn small"><input type="file" id="audio-file" data-testid="audio-file"
      accept="audio/*,.wav,.flac,.ogg,.mp3" hidden />pick one</label>
    <button type="button" id="audio-record" class="btn small" data-testid="audio-record">record</button>
    <button type="button" id="audio-remove" class="btn small" data-testid="audio-remove" hidden>remove</button>
  </div>
  <audio id="audio-player" data-testid="audio-player" controls preload="auto" hidden></audio>
  <p id="audio-refusal" class="image-refusal small" data-testid="audio-refusal" role="alert" hidden></p>
  <p id="audio-link" class="small" data-testid="audio-link" hidden></p>
  <p class="muted small" data-testid="audio-note">WAV, FLAC, OGG/Vorbis or MP3, at most the model's window; the
    target above is what the decoder reads (blank: the model writes it). A link carries the recording's key,
    not the recording: opened again, the page asks for it here.</p>`;

const fmt = (n) => n.toLocaleString("en-US");

/** `samples` (Float32Array, mono, in [-1, 1]) at `rate` Hz as a 16-bit PCM WAV file. */
export function wavBlob(samples, rate) {
  const out = new DataView(new ArrayBuffer(44 + 2 * samples.length));
  const text = (at, s) => [...s].forEach((c, i) => out.setUint8(at + i, c.charCodeAt(0)));
  text(0, "RIFF");
  out.setUint32(4, 36 + 2 * samples.length, true);
  text(8, "WAVEfmt ");
  out.setUint32(16, 16, true); // the fmt chunk's size
  out.setUint16(20, 1, true); // PCM
  out.setUint16(22, 1, true); // one channel
  out.setUint32(24, rate, true);
  out.setUint32(28, 2 * rate, true); // bytes a second
  out.setUint16(32, 2, true); // bytes a frame
  out.setUint16(34, 16, true); // bits a sample
  text(36, "data");
  out.setUint32(40, 2 * samples.length, true);
  samples.forEach((x, i) => out.setInt16(44 + 2 * i, Math.round(Math.max(-1, Math.min(1, x)) * 32767), true));
  return new Blob([out.buffer], { type: "audio/wav" });
}

/** A recording's key in a link: its SHA-256's first 12 hex digits (its size where the page has no crypto). */
async function keyOf(blob) {
  if (!globalThis.crypto?.subtle) return `${blob.size}b`; // only a secure context (https, localhost) has it
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", await blob.arrayBuffer()));
  return Array.from(hash.slice(0, 6), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** `blob` checked against `limits` (`audio_limits`): `{audio}` ({id, key, data, name, bytes}) or `{refusal}`. */
export async function readAudio(blob, name, limits, id) {
  if (limits && blob.size > limits.max_bytes)
    return {
      refusal: `audio: ${name} is ${fmt(blob.size)} bytes; this server takes at most ${fmt(limits.max_bytes)} bytes.`,
    };
  return { audio: { id, key: await keyOf(blob), data: await dataUrl(blob), name, bytes: blob.size } };
}

/** What the field says of a link's recording (`state.audioLink`, its key): drop it again, or not this one. */
function linkWords(state) {
  const asked = state.audioLink;
  if (!asked || state.audio?.key === asked) return "";
  if (!state.audio) return `This link was made with a recording (key ${asked}): drop it here again.`;
  return `Not the recording this link was made with (key ${asked}; this one's is ${state.audio.key}).`;
}

async function take(app, blob, name, id) {
  const got = await readAudio(blob, name, app.state.model?.audio_limits, id);
  Object.assign(app.state, { audio: got.audio ?? null, audioRefusal: got.refusal ?? null });
  app.update();
  app.refreshNow?.();
}

/** The microphone: the first click starts, the second stops and takes what was heard as a WAV. */
function recorder(app, button, next) {
  let rec = null;
  return async () => {
    if (rec) return rec.stop();
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const parts = [];
    rec = new MediaRecorder(stream);
    rec.ondataavailable = (e) => parts.push(e.data);
    rec.onstop = async () => {
      stream.getTracks().forEach((t) => t.stop());
      rec = null;
      button.textContent = "record";
      const context = new AudioContext();
      const heard = await context.decodeAudioData(await new Blob(parts).arrayBuffer());
      await take(app, wavBlob(heard.getChannelData(0), heard.sampleRate), "the microphone", next());
    };
    rec.start();
    button.textContent = "stop";
  };
}

/** The field in `#audio-field`, wired once; returns the card `{draw(state)}` that shows it on a speech model. */
export function installAudioPick(app) {
  const field = byId("audio-field");
  field.innerHTML = FIELD;
  const input = byId("audio-file");
  const drop = byId("audio-drop");
  let taken = 0; // each recording taken gets its own number: the answers are keyed by it
  const next = () => ++taken;
  input.addEventListener("change", () => {
    if (input.files[0]) take(app, input.files[0], input.files[0].name, next());
    input.value = "";
  });
  drop.addEventListener("dragover", (e) => e.preventDefault());
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    const file = [...(e.dataTransfer?.files ?? [])][0];
    if (file) take(app, file, file.name, next());
  });
  const button = byId("audio-record");
  button.addEventListener("click", recorder(app, button, next));
  byId("audio-remove").addEventListener("click", () => {
    Object.assign(app.state, { audio: null, audioRefusal: null });
    app.update();
  });
  return { draw: (state) => drawField(state, field) };
}

function drawField(state, field) {
  const on = modelTakes(state, "audio");
  setHidden(field, !on);
  const tab = byId("tab-speech");
  if (tab && tab.hidden === on) tab.hidden = !on;
  setHidden(byId("text-input")?.closest(".text-field") ?? null, on);
  if (!on) return;
  const player = byId("audio-player");
  const src = state.audio?.data ?? "";
  setSource(player, src);
  setHidden(player, !src);
  setHidden(byId("audio-remove"), !src);
  const words = src ? `${state.audio.name} · ${fmt(state.audio.bytes)} bytes` : "Drop a recording here, or";
  setText(byId("audio-words"), words);
  setText(byId("audio-refusal"), state.audioRefusal ?? "");
  setHidden(byId("audio-refusal"), !state.audioRefusal);
  setText(byId("audio-link"), linkWords(state));
  setHidden(byId("audio-link"), !linkWords(state));
}
