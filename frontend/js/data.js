// Asking the server for what the state needs, and storing the answers in it: the all-heads grid and the chosen
// head for the current text (in one request or two at once, drawn at the next frame), the predictions at another
// temperature, the model and the head roles at start (modelload.js). Typing is debounced here; the views say what
// they need (views.js: `needs`, and `need(state)`, their own questions, as the cards' `need`) and `ensureData` and
// `askNeeded` ask for what is missing, before each render (main.js). Each answer is keyed by what its request's body
// asks (state.js gridKey, headKey): a view never draws an older text's numbers. A refused image: cards/imagepick.js.

import { askAll } from "./answers.js";
import { errorText, latestOnly, refusalOf } from "./api.js";
import { dropRefusedImage } from "./cards/imagepick.js";
import { fitToModel, loadModel, loadRoles } from "./modelload.js";
import { inputsFor } from "./measured.js";
import {
  bothRequest,
  detailOf,
  detailRequest,
  gridRequest,
  pooledFocus,
  predictionsRequest,
} from "./requests.js";
import { FOCUS_MAX, currentDetail, currentGrid, gridKey, headKey } from "./state.js";
import { clearErrors, requestEnded, showError } from "./state.js"; // the banner, written there alone
import { blankSubject, subjectKey } from "./subject.js";
import { VIEWS, viewById } from "./views.js";

const DEBOUNCE_MS = 60;

/**
 * Send `body` with a latest-only sender and time its round trip as the performance measures `names` (the
 * benchmark reads these). The answer, or null when a newer request of that sender made it stale.
 */
async function timed(send, body, ...names) {
  const start = performance.now();
  const result = await send(body);
  if (result.stale) return null;
  for (const name of names) performance.measure(`attnscope:${name}`, { start, end: performance.now() });
  return result.value;
}

/**
 * What the page's requests share: `app` ({state, els, update}), one latest-only sender a kind, the
 * model's load on its way, the key each kind's last 4xx answered and the intent last asked.
 */
function dataContext(app) {
  return {
    app,
    sendGrid: latestOnly("/api/attention"),
    sendDetail: latestOnly("/api/attention"),
    sendPredictions: latestOnly("/api/attention"),
    modelReady: null,
    // per request kind, the answer's key (its body's, state.js gridKey/headKey) a 4xx answered: a refusal memo,
    // so a tab switch does not ask it again (a new text, head or what-if is a new key; Enter asks anyway)
    refusedKey: { grid: null, detail: null },
    // What the user last asked for (text, what-ifs, head, temperature, view): Enter on a text
    // already asked (a paste goes out on its input event) asks nothing again. Any failed request and
    // any new link forget it, so that Enter retries.
    askedKey: null,
  };
}

/**
 * Record how the last `kind` request ended (err null = it succeeded) and show the error left, if any. A refusal
 * of the image is the image field's to say (cards/imagepick.js): the image is taken out, the text alone asked.
 */
function requestDone(ctx, kind, err, key = null) {
  const state = ctx.app.state;
  if (err && dropRefusedImage(state, err)) {
    requestDone(ctx, kind, null);
    ctx.app.refreshNow?.();
    return;
  }
  ctx.refusedKey[kind] = err && err.status >= 400 && err.status < 500 ? key : null;
  if (err) ctx.askedKey = null; // asked, not answered: Enter asks again
  // the refusal's numbers feed the token counter, so it says what the message says
  requestEnded(state, kind, err ? errorText(err) : null, err ? refusalOf(err.detail) : null);
}

async function fetchGrid(ctx) {
  const { state, update, updateSoon } = ctx.app;
  if (blankSubject(state)) return; // an empty box asks nothing (see refreshAll)
  if (!state.model) {
    // a link may switch off heads the model lacks (fitToModel drops them), hold a conversation, a stack or a target
    // (sent only to a model that takes them), and a speech model hears no text: wait for the model
    state.pending.grid = true;
    await ctx.modelReady;
    state.pending.grid = false;
    if (blankSubject(state)) return update(); // a speech model without its recording yet
  }
  const record = { key: gridKey(state), text: state.text, prompt: subjectKey(state, false) };
  state.pending.grid = true;
  update();
  try {
    const answer = await timed(ctx.sendGrid, gridRequest(state), "grid-request");
    if (answer === null) return;
    state.grid = { ...record, response: answer };
    requestDone(ctx, "grid", null);
  } catch (err) {
    requestDone(ctx, "grid", err, record.key);
  }
  state.pending.grid = false;
  updateSoon();
}

/**
 * Cells a side the head heatmap can draw: its plot area's width in CSS pixels (about the
 * element's width less the token labels and the colour bar), at most FOCUS_MAX. A longer text's
 * head is asked max-pooled to this size (requests.js, pooledFocus).
 */
function measureDrawCells({ state, els }) {
  const width = els.headHeatmap.clientWidth;
  if (width > 0) state.drawCells = Math.max(64, Math.min(FOCUS_MAX, Math.round(width - 160)));
}

/** What the chosen head's answer is stored with: the keys and inputs it answers (state.js `currentDetail`). */
const detailRecord = (state) => ({
  key: headKey(state),
  text: state.text,
  prompt: subjectKey(state, false),
  textKey: gridKey(state),
  temperature: state.temperature,
  inputs: inputsFor(state, ["text", "target", "image", "ablate", "causal", "scaled"]),
});

/** Fetch the chosen head's detail (every field, predictions at the chosen temperature). */
async function fetchDetail(ctx) {
  const { state, updateSoon } = ctx.app;
  if (blankSubject(state)) return;
  if (!state.model) {
    // a link may name a head the model lacks: wait for the model, which clamps it (fitToModel)
    state.pending.detail = true;
    await ctx.modelReady;
    state.pending.detail = false;
    if (blankSubject(state)) return; // a speech model without its recording yet
  }
  measureDrawCells(ctx.app);
  const record = detailRecord(state);
  const key = record.key;
  state.pending.detail = true;
  try {
    const answer = await timed(ctx.sendDetail, detailRequest(state), "detail-request");
    if (answer === null) return;
    state.detail = { ...record, response: answer };
    requestDone(ctx, "detail", null);
  } catch (err) {
    requestDone(ctx, "detail", err, key);
  }
  state.pending.detail = false;
  updateSoon();
}

/**
 * Both answers of the current text in one request (requests.js `bothRequest`) for a head asked pooled, drawn
 * at the next frame; the head's part (answer, refusal, pending) only while that head is still the chosen one.
 */
async function fetchBoth(ctx) {
  const { state, update, updateSoon } = ctx.app;
  if (!state.model) {
    // a link may name a head, or switch off heads, the model lacks: wait for the model (fitToModel)
    state.pending.grid = state.pending.detail = true;
    await ctx.modelReady;
    state.pending.grid = state.pending.detail = false;
    if (blankSubject(state)) return; // a speech model without its recording yet
  }
  const textKey = gridKey(state);
  const record = detailRecord(state);
  const chosen = () => record.key === headKey(state); // else the head picked since has its own request
  state.pending.grid = state.pending.detail = true;
  update();
  try {
    const answer = await timed(ctx.sendGrid, bothRequest(state), "grid-request", "detail-request");
    if (answer === null) return;
    state.grid = { key: textKey, text: record.text, prompt: record.prompt, response: answer };
    requestDone(ctx, "grid", null);
    if (chosen()) {
      state.detail = { ...record, response: detailOf(answer) };
      requestDone(ctx, "detail", null);
    }
  } catch (err) {
    requestDone(ctx, "grid", err, textKey);
    if (chosen()) requestDone(ctx, "detail", err, record.key);
  }
  state.pending.grid = false;
  if (chosen()) state.pending.detail = false;
  updateSoon();
}

/** The temperature only changes the predictions: ask for those alone (no layer in the answer). */
async function fetchPredictions(ctx) {
  const { state, update } = ctx.app;
  const detail = state.detail;
  if (!detail || detail.key !== headKey(state)) return fetchDetail(ctx);
  const temperature = state.temperature;
  try {
    const result = await ctx.sendPredictions(predictionsRequest(state));
    if (result.stale || state.detail !== detail) return;
    state.detail = {
      ...detail,
      temperature,
      response: { ...detail.response, predictions: result.value.predictions },
    };
    requestDone(ctx, "detail", null);
  } catch (err) {
    requestDone(ctx, "detail", err);
  }
  update();
}

/**
 * Ask for the current text: the chosen head's detail (every view needs it) and the all-heads grid; in one
 * request (`fetchBoth`) where the head is asked pooled (a text of a few hundred characters, until its grid
 * counts the tokens), else two at once. Answers are drawn at the next frame (`updateSoon`): one render for both.
 */
async function refreshAll(ctx) {
  const { state, update } = ctx.app;
  if (blankSubject(state)) {
    // an empty box is not an error: the empty state says what to do, nothing is asked, and
    // an error of an earlier text goes with it
    clearErrors(state);
    update();
    return;
  }
  measureDrawCells(ctx.app);
  if (pooledFocus(state)) await fetchBoth(ctx);
  else await Promise.all([fetchDetail(ctx), fetchGrid(ctx)]);
}

const intentKey = (s) => JSON.stringify([headKey(s), s.temperature, s.view]); // the intent asked, keys no answer

/**
 * Typing, debounced on both edges: a keystroke after a pause goes out at once (no waiting),
 * while a burst (key repeat, fast typing) is merged and sent DEBOUNCE_MS after its last key.
 * While an answer is on its way, further edits only mark the text dirty; the newest text is
 * sent as soon as that answer lands, so a slow server never has a queue of outdated requests.
 * Returns {scheduleRefresh, refreshNow, waiting()} (whether a refresh is planned or running).
 */
function typingScheduler(ctx) {
  const state = ctx.app.state;
  let typingTimer = null;
  let scheduled = false;
  let chainRunning = false;
  let dirty = false;
  let lastKeyAt = -Infinity;

  async function runChain() {
    chainRunning = true;
    dirty = false;
    ctx.askedKey = intentKey(state);
    try {
      await refreshAll(ctx);
    } finally {
      chainRunning = false;
      if (dirty) runChain();
    }
  }

  function kick() {
    scheduled = false;
    const answered = ctx.askedKey === intentKey(state) && currentGrid(state) && currentDetail(state) && !state.error;
    if (chainRunning) dirty = dirty || ctx.askedKey !== intentKey(state);
    else if (!answered) runChain();
  }

  function scheduleRefresh() {
    clearTimeout(typingTimer);
    const now = performance.now();
    const afterPause = now - lastKeyAt > DEBOUNCE_MS;
    lastKeyAt = now;
    if (afterPause) {
      kick();
      return;
    }
    scheduled = true;
    typingTimer = setTimeout(kick, DEBOUNCE_MS);
  }

  function refreshNow() {
    clearTimeout(typingTimer);
    kick();
  }

  return { scheduleRefresh, refreshNow, waiting: () => scheduled || chainRunning };
}

/** After a view change: fetch what that view needs (its `needs`, views.js) if it is missing. */
function ensureData(ctx) {
  const state = ctx.app.state;
  const view = viewById(state.view);
  const refused = ctx.refusedKey;
  if (view.needs.includes("grid") && !currentGrid(state) && !state.pending.grid && refused.grid !== gridKey(state))
    fetchGrid(ctx);
  // a long text's head is asked with the fields of the view it was asked from (its `focus`)
  const d = currentDetail(state);
  const lacks = d?.focus?.thumbnail && (view.focus ?? []).some((field) => !d.focus[field]);
  if (view.needs.includes("detail") && (!d || lacks) && !state.pending.detail && refused.detail !== headKey(state))
    fetchDetail(ctx);
}

/**
 * The server now serves another model: every answer was the old model's; load the new one's description and
 * ask again.
 */
async function modelChanged(ctx, refreshNow) {
  const state = ctx.app.state;
  Object.assign(state, { grid: null, detail: null });
  showError(state, null);
  // the views' and the cards' own answers (each one's `answers`, views.js)
  for (const field of [...VIEWS, ...(ctx.app.els.cards ?? [])].flatMap((p) => p.answers ?? [])) state[field] = null;
  ctx.askedKey = null;
  ctx.modelReady = loadModel(ctx.app);
  await ctx.modelReady;
  loadRoles(ctx.app);
  refreshNow();
}

/** The own questions (`need`, answers.js) of the open view and of the cards. */
const ownQuestions = ({ state, els }) =>
  [viewById(state.view), ...(els.cards ?? [])].flatMap((p) => p.need?.(state) ?? []);

/**
 * The page's requests over `app` ({state, els, update}). Returns the functions the rest of the
 * page calls: fetchGrid, fetchDetail, fetchPredictions, scheduleRefresh, refreshNow, ensureData, askNeeded,
 * forgetAsked, loadModel, loadRoles, and `busy()` (whether anything is on its way).
 */
export function createData(app) {
  const { state } = app;
  const ctx = dataContext(app);
  const typing = typingScheduler(ctx);
  return {
    modelChanged: () => modelChanged(ctx, typing.refreshNow),
    fetchGrid: () => fetchGrid(ctx),
    fetchDetail: () => fetchDetail(ctx),
    fetchPredictions: () => fetchPredictions(ctx),
    scheduleRefresh: typing.scheduleRefresh,
    refreshNow: typing.refreshNow,
    ensureData: () => ensureData(ctx),
    /** The data step before each render: the open view's and the cards' own questions (their `need`). */
    askNeeded: () => state.model && askAll(app, ownQuestions(app)),
    fitToModel: () => fitToModel(state),
    /** A link asks afresh: Enter and the next refresh ask again even for the same intent. */
    forgetAsked: () => (ctx.askedKey = null),
    /** Start loading the model and the head roles (the chosen head's request waits for the model). */
    start() {
      // the model's stacks (subject.js `stackOf`) and a hybrid's layers (its grid's) are known: ask what changed
      ctx.modelReady = loadModel(app).then(typing.refreshNow);
      loadRoles(app);
    },
    /** Whether a request is planned or on its way. */
    busy: () => typing.waiting() || state.pending.grid || state.pending.detail,
  };
}
