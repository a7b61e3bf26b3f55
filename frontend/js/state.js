// The one state object of the explorer, and its round trip through the URL hash.
//
// Everything the page shows is a function of this object: main.js changes it in response
// to events and to API answers, views.js reads it and redraws.

import { offParam, parseOff } from "./ablation.js";

export const VIEWS = ["head", "compare", "pipeline", "variance", "roles"];

export const VIEW_LABELS = {
  head: "Head & all heads",
  compare: "Scaled vs unscaled",
  pipeline: "Mask pipeline",
  variance: "Score variance",
  roles: "Head roles",
};

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

export const ROLE_INFO = {
  previous_token: "attends to the token just before the query (position t−1).",
  first_token: "parks its attention on the very first token, a common ‘attention sink’.",
  induction: "on a repeated sequence, looks at the token that followed the earlier copy of the current token.",
  self: "attends to the query’s own position (the diagonal).",
};

export function createState() {
  return {
    // what the user chose
    text: DEFAULT_TEXT,
    layer: 0,
    head: 0,
    view: "head",
    causal: true, // what-if: false removes the mask in every layer
    scaled: true, // what-if: false sends scale "none"
    position: null, // query position whose predictions are shown; null = the last token
    temperature: 1.0,
    role: "induction",
    aggregate: false, // show the per-layer mean of the heads in the grid
    ablate: [], // heads switched off, [{layer, head}] sorted: every /api/attention request carries it (ablation.js)
    // what the server told us
    model: null, // GET /api/model
    roles: null, // GET /api/heads
    grid: null, // {key, response}: all layers and heads, pattern + stats
    detail: null, // {key, response}: the chosen head with every field
    error: null, // text of the last error, shown in the banner
    // the server's refusal of the text (its 422 detail item: type and ctx, e.g. the token count),
    // so that the message and the token counter say the same number; null when it was accepted
    refusal: null,
    notice: null, // a calm note (not an error), e.g. that a link named a head the model lacks
    // the last error of each request kind; the two run at once, so a success of one must not
    // clear the other's error
    requestErrors: { grid: null, detail: null },
    pending: { grid: false, detail: false },
    // long texts (issue 16): cells a side the head heatmap can draw (main.js measures it); the
    // zoomed token block of the head heatmap ({q0, q1, k0, k1}, null = the whole head) and the
    // exact cells of that block ({key, bounds, response}) once the server sent them
    drawCells: FOCUS_MAX,
    zoom: null,
    region: null,
  };
}

// ---------------------------------------------------------------- URL hash

const clampInt = (value, lo, hi, fallback) => {
  const n = Number.parseInt(value, 10);
  if (!Number.isFinite(n)) return fallback;
  return Math.min(hi, Math.max(lo, n));
};

/** The largest layer or head a link may name before the model is known. */
const MAX_INDEX = 9999;

/**
 * The chosen layer and head inside `model` (the answer of GET /api/model): the last layer or
 * head where the choice is past it. `note` says what happened in words, or is null.
 */
export function fitHead({ layer, head }, model) {
  const fit = { layer: Math.min(layer, model.n_layer - 1), head: Math.min(head, model.n_head - 1) };
  const note =
    fit.layer === layer && fit.head === head
      ? null
      : `This link names layer ${layer}, head ${head}; this model has ${model.n_layer} layers × ` +
        `${model.n_head} heads: showing layer ${fit.layer}, head ${fit.head}.`;
  return { ...fit, note };
}

/** Read `#text=…&layer=…&head=…&view=…&causal=0&scale=none&pos=…&temp=…` into a partial state. */
export function parseHash(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const out = {};
  if (params.has("text")) out.text = params.get("text");
  // kept as asked: fitHead clamps them into the model once /api/model has answered, and says so
  if (params.has("layer")) out.layer = clampInt(params.get("layer"), 0, MAX_INDEX, 0);
  if (params.has("head")) out.head = clampInt(params.get("head"), 0, MAX_INDEX, 0);
  if (params.has("view") && VIEWS.includes(params.get("view"))) out.view = params.get("view");
  if (params.has("causal")) out.causal = params.get("causal") !== "0";
  if (params.has("scale")) out.scaled = params.get("scale") !== "none";
  if (params.has("pos")) out.position = clampInt(params.get("pos"), 0, 4095, null);
  if (params.has("temp")) {
    const t = Number.parseFloat(params.get("temp"));
    if (Number.isFinite(t) && t > 0) out.temperature = t;
  }
  if (params.has("role")) out.role = params.get("role");
  if (params.has("mean")) out.aggregate = params.get("mean") === "1";
  out.ablate = parseOff(params.get("off"));
  return out;
}

/** The hash that reopens the same picture; defaults are left out to keep links short. */
export function toHash(state) {
  const params = new URLSearchParams();
  params.set("text", state.text);
  params.set("layer", String(state.layer));
  params.set("head", String(state.head));
  params.set("view", state.view);
  if (!state.causal) params.set("causal", "0");
  if (!state.scaled) params.set("scale", "none");
  if (state.position !== null) params.set("pos", String(state.position));
  if (state.temperature !== 1) params.set("temp", String(state.temperature));
  if (state.view === "roles") params.set("role", state.role);
  if (state.aggregate) params.set("mean", "1");
  if (state.ablate.length) params.set("off", offParam(state.ablate));
  return "#" + params.toString();
}

// ---------------------------------------------------------------- requests

/** The request's `scale`: the model's own divisor, or 1 as the what-if. */
export const scaleParam = (state) => (state.scaled ? "model" : "none");

/** Thumbnails of the grid are at most this many cells a side (max-pooled on the server). */
export const GRID_THUMBNAIL = 64;

/** Past this many tokens the chosen head's matrices come as half floats (half the bytes). */
export const HALF_PRECISION_FROM = 257;

/**
 * Body of the all-heads request: every layer and head as a max-pooled thumbnail (u1) with
 * its statistics, no per-row arrays and no predictions: small at any length.
 */
export function gridRequest(state) {
  return {
    text: state.text,
    include: ["stats"],
    stats_rows: false,
    thumbnail: GRID_THUMBNAIL,
    encoding: "b64",
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: 0,
  };
}

/** Most cells a side of the chosen head's pooled matrices, and of an exact region (the server's REGION_MAX). */
export const FOCUS_MAX = 512;
export const REGION_MAX = 512;
/** Past this many tokens (at most) the predictions are the top 5, not 10: they come for every position. */
export const FEWER_PREDICTIONS_FROM = 2048;

/**
 * The most tokens `text` can have: its UTF-8 bytes (a token covers at least one byte) plus a few
 * special tokens; the exact count once the grid answer for this text is in.
 */
export function tokenBound(state) {
  const grid = currentGrid(state);
  if (grid) return grid.tokens.length;
  return new TextEncoder().encode(state.text).length + 8;
}

/** Whether the chosen head is asked max-pooled (`focus.thumbnail`): when it may not fit the heatmap's cells. */
export const pooledFocus = (state) => tokenBound(state) > state.drawCells;

/** The fields the chosen head's views draw, as `focus.include` (the compare view adds the unscaled pattern). */
export function focusFields(view) {
  const fields = ["pattern", "attn_scores_raw", "attn_scores_uncapped", "attn_scores"];
  return view === "compare" ? [...fields, "pattern_unscaled"] : fields;
}

/**
 * Body of the chosen-head request for a text longer than the heatmap has cells: the head's
 * matrices max-pooled on the server to at most drawCells a side (`focus.thumbnail`), its
 * statistics with the per-row entropies, and the predictions. `thumbnail` (4) keeps the T×T
 * mask out of the answer: its mask comes pooled as `focus.thumbnail.mask`.
 */
function pooledDetailRequest(state) {
  return {
    text: state.text,
    layers: [state.layer],
    heads: [state.head],
    include: ["stats"],
    thumbnail: 4,
    focus: { layer: state.layer, head: state.head, include: focusFields(state.view), thumbnail: state.drawCells },
    encoding: "b64",
    precision: "f2",
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: tokenBound(state) > FEWER_PREDICTIONS_FROM ? 5 : 10,
    temperature: state.temperature,
  };
}

/** Body of the zoomed head heatmap's request: the exact cells of one block of the chosen head. */
export function regionRequest(state, { q0, q1, k0, k1 }) {
  return {
    text: state.text,
    layers: [],
    include: [],
    focus: { layer: state.layer, head: state.head, include: ["pattern", "attn_scores_raw", "attn_scores"], region: [q0, q1, k0, k1] },
    encoding: "b64",
    precision: "f2",
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: 0,
  };
}

/** Body of the chosen-head request: every per-head field, plus the predictions. */
export function detailRequest(state) {
  if (pooledFocus(state)) return pooledDetailRequest(state);
  const T = state.grid?.response?.tokens?.length ?? 0;
  return {
    text: state.text,
    layers: [state.layer],
    heads: [state.head],
    // attn_scores_uncapped: the scores before a softcap (sent only by layers that have one)
    include: ["pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", "stats", "q", "k"],
    encoding: "b64",
    precision: T >= HALF_PRECISION_FROM ? "f2" : "f4",
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: 10,
    temperature: state.temperature,
  };
}

/** The whole matrices the JSON export asks for every head (attn_scores_uncapped: only layers with a softcap send it). */
export const EXPORT_MATRICES = ["pattern", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", "pattern_unscaled"];

/**
 * Whether the export can hold every head's whole matrices: the cells it asks for, counted as
 * the server counts them, within the server's `limits.max_matrix_cells`.
 */
export function exportWhole(state) {
  const model = state.model;
  const limit = model?.limits?.max_matrix_cells;
  if (!model || !limit) return true;
  const T = tokenBound(state);
  // attn_scores_uncapped comes only from layers with a softcap: the server counts it only then
  const matrices = EXPORT_MATRICES.length - (model.softcap == null ? 1 : 0);
  return model.n_layer * model.n_head * matrices * T * T <= limit;
}

/**
 * Body of the JSON export, plain JSON. When it fits the server's limit: every layer and head with
 * its whole matrices, statistics, q, k and v, and the top 10 guesses. Past it (a long text), what
 * the page shows: every head's thumbnail with its statistics and per-row entropies, and the
 * chosen head at the page's level of detail (max-pooled, or whole when it fits the heatmap).
 */
export function exportRequest(state) {
  const detail = detailRequest(state);
  delete detail.precision;
  if (exportWhole(state)) {
    return { ...detail, layers: null, heads: null, encoding: "json", include: [...EXPORT_MATRICES, "stats", "q", "k", "v"] };
  }
  const focus = detail.focus ?? { layer: state.layer, head: state.head, include: [...detail.include] };
  return { ...gridRequest(state), stats_rows: true, encoding: "json", focus, top_k: detail.top_k, temperature: state.temperature };
}

/** The export button's tooltip: what the file will hold for this text. */
export function exportTitle(state) {
  return exportWhole(state)
    ? "The /api/attention answer for this text and what-ifs: every layer and head with its pattern, scores and " +
        "statistics, q, k and v, and the top 10 next-token guesses after each token"
    : "The /api/attention answer for this text and what-ifs at the page's level of detail: every head's thumbnail " +
        "(max-pooled) with its statistics, and the chosen head as drawn; whole matrices of every head would be over " +
        "the server's limit for a text this long";
}

/** Body of the temperature slider's request: predictions only, no layer computed into the answer. */
export function predictionsRequest(state) {
  return {
    text: state.text,
    layers: [],
    include: [],
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: tokenBound(state) > FEWER_PREDICTIONS_FROM ? 5 : 10,
    temperature: state.temperature,
  };
}

/** Identifies the answer to a grid request: text and what-ifs. */
export const gridKey = (state) => JSON.stringify([state.text, state.causal, scaleParam(state), offParam(state.ablate)]);

/** Identifies the answer to a chosen-head request (the temperature only moves the predictions). */
export const headKey = (state) => JSON.stringify([state.text, state.causal, scaleParam(state), offParam(state.ablate), state.layer, state.head]);

/** The grid answer if it belongs to the current text and what-ifs, else null. */
export function currentGrid(state) {
  return state.grid && state.grid.key === gridKey(state) ? state.grid.response : null;
}

/** The chosen-head answer if it belongs to the current text, head and what-ifs, else null. */
export function currentDetail(state) {
  return state.detail && state.detail.key === headKey(state) ? state.detail.response : null;
}
