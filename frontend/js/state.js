// The one state object of the explorer (and of the notebook widget), its round trip through
// the URL hash, and the questions every part asks of it: which answer belongs to the current
// text and what-ifs, which token is chosen, what a limit of the server is.
//
// Everything the page shows is a function of this object: events and API answers change it
// (controls.js, data.js, the cards), render.js reads it and redraws.

import { parseSampling } from "./cards/sampling.js";
import { offParam, parseOff } from "./switchedoff.js";
import { attentionKey, gridAsks, headAsks, messagesParam, parseMessages, seq2seqLink, subjectKey } from "./subject.js";
import { attentionLayers } from "./stacks.js";

export const EXAMPLES = [
  {
    label: "Cat on the mat",
    text: "The cat sat on the mat because the mat was warm.",
  },
  {
    label: "Repeated phrase (induction)",
    // ends one token short of the copy: the token that followed "blue" the first time is the
    // next prediction, which is what an induction head supplies (tests/app/test_app_examples.py)
    text: "Open the red door, then close the blue window. Open the red door, then close the blue",
  },
  {
    label: "Instructions",
    text: "Click the Files icon, choose a folder, and press Delete to move it to the trash.",
  },
  {
    label: "Python",
    text: "def average(values):\n    total = sum(values)\n    return total / len(values)",
  },
  {
    label: "Long paragraph",
    text:
      "A package manager keeps track of every file that a program installs, so that the program can be " +
      "upgraded or removed cleanly later. When you ask it to install a package, it first reads the list of " +
      "dependencies, works out which other packages are missing, and downloads all of them from the " +
      "configured mirrors. Each archive is checked against a signature before anything is unpacked. If a " +
      "check fails, the manager stops and tells you which file was wrong, because a damaged or tampered " +
      "archive must never reach the system. After unpacking, small scripts inside the package may run to " +
      "create users, start services or update caches. The whole operation is recorded in a log, so an " +
      "administrator can see later what changed, when it changed and why. Removing a package reverses " +
      "these steps, although configuration files are usually kept in case you install the program again.",
  },
];

export const DEFAULT_TEXT = EXAMPLES[0].text;

/** Most cells a side the page draws of the chosen head (a longer text's head comes max-pooled to fit). */
export const FOCUS_MAX = 512;

/**
 * The page state: what every view reads (the text, the model, the what-ifs, the chosen layer, head
 * and token, the answers of the grid and the chosen head), the cards' fields, and each view's own
 * slice (its `state` export: its fields and their defaults, views.js), merged in.
 */
export function createState(views = []) {
  const shared = {
    // what the user chose
    text: DEFAULT_TEXT,
    // the conversation on a chat model ([{role, content}], chat.js): sent instead of the text while it has turns
    messages: [],
    stack: null, // an encoder–decoder's attention stack (stacks.js): "encoder", "decoder", "cross"; null: the default
    target: "", // an encoder–decoder's target (the decoder's text, cards/target.js): "" lets the model write it
    layer: 0,
    head: 0,
    view: "head",
    causal: true, // what-if: false removes the mask in every layer
    scaled: true, // what-if: false sends scale "none"
    position: null, // query position whose predictions are shown; null = the last token
    temperature: 1.0,
    // Continue: greedy, or sampled at the temperature above among the top_k / top_p (null: all), seeded
    sampling: { on: false, top_k: null, top_p: null, seed: null },
    // heads switched off, [{layer, head}] sorted: every /api/attention request carries it (switchedoff.js)
    ablate: [],
    // what the server told us
    model: null, // GET /api/model
    routes: null, // the parts of the subject each route takes, read from /openapi.json (subject.js loadRoutes)
    grid: null, // {key, text, prompt, response}: all layers and heads, pattern + stats (prompt: subjectKey)
    detail: null, // {key, text, prompt, textKey, temperature, response}: the chosen head with every field
    error: null, // text of the last error, shown in the banner
    // the server's refusal of the text (its 422 detail item: type and ctx, e.g. the token count),
    // so that the message and the token counter say the same number; null when it was accepted
    refusal: null,
    notice: null, // a calm note (not an error), e.g. that a link named a head the model lacks
    // the last error of each request kind; the two run at once, so a success of one must not
    // clear the other's error
    requestErrors: { grid: null, detail: null },
    pending: { grid: false, detail: false },
    // cells a side the head heatmap can draw (measured by data.js alone, before it asks for the chosen head)
    drawCells: FOCUS_MAX,
    // the cards' measured answers, each with the inputs it was measured for (measured.js):
    // {inputs, answer} once in, {inputs, pending: true} on its way, {inputs, error} when refused
    effects: null, // POST /api/head-effects (effects.js)
    effectsMode: "zero", // how the head effects switch a head off: "zero" or "mean"
    generation: null, // the last "Continue": {inputs, steps, reason, running, error} (generate.js)
  };
  // each view's slice, a fresh copy (structuredClone: no two pages share an array)
  return Object.assign(shared, ...views.map((v) => structuredClone(v.state ?? {})));
}

// ---------------------------------------------------------------- URL hash

const clampInt = (value, lo, hi, fallback) => {
  const n = Number.parseInt(value, 10);
  if (!Number.isFinite(n)) return fallback;
  return Math.min(hi, Math.max(lo, n));
};

/** The attention layer `steps` attention layers after `layer` (before it if negative), kept inside the model. */
export function stepLayer(model, layer, steps) {
  const layers = attentionLayers(model);
  const at = Math.max(0, layers.indexOf(layer));
  return layers[Math.min(layers.length - 1, Math.max(0, at + steps))];
}

/** The largest layer or head a link may name before the model is known. */
const MAX_INDEX = 9999;

/**
 * The chosen layer and head inside `model` (the answer of GET /api/model): the last layer or
 * head where the choice is past it. `note` says what happened in words, or is null.
 */
export function fitHead({ layer, head, ablate = [] }, model) {
  const layers = attentionLayers(model);
  // past the last layer: the last attention layer; a layer without heads (a hybrid's): the attention layer
  // before it, else the first
  const below = layers.filter((l) => l <= Math.min(layer, model.n_layer - 1));
  const fit = { layer: below.length ? below.at(-1) : layers[0], head: Math.min(head, model.n_head - 1) };
  const has = (a) => layers.includes(a.layer) && a.head < model.n_head;
  const missing = ablate.filter((a) => !has(a));
  const hybrid = layers.length < model.n_layer ? ` (softmax attention in layers ${layers.join(", ")})` : "";
  const shape = `this model has ${model.n_layer} layers${hybrid} × ${model.n_head} heads`;
  const notes = [];
  const kind = model.layers?.[layer]?.type;
  if (layer < model.n_layer && !layers.includes(layer) && head < model.n_head) {
    const drawn = model.layers?.[layer]?.implicit ? " here; its implicit attention is drawn under the grid" : "";
    notes.push(
      `Layer ${layer} is a ${kind} layer, without softmax attention: it has no heads to draw${drawn}. Showing ` +
        `layer ${fit.layer}, head ${fit.head}.`,
    );
  } else if (fit.layer !== layer || fit.head !== head) {
    notes.push(`This link names layer ${layer}, head ${head}; ${shape}: showing layer ${fit.layer}, head ${fit.head}.`);
  }
  if (missing.length) {
    const names = missing.map((a) => `L${a.layer} · H${a.head}`).join(", ");
    notes.push(
      `This link switches off ${names}; ${shape}, so ${missing.length === 1 ? "it stays" : "they stay"} out of it.`,
    );
  }
  return { ...fit, ablate: ablate.filter(has), note: notes.join(" ") || null };
}

/** The temperature slider's range (index.html `#temperature`): a link's temperature is clamped into it. */
export const TEMPERATURE_RANGE = [0.1, 3];

/**
 * Read `#text=…&layer=…&head=…&view=…&causal=0&scale=none&pos=…&temp=…` into a partial state;
 * `views` are those a link may name (views.js, the registry), each reading its own keys (`link.read`).
 */
export function parseHash(hash, views = []) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const out = {};
  if (params.has("text")) out.text = params.get("text");
  if (params.has("chat")) out.messages = parseMessages(params.get("chat"));
  seq2seqLink.read(params, out);
  // kept as asked: fitHead clamps them into the model once /api/model has answered, and says so
  if (params.has("layer")) out.layer = clampInt(params.get("layer"), 0, MAX_INDEX, 0);
  if (params.has("head")) out.head = clampInt(params.get("head"), 0, MAX_INDEX, 0);
  const named = views.find((v) => v.id === params.get("view") || v.was?.includes(params.get("view")));
  if (named) out.view = named.id; // an old link's view id (a view's `was`) opens that view
  if (params.has("causal")) out.causal = params.get("causal") !== "0";
  if (params.has("scale")) out.scaled = params.get("scale") !== "none";
  if (params.has("pos")) out.position = clampInt(params.get("pos"), 0, 4095, null);
  if (params.has("temp")) {
    const t = Number.parseFloat(params.get("temp"));
    const [lo, hi] = TEMPERATURE_RANGE;
    if (Number.isFinite(t) && t > 0) out.temperature = Math.min(hi, Math.max(lo, t));
    if (out.temperature !== undefined && out.temperature !== t) {
      out.notice =
        `This link asks for temperature ${params.get("temp")}; the slider goes from ${lo} to ${hi}: ` +
        `using ${out.temperature}.`;
    }
  }
  for (const view of views) view.link?.read(params, out);
  out.ablate = parseOff(params.get("off"));
  if (params.get("sample") === "1") out.sampling = parseSampling(params);
  return out;
}

/**
 * A view's `link` that is one hash key for one text field of its slice: read whenever the link has the key,
 * written while `when(state)` holds (by default: while the field is not empty), e.g. `paramLink("textb", "textB")`.
 */
export function paramLink(key, field, when = (s) => Boolean(s[field])) {
  return {
    read(params, out) {
      if (params.has(key)) out[field] = params.get(key);
    },
    write(s, params) {
      if (when(s)) params.set(key, s[field]);
    },
  };
}

/** The hash that reopens the same picture (each view writes its own keys); defaults are left out. */
export function toHash(state, views = []) {
  const params = new URLSearchParams();
  params.set("text", state.text);
  if (state.messages.length) params.set("chat", messagesParam(state.messages));
  seq2seqLink.write(state, params);
  params.set("layer", String(state.layer));
  params.set("head", String(state.head));
  params.set("view", state.view);
  if (!state.causal) params.set("causal", "0");
  if (!state.scaled) params.set("scale", "none");
  if (state.position !== null) params.set("pos", String(state.position));
  if (state.temperature !== 1) params.set("temp", String(state.temperature));
  for (const view of views) view.link?.write(state, params);
  if (state.ablate.length) params.set("off", offParam(state.ablate));
  const s = state.sampling;
  if (s.on) {
    params.set("sample", "1");
    for (const [key, value] of [
      ["topk", s.top_k],
      ["topp", s.top_p],
      ["seed", s.seed],
    ]) {
      if (value !== null) params.set(key, String(value));
    }
  }
  return "#" + params.toString();
}

// ---------------------------------------------------------------- the shared choices, written here alone

/** Choose the token whose predictions are shown; null (a new prompt, stack or target): the last one again. */
export function chooseToken(state, position = null) {
  state.position = position;
}

/** Choose the layer and head every head view draws. */
export function chooseHead(state, layer, head) {
  state.layer = layer;
  state.head = head;
}

/** Add a calm note to the banner's (each said once); `clearNotice` lets go of them. */
export function addNotice(state, note) {
  if (note && !state.notice?.includes(note)) state.notice = [state.notice, note].filter(Boolean).join(" ");
}
export const clearNotice = (state) => void (state.notice = null);

/** Show `text` in the error banner (null: none); `clearErrors` also lets go of each request's error and refusal. */
export const showError = (state, text) => void (state.error = text);
export function clearErrors(state) {
  state.requestErrors = { grid: null, detail: null };
  state.error = state.refusal = null;
}

/**
 * A request of `kind` ("grid", "detail") ended with `error` (its words; null: answered): the banner shows what is
 * left, and the server's `refusal` of the text (its 422 item) stays while an error does.
 */
export function requestEnded(state, kind, error, refusal = null) {
  state.requestErrors[kind] = error;
  state.error = state.requestErrors.detail ?? state.requestErrors.grid;
  if (error) state.refusal = refusal;
  else if (!state.error) state.refusal = null;
}

// ---------------------------------------------------------------- which answer is current

/** The key of the grid's answer: what its request asks about (subject.js `gridAsks`: the body's subject and layers). */
export const gridKey = (state) => attentionKey(state, gridAsks(state));

/** The key of the chosen head's answer: what its request asks about (subject.js `headAsks`: the body's subject,
 * layer and head; how it comes, pooled or whole, at which temperature, is no part of it). */
export const headKey = (state) => attentionKey(state, headAsks(state));

/** The grid answer if it belongs to the current text and what-ifs, else null. */
export function currentGrid(state) {
  return state.grid && state.grid.key === gridKey(state) ? state.grid.response : null;
}

/** The chosen-head answer if it belongs to the current text, head and what-ifs, else null. */
export function currentDetail(state) {
  return state.detail && state.detail.key === headKey(state) ? state.detail.response : null;
}

/** The tokens of the current text, from any answer for it (the what-ifs do not change them), or null. */
export function textTokens(state) {
  const prompt = subjectKey(state, false);
  const answer = [state.grid, state.detail].find((a) => a?.response?.tokens && a.prompt === prompt);
  return answer ? answer.response.tokens : null;
}

/** The query position whose predictions are shown, of a text of `T` tokens: the chosen one, else the last. */
export function selectedPosition(state, T) {
  if (state.position === null || state.position >= T) return T - 1;
  return state.position;
}

/**
 * The chosen position of the current text (the last token when none is chosen), or null before its tokens are
 * known.
 */
export function chosenPosition(state) {
  const tokens = textTokens(state);
  if (tokens) return selectedPosition(state, tokens.length);
  return state.position;
}

/** The model's head size, as GET /api/model or an answer's `model` says (null before either). */
export function headDim(state) {
  return state.model?.head_dim ?? currentGrid(state)?.model?.head_dim ?? currentDetail(state)?.model?.head_dim ?? null;
}

// ---------------------------------------------------------------- the server's limits

/**
 * A limit of the server, as GET /api/model's `limits` names it (max_text_chars, max_matrix_cells,
 * region_max, max_new_tokens): never a copy in the page. null until the model is known.
 */
export const limitOf = (state, name) => state.model?.limits?.[name] ?? null;
