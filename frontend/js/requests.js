// The bodies of the requests to POST /api/attention, each a function of the state: the
// all-heads grid, the chosen head (whole, or max-pooled for a long text), the predictions alone, and the
// JSON export, each from the state's subject (subject.js). data.js and export.js send them; the exact cells
// of a zoomed block are the head view's own question (views/head.js).

import { currentGrid } from "./state.js";
import { attentionLayers, keyTokens } from "./stacks.js";
import { gridAsks, headAsks, messagesOf, subject } from "./subject.js";
import { viewById } from "./views.js";
import { copyFields } from "./wire.js";

const URL = "/api/attention";

/** Thumbnails of the grid are at most this many cells a side (max-pooled on the server). */
export const GRID_THUMBNAIL = 64;

/** Past this many tokens the chosen head's matrices come as half floats (half the bytes). */
export const HALF_PRECISION_FROM = 257;

/**
 * Body of the all-heads request: every layer and head as a max-pooled thumbnail (u1) with
 * its statistics, no per-row arrays, none of the unscaled softmax (the grid draws none) and no predictions:
 * small at any length. A hybrid's implicit heads come as signed thumbnails (numbers) in their own rows.
 */
export function gridRequest(state) {
  return {
    ...gridAsks(state), // what it asks about, its answer's key (state.js gridKey); the rest says how it comes
    include: ["stats"],
    stats_rows: false,
    stats_unscaled: false,
    thumbnail: GRID_THUMBNAIL,
    encoding: "b64",
    top_k: 0,
  };
}

/** Past this many tokens (at most) the predictions are the top 5, not 10: they come for every position. */
export const FEWER_PREDICTIONS_FROM = 2048;

/**
 * The most tokens the text (or conversation) can have: its UTF-8 bytes (a token covers at least one byte) plus a few
 * special tokens; the exact count once the grid answer for this text is in (the longer side: a cross stack's keys
 * are the source's).
 */
export function tokenBound(state) {
  const grid = currentGrid(state);
  if (grid) return Math.max(grid.tokens.length, keyTokens(state, grid).length);
  const messages = messagesOf(state);
  // a conversation: its contents, and the template's markup around each turn (a generous bound per turn)
  if (messages) return new TextEncoder().encode(messages.map((m) => m.content).join("")).length + 32 * messages.length;
  return new TextEncoder().encode(state.text).length + 8;
}

/** Whether the chosen head is asked max-pooled (`focus.thumbnail`): when it may not fit the heatmap's cells. */
export const pooledFocus = (state) => tokenBound(state) > state.drawCells;

/**
 * The fields the chosen head's views draw, as `focus.include`: these, and those the current view adds (its
 * `focus`).
 */
export function focusFields(state) {
  return ["pattern", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", ...(viewById(state.view).focus ?? [])];
}

/**
 * Body of the chosen-head request for a text longer than the heatmap has cells: the head's
 * matrices max-pooled on the server to at most drawCells a side (`focus.thumbnail`), its
 * statistics with the per-row entropies, and the predictions. `thumbnail` (4) keeps the T×T
 * mask out of the answer: its mask comes pooled as `focus.thumbnail.mask`.
 */
function pooledDetailRequest(state) {
  return {
    ...headAsks(state), // what it asks about, its answer's key (state.js headKey)
    include: ["stats"],
    thumbnail: 4,
    focus: { layer: state.layer, head: state.head, include: focusFields(state), thumbnail: state.drawCells },
    encoding: "b64",
    precision: "f2",
    top_k: tokenBound(state) > FEWER_PREDICTIONS_FROM ? 5 : 10,
    temperature: state.temperature,
  };
}

/**
 * Body of one request for both answers of a text whose chosen head is asked pooled (`pooledFocus`): the
 * grid's body with the chosen head's `focus` (its statistics with their per-row entropies among its fields),
 * its predictions and its precision. The server runs the text once instead of twice, and the page parses
 * one answer; `detailOf` reads the chosen head's answer out of it.
 */
export function bothRequest(state) {
  const { focus, precision, top_k, temperature } = pooledDetailRequest(state);
  return {
    ...gridRequest(state),
    focus: { ...focus, include: [...focus.include, "stats"] },
    precision,
    top_k,
    temperature,
  };
}

/**
 * The chosen head's answer inside an answer to `bothRequest`, in the shape of the chosen-head request's: the
 * focus layer alone, holding the focus head alone, with the focus's statistics (those carry the per-row
 * entropies). Fields are copied, not read: what no view draws stays undecoded (wire.js).
 */
export function detailOf(answer) {
  const { layer, head, stats } = answer.focus;
  const l = answer.layers.find((x) => x.layer === layer);
  const chosen = l.heads.find((x) => x.head === head);
  const oneHead = Object.assign(copyFields(chosen, ["stats"]), { stats });
  const oneLayer = Object.assign(copyFields(l, ["heads"]), { heads: [oneHead] });
  return Object.assign(copyFields(answer, ["layers"]), { layers: [oneLayer] });
}

/** Body of the chosen-head request: every per-head field, plus the predictions. */
export function detailRequest(state) {
  if (pooledFocus(state)) return pooledDetailRequest(state);
  const T = state.grid?.response?.tokens?.length ?? 0;
  return {
    ...headAsks(state), // what it asks about, its answer's key (state.js headKey); the rest says how it comes
    // attn_scores_uncapped: the scores before a softcap (sent only by layers that have one); the parts of
    // q·kᵀ (`score_part` in the field table): sent only by the layers that split it
    include: [
      "pattern",
      "pattern_unscaled",
      "attn_scores_raw",
      ...(state.model?.fields ?? []).filter((f) => f.score_part).map((f) => f.name),
      "attn_scores_uncapped",
      "attn_scores",
      "stats",
      "q",
      "k",
    ],
    encoding: "b64",
    precision: T >= HALF_PRECISION_FROM ? "f2" : "f4",
    top_k: 10,
    temperature: state.temperature,
  };
}

/** Body of the chosen head's exact matrices as float32, whatever the heatmap draws (the CSV export). */
export function exactHeadRequest(state) {
  return {
    ...subject(state, URL),
    layers: [state.layer],
    heads: [state.head],
    include: ["pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores"],
    encoding: "b64",
    precision: "f4", // the plain JSON encoding rounds weights to 5 decimals: 3e-7 would be 0
    top_k: 0,
  };
}

/**
 * What a head's answer can hold, from the server's field table (GET /api/model `fields`): its names, or those
 * of `kinds`.
 */
export const fieldNames = (model, ...kinds) =>
  (model?.fields ?? [])
    .filter((f) => (f.at ?? "head") === "head" && (kinds.length === 0 || kinds.includes(f.kind)))
    .map((f) => f.name);

/**
 * Whether the export can hold every head's whole matrices: the cells it asks for, counted as
 * the server counts them, within the server's `limits.max_matrix_cells`.
 */
export function exportWhole(state) {
  const model = state.model;
  const limit = model?.limits?.max_matrix_cells;
  if (!model || !limit) return true;
  const T = tokenBound(state);
  // the T×T fields; attn_scores_uncapped comes only from layers with a softcap: the server counts it only then
  // the parts of q·kᵀ only from a model whose flag says it has them (a quirk's `flag`)
  const flagged = new Set((model.fields ?? []).filter((f) => f.flag && !model[f.flag]).map((f) => f.name));
  const sent = (name) => (name !== "attn_scores_uncapped" || model.softcap != null) && !flagged.has(name);
  const matrices = fieldNames(model, "weights", "scores").filter(sent).length;
  return attentionLayers(model).length * model.n_head * matrices * T * T <= limit;
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
    return { ...detail, layers: null, heads: null, encoding: "json", include: fieldNames(state.model) };
  }
  const focus = detail.focus ?? { layer: state.layer, head: state.head, include: [...detail.include] };
  return {
    ...gridRequest(state),
    stats_rows: true,
    stats_unscaled: true,
    encoding: "json",
    focus,
    top_k: detail.top_k,
    temperature: state.temperature,
  };
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
    ...subject(state, URL),
    layers: [],
    include: [],
    top_k: tokenBound(state) > FEWER_PREDICTIONS_FROM ? 5 : 10,
    temperature: state.temperature,
  };
}
