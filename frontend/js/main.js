// Wiring: DOM events and API answers change the state, then one render step redraws.

import { errorText, getJSON, isBlank, latestOnly, postJSON, refusalOf } from "./api.js";
import { headCsv } from "./figures.js";
import { cellAt, gridTooltip } from "./gridcanvas.js";
import {
  EXAMPLES,
  VIEWS,
  createState,
  currentDetail,
  currentGrid,
  detailRequest,
  exportRequest,
  exportTitle,
  fitHead,
  gridKey,
  gridRequest,
  headKey,
  parseHash,
  predictionsRequest,
  toHash,
} from "./state.js";
import { render, resizeView } from "./views.js";
import { installAblation } from "./ablation.js";
import { installEffects } from "./effects.js";
import { installGenerate } from "./generate.js";
import { regionFits, regionKey, visibleBlock } from "./pooled.js";
import { FOCUS_MAX, regionRequest } from "./state.js";

const state = createState();
Object.assign(state, parseHash(window.location.hash));

const $ = (id) => document.getElementById(id);
const els = {
  modelBadge: $("model-badge"),
  textInput: $("text-input"),
  examples: $("examples"),
  tokens: $("tokens"),
  emptyState: $("empty-state"),
  tokenCount: $("token-count"),
  status: $("status"),
  statusText: $("status-text"),
  layerSelect: $("layer-select"),
  headSelect: $("head-select"),
  causalToggle: $("causal-toggle"),
  scaleToggle: $("scale-toggle"),
  aggregateToggle: $("aggregate-toggle"),
  temperature: $("temperature"),
  temperatureValue: $("temperature-value"),
  roleSelect: $("role-select"),
  errorBanner: $("error-banner"),
  errorText: $("error-text"),
  errorClose: $("error-close"),
  linkNotice: $("link-notice"),
  linkNoticeText: $("link-notice-text"),
  linkNoticeClose: $("link-notice-close"),
  whatifBanner: $("whatif-banner"),
  whatifText: $("whatif-text"),
  views: $("views"),
  headTitle: $("head-title"),
  headHeatmap: $("head-heatmap"),
  headsGrid: $("heads-grid"),
  gridCanvas: $("heads-grid-canvas"),
  gridTip: $("grid-tip"),
  gridCaption: $("grid-caption"),
  gridPng: $("grid-png"),
  predictions: $("predictions"),
  predictionsTitle: $("predictions-title"),
  predictionsList: $("predictions-list"),
  predictionsActual: $("predictions-actual"),
  compareScaled: $("compare-scaled"),
  compareUnscaled: $("compare-unscaled"),
  compareEntropy: $("compare-entropy"),
  statsTable: $("stats-table"),
  statsCaption: $("stats-caption"),
  maskSteps: $("mask-steps"),
  rowSums: $("row-sums"),
  pipelineDivisor: $("pipeline-divisor"),
  varianceHist: $("variance-hist"),
  varianceSummary: $("variance-summary"),
  headRoles: $("head-roles"),
  roleInfo: $("role-info"),
  roleBest: $("role-best"),
  downloadCsv: $("download-csv"),
  downloadJson: $("download-json"),
  copyLink: $("copy-link"),
  toast: $("toast"),
  tabs: Object.fromEntries(VIEWS.map((v) => [v, $(`tab-${v}`)])),
  panels: Object.fromEntries(VIEWS.map((v) => [v, $(`view-${v}`)])),
};

// ---------------------------------------------------------------- render + URL

/** The page's own parts around the views: the calm notice and the empty state of an empty box. */
function renderPage() {
  if (els.linkNoticeText.textContent !== (state.notice ?? "")) els.linkNoticeText.textContent = state.notice ?? "";
  if (els.linkNotice.hidden !== !state.notice) els.linkNotice.hidden = !state.notice;
  const empty = isBlank(state.text);
  if (els.emptyState.hidden !== !empty) els.emptyState.hidden = !empty;
}

let renderCount = 0;
function update() {
  let done;
  try {
    renderPage();
    done = render(state, els);
  } catch (err) {
    // a drawing bug must not blank the page: say what failed and keep what is on screen
    state.error = `Could not draw this view: ${err && err.message ? err.message : err}`;
    els.errorText.textContent = state.error;
    els.errorBanner.hidden = false;
    done = { view: state.view, text: state.text, failed: true };
  }
  renderCount += 1;
  // the CSV is every (query, key) pair: not from a long text's max-pooled cells
  const pooledHead = (currentDetail(state)?.focus?.thumbnail?.block ?? 1) > 1;
  els.downloadCsv.disabled = !currentDetail(state) || pooledHead;
  els.downloadJson.disabled = !currentGrid(state);
  els.downloadJson.title = exportTitle(state);
  scheduleHash();
  performance.mark("attnscope:render");
  document.dispatchEvent(new CustomEvent("attnscope:render", { detail: { ...done, count: renderCount } }));
}

let hashTimer = null;
function scheduleHash() {
  clearTimeout(hashTimer);
  hashTimer = setTimeout(() => {
    const hash = toHash(state);
    if (window.location.hash !== hash) window.history.replaceState(null, "", hash);
  }, 250);
}

// ---------------------------------------------------------------- requests

const sendGrid = latestOnly("/api/attention");
const sendDetail = latestOnly("/api/attention");
const DEBOUNCE_MS = 60;

/** Time a finished step as a performance measure (the benchmark reads these). */
function measure(name, start) {
  performance.measure(`attnscope:${name}`, { start, end: performance.now() });
}

/** Record how the last `kind` request ended (err null = it succeeded) and show the error left, if any. */
function requestDone(kind, err) {
  if (err) askedKey = null; // asked, not answered: Enter asks again
  state.requestErrors[kind] = err ? errorText(err) : null;
  state.error = state.requestErrors.detail ?? state.requestErrors.grid;
  // the refusal's numbers feed the token counter, so it says what the message says
  if (err) state.refusal = refusalOf(err.detail);
  else if (!state.error) state.refusal = null;
}

async function fetchGrid() {
  if (isBlank(state.text)) return; // an empty box asks nothing (see refreshAll)
  const key = gridKey(state);
  state.pending.grid = true;
  update();
  const started = performance.now();
  try {
    const result = await sendGrid(gridRequest(state));
    if (result.stale) return;
    measure("grid-request", started);
    state.grid = { key, response: result.value };
    requestDone("grid", null);
  } catch (err) {
    requestDone("grid", err);
  }
  state.pending.grid = false;
  const drawStart = performance.now();
  update();
  measure("render", drawStart);
}

/**
 * Cells a side the head heatmap can draw: its plot area's width in CSS pixels (about the
 * element's width less the token labels and the colour bar), at most FOCUS_MAX. A longer text's
 * head is asked max-pooled to this size (state.js, pooledFocus).
 */
function measureDrawCells() {
  const width = els.headHeatmap.clientWidth;
  if (width > 0) state.drawCells = Math.max(64, Math.min(FOCUS_MAX, Math.round(width - 160)));
}

/** Fetch the chosen head's detail (every field, predictions at the chosen temperature). */
async function fetchDetail() {
  if (isBlank(state.text)) return;
  if (!state.model) {
    // a link may name a head the model lacks: wait for the model, which clamps it (fitToModel)
    state.pending.detail = true;
    await modelReady;
  }
  measureDrawCells();
  const key = headKey(state);
  const textKey = gridKey(state);
  const temperature = state.temperature;
  state.pending.detail = true;
  const started = performance.now();
  try {
    const result = await sendDetail(detailRequest(state));
    if (result.stale) return;
    measure("detail-request", started);
    state.detail = { key, textKey, temperature, response: result.value };
    requestDone("detail", null);
  } catch (err) {
    requestDone("detail", err);
  }
  state.pending.detail = false;
  update();
  // zoomed in on a long text's head: the exact cells of the same block, for this text and head
  if (state.zoom && state.detail?.key === key && state.detail.response.focus?.thumbnail?.block > 1) fetchRegion();
}

// ---------------------------------------------------------------- zoom: exact cells of a block

const sendRegion = latestOnly("/api/attention");

/** Fetch the exact cells of the zoomed block of a pooled head (focus.region), when it fits. */
async function fetchRegion() {
  const zoom = state.zoom;
  if (!regionFits(zoom) || isBlank(state.text)) return;
  const T = currentDetail(state)?.tokens?.length ?? currentGrid(state)?.tokens?.length;
  if (T !== undefined && (zoom.q1 > T || zoom.k1 > T)) {
    state.zoom = null; // the text got shorter than the zoomed block
    update();
    return;
  }
  const key = regionKey(state, zoom);
  if (state.region?.key === key) return;
  try {
    const result = await sendRegion(regionRequest(state, zoom));
    if (result.stale) return;
    state.region = { key, bounds: zoom, response: result.value.focus.region };
  } catch (err) {
    state.requestErrors.detail = `Exact cells of the zoomed block: ${errorText(err)}`;
    state.error = state.requestErrors.detail;
  }
  update();
}

/**
 * Zoom on a long text's head heatmap: drag a box (the page zooms, not Plotly, whose zoom would
 * first paint the whole head at the zoomed size), double-click for the whole head again.
 */
let zoomTimer = null;
let dragged = false;
function setZoom(zoom) {
  if (JSON.stringify(zoom) === JSON.stringify(state.zoom)) return;
  state.zoom = zoom;
  update();
  clearTimeout(zoomTimer);
  zoomTimer = setTimeout(fetchRegion, 120);
}

function pooledAxes() {
  const gd = els.headHeatmap;
  const meta = gd.layout?.meta;
  const xa = gd._fullLayout?.xaxis;
  const ya = gd._fullLayout?.yaxis;
  return meta?.block > 1 && xa && ya ? { gd, meta, xa, ya } : null;
}

{
  const box = document.createElement("div");
  box.className = "zoom-box";
  box.hidden = true;
  document.body.append(box);
  let start = null;
  els.headHeatmap.addEventListener("mousedown", (ev) => {
    const axes = pooledAxes();
    if (!axes || ev.button !== 0) return;
    const r = axes.gd.getBoundingClientRect();
    const x = ev.clientX - r.left - axes.xa._offset;
    const y = ev.clientY - r.top - axes.ya._offset;
    if (x < 0 || x > axes.xa._length || y < 0 || y > axes.ya._length) return;
    start = { ...axes, x0: ev.clientX, y0: ev.clientY, r };
    dragged = false;
    ev.preventDefault();
  });
  window.addEventListener("mousemove", (ev) => {
    if (!start) return;
    const { xa, ya, r } = start;
    // the box stays inside the plot area
    const cx = Math.min(r.left + xa._offset + xa._length, Math.max(r.left + xa._offset, ev.clientX));
    const cy = Math.min(r.top + ya._offset + ya._length, Math.max(r.top + ya._offset, ev.clientY));
    start.x1 = cx;
    start.y1 = cy;
    if (Math.abs(cx - start.x0) + Math.abs(cy - start.y0) < 6) return;
    Object.assign(box.style, {
      left: `${Math.min(cx, start.x0)}px`,
      top: `${Math.min(cy, start.y0)}px`,
      width: `${Math.abs(cx - start.x0)}px`,
      height: `${Math.abs(cy - start.y0)}px`,
    });
    box.hidden = false;
  });
  window.addEventListener("mouseup", () => {
    if (!start) return;
    const s0 = start;
    start = null;
    box.hidden = true;
    if (s0.x1 === undefined || Math.abs(s0.x1 - s0.x0) + Math.abs(s0.y1 - s0.y0) < 6) return;
    dragged = true; // the click that ends a drag chooses no row
    const { xa, ya, r, meta } = s0;
    const px = (cx) => xa.p2d(cx - r.left - xa._offset);
    const py = (cy) => ya.p2d(cy - r.top - ya._offset);
    setZoom(visibleBlock([px(s0.x0), px(s0.x1)], [py(s0.y0), py(s0.y1)], meta.tokens));
  });
  els.headHeatmap.addEventListener("dblclick", () => {
    if (pooledAxes()) setZoom(null);
  });
}

/**
 * Ask for the current text: the chosen head's detail (every view needs it) and the all-heads
 * grid, both at once. The server answers them on separate workers, and each view is drawn as
 * soon as its answer lands, so the grid's round trip overlaps the head view's drawing.
 */
async function refreshAll() {
  if (isBlank(state.text)) {
    // an empty box is not an error: the empty state says what to do, nothing is asked, and
    // an error of an earlier text goes with it
    state.requestErrors = { grid: null, detail: null };
    state.error = null;
    state.refusal = null;
    update();
    return;
  }
  await Promise.all([fetchDetail(), fetchGrid()]);
}

// Typing, debounced on both edges: a keystroke after a pause goes out at once (no waiting),
// while a burst (key repeat, fast typing) is merged and sent DEBOUNCE_MS after its last key.
// While an answer is on its way, further edits only mark the text dirty; the newest text is
// sent as soon as that answer lands, so a slow server never has a queue of outdated requests.
let typingTimer = null;
let scheduled = false;
let chainRunning = false;
let dirty = false;
let lastKeyAt = -Infinity;
// What the user last asked for (text, what-ifs, head, temperature, view): Enter on a text
// already asked (a paste goes out on its input event) asks nothing again. Any failed request and
// any new link forget it, so that Enter retries.
let askedKey = null;
const intentKey = (s) => JSON.stringify([headKey(s), s.temperature, s.view]);

async function runChain() {
  chainRunning = true;
  dirty = false;
  askedKey = intentKey(state);
  try {
    await refreshAll();
  } finally {
    chainRunning = false;
    if (dirty) runChain();
  }
}

function kick() {
  scheduled = false;
  const answered = askedKey === intentKey(state) && currentGrid(state) && currentDetail(state) && !state.error;
  if (chainRunning) dirty = dirty || askedKey !== intentKey(state);
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

/** After a view change: fetch what that view needs if it is missing. */
function ensureData() {
  if (state.view === "head" && !currentGrid(state) && !state.pending.grid) fetchGrid();
  // a long text's head is asked with the fields of the view it was asked from: the compare view adds one
  const d = currentDetail(state);
  const lacks = state.view === "compare" && d?.focus?.thumbnail && !d.focus.pattern_unscaled;
  if (state.view !== "head" && (!d || lacks) && !state.pending.detail) fetchDetail();
}

/** Clamp the chosen head into the loaded model; a link that named more gets a calm note. */
function fitToModel() {
  if (!state.model) return;
  const fit = fitHead(state, state.model);
  state.layer = fit.layer;
  state.head = fit.head;
  if (fit.note) state.notice = fit.note;
}

async function loadModel() {
  for (let attempt = 0; ; attempt++) {
    try {
      state.model = await getJSON("/api/model");
      fitToModel();
      update();
      return;
    } catch (err) {
      if (attempt >= 60) {
        state.error = errorText(err);
        update();
        return;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

async function loadRoles() {
  try {
    state.roles = await getJSON("/api/heads");
    const picker = els.roleSelect;
    picker.replaceChildren(
      ...state.roles.roles.map((role) => {
        const o = document.createElement("option");
        o.value = role;
        o.textContent = role.replace("_", " ");
        return o;
      }),
    );
    if (!state.roles.roles.includes(state.role)) state.role = state.roles.roles[0];
    picker.value = state.role;
    update();
  } catch (err) {
    state.error = `Head roles: ${errorText(err)}`;
    update();
  }
}

// ---------------------------------------------------------------- selection

function selectHead(layer, head) {
  if (layer === state.layer && head === state.head) return;
  state.layer = layer;
  state.head = head;
  state.region = null; // the exact cells were the other head's
  state.notice = null; // the user chose a head: the note about the link's head is done
  update(); // draws at once from the grid's pattern
  fetchDetail(); // then the scores and the per-head views
}

function selectPosition(p) {
  state.position = p;
  update();
}

function setView(view) {
  if (!VIEWS.includes(view) || view === state.view) return;
  state.view = view;
  update();
  resizeView(els, view);
  ensureData();
}

// ---------------------------------------------------------------- export

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function toast(message) {
  els.toast.textContent = message;
  els.toast.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (els.toast.hidden = true), 2200);
}

els.downloadCsv.addEventListener("click", () => {
  const detail = currentDetail(state);
  if (!detail) return;
  const h = detail.layers[0].heads[0];
  const csv = headCsv({
    tokens: detail.tokens,
    mask: detail.mask,
    pattern: h.pattern,
    patternUnscaled: h.pattern_unscaled,
    raw: h.attn_scores_raw,
    scaled: h.attn_scores,
    layer: state.layer,
    head: state.head,
  });
  download(`attnscope-L${state.layer}H${state.head}.csv`, csv, "text/csv");
});

// the JSON export is what its title says (exportTitle): a plain-JSON answer for this text and
// these what-ifs, whole or at the page's level of detail for a long text, asked for on click
els.downloadJson.addEventListener("click", async () => {
  if (!currentGrid(state)) return;
  try {
    const answer = await postJSON("/api/attention", exportRequest(state));
    download("attnscope-attention.json", JSON.stringify(answer), "application/json");
  } catch (err) {
    toast(`Export failed: ${errorText(err)}`);
  }
});

els.copyLink.addEventListener("click", async () => {
  const url = window.location.href.split("#")[0] + toHash(state);
  window.history.replaceState(null, "", toHash(state));
  try {
    await navigator.clipboard.writeText(url);
    toast("Link copied: it reopens this text, head and view.");
  } catch {
    toast("The address bar now holds the link to this view.");
  }
});

// ---------------------------------------------------------------- events

/**
 * A new text lets go of a clicked token. After an edit the same position may hold another
 * token, and someone typing watches the guess for what comes after their last word: so any
 * change of the text goes back to the last token, rather than keeping a stale choice.
 */
function changeText(text) {
  if (text === state.text) return;
  state.text = text;
  state.position = null;
}

els.textInput.value = state.text;
els.textInput.addEventListener("input", () => {
  changeText(els.textInput.value);
  scheduleRefresh();
});
els.textInput.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    changeText(els.textInput.value);
    refreshNow();
  }
});

for (const ex of EXAMPLES) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "example";
  b.textContent = ex.label;
  b.title = ex.text;
  b.addEventListener("click", () => {
    els.textInput.value = ex.text;
    changeText(ex.text);
    refreshNow();
  });
  els.examples.append(b);
}

els.tokens.addEventListener("click", (ev) => {
  const chip = ev.target.closest(".chip");
  if (chip) selectPosition(Number(chip.dataset.index));
});

els.layerSelect.addEventListener("change", () => selectHead(Number(els.layerSelect.value), state.head));
els.headSelect.addEventListener("change", () => selectHead(state.layer, Number(els.headSelect.value)));

els.causalToggle.addEventListener("change", () => {
  state.causal = els.causalToggle.checked;
  refreshNow();
});
els.scaleToggle.addEventListener("change", () => {
  state.scaled = els.scaleToggle.checked;
  refreshNow();
});
els.aggregateToggle.addEventListener("change", () => {
  state.aggregate = els.aggregateToggle.checked;
  update();
});
els.roleSelect.addEventListener("change", () => {
  state.role = els.roleSelect.value;
  update();
});

// the temperature only changes the predictions: ask for those alone (no layer in the answer)
const sendPredictions = latestOnly("/api/attention");
let temperatureTimer = null;
async function fetchPredictions() {
  const detail = state.detail;
  if (!detail || detail.key !== headKey(state)) return fetchDetail();
  const temperature = state.temperature;
  try {
    const result = await sendPredictions(predictionsRequest(state));
    if (result.stale || state.detail !== detail) return;
    state.detail = { ...detail, temperature, response: { ...detail.response, predictions: result.value.predictions } };
    requestDone("detail", null);
  } catch (err) {
    requestDone("detail", err);
  }
  update();
}
els.temperature.addEventListener("input", () => {
  state.temperature = Number(els.temperature.value);
  els.temperatureValue.textContent = state.temperature.toFixed(2);
  clearTimeout(temperatureTimer);
  temperatureTimer = setTimeout(fetchPredictions, 80);
  update();
});

els.linkNoticeClose.addEventListener("click", () => {
  state.notice = null;
  update();
});

els.errorClose.addEventListener("click", () => {
  state.error = null;
  state.requestErrors = { grid: null, detail: null };
  update();
});

// tabs: click, and arrow keys between tabs as in the WAI-ARIA tabs pattern
for (const view of VIEWS) {
  els.tabs[view].addEventListener("click", () => setView(view));
  els.tabs[view].addEventListener("keydown", (ev) => {
    const i = VIEWS.indexOf(view);
    let next = null;
    if (ev.key === "ArrowRight") next = VIEWS[(i + 1) % VIEWS.length];
    else if (ev.key === "ArrowLeft") next = VIEWS[(i - 1 + VIEWS.length) % VIEWS.length];
    else if (ev.key === "Home") next = VIEWS[0];
    else if (ev.key === "End") next = VIEWS[VIEWS.length - 1];
    if (next) {
      ev.preventDefault();
      setView(next);
      els.tabs[next].focus();
    }
  });
}

// Plotly click events: a grid cell or a role cell selects a head; a heatmap row a position.
function onPlotClick(el, handler) {
  // `on` exists once Plotly has drawn into the element; attach lazily.
  const attach = () => {
    if (el.on && !el.dataset.clickBound) {
      el.on("plotly_click", (ev) => {
        const pt = ev?.points?.[0];
        if (pt) handler(pt, el);
      });
      el.dataset.clickBound = "1";
    }
  };
  document.addEventListener("attnscope:render", attach);
}

// the grid canvas: hover shows the cell, click opens the head, arrow keys move between heads
function gridHit(ev) {
  const g = els.headsGrid.gridLayout;
  if (!g) return null;
  const rect = els.gridCanvas.getBoundingClientRect();
  const { geom, size, nRows, nCols } = g.layout;
  const hit = cellAt(geom, size, nRows, nCols, ev.clientX - rect.left, ev.clientY - rect.top);
  return hit ? { ...hit, g } : null;
}
els.gridCanvas.addEventListener("mousemove", (ev) => {
  const hit = gridHit(ev);
  if (!hit) {
    els.gridTip.hidden = true;
    return;
  }
  els.gridTip.textContent = gridTooltip({ grid: hit.g.grid, hit, aggregate: hit.g.aggregate }).join("\n");
  els.gridTip.hidden = false;
  const box = els.headsGrid.getBoundingClientRect();
  const x = ev.clientX - box.left + 14;
  els.gridTip.style.left = `${Math.min(x, box.width - els.gridTip.offsetWidth - 4)}px`;
  els.gridTip.style.top = `${ev.clientY - box.top + 14}px`;
});
els.gridCanvas.addEventListener("mouseleave", () => (els.gridTip.hidden = true));
els.gridCanvas.addEventListener("click", (ev) => {
  const hit = gridHit(ev);
  if (!hit) return;
  const head = hit.g.layout.cols[hit.col];
  if (head >= 0) selectHead(hit.g.grid.layers[hit.row].layer, head);
});
els.gridCanvas.addEventListener("keydown", (ev) => {
  const nHead = state.model?.n_head ?? 4;
  const nLayer = state.model?.n_layer ?? 4;
  const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
  const m = moves[ev.key];
  if (!m) return;
  ev.preventDefault();
  selectHead(Math.min(nLayer - 1, Math.max(0, state.layer + m[0])), Math.min(nHead - 1, Math.max(0, state.head + m[1])));
});
els.gridPng.addEventListener("click", () => {
  els.gridCanvas.toBlob((blob) => {
    if (!blob) return;
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = "attnscope-all-heads.png";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }, "image/png");
});
onPlotClick(els.headHeatmap, (pt) => {
  if (Number.isInteger(pt.y)) selectPosition(pt.y);
});
// a click anywhere on a row chooses it, the hatched (masked) cells too, which Plotly leaves
// without click events: the row comes from the y axis under the pointer
els.headHeatmap.addEventListener("click", (ev) => {
  if (dragged) {
    dragged = false;
    return;
  }
  const ya = els.headHeatmap._fullLayout?.yaxis;
  const xa = els.headHeatmap._fullLayout?.xaxis;
  // a long text's heatmap has fewer cells than tokens; its axes count tokens (layout.meta)
  const n = els.headHeatmap.layout?.meta?.tokens ?? els.headHeatmap.data?.[0]?.z?.length ?? 0;
  if (!ya || !xa || !n) return;
  const box = els.headHeatmap.getBoundingClientRect();
  const x = ev.clientX - box.left - xa._offset;
  const y = ev.clientY - box.top - ya._offset;
  if (x < 0 || x > xa._length || y < 0 || y > ya._length) return;
  const row = Math.round(ya.p2d(y));
  if (Number.isInteger(row) && row >= 0 && row < n) selectPosition(row);
});
// a role cell opens that head in the head view (axis labels are "L2" and "H1", or indices)
const indexOf = (v) => (typeof v === "number" ? v : Number.parseInt(String(v).replace(/\D/g, ""), 10));
onPlotClick(els.headRoles, (pt) => {
  const layer = indexOf(pt.y);
  const head = indexOf(pt.x);
  if (!Number.isInteger(layer) || !Number.isInteger(head)) return;
  selectHead(layer, head);
  setView("head");
});

window.addEventListener("hashchange", () => {
  const next = parseHash(window.location.hash);
  if (toHash({ ...state, ...next }) === toHash(state)) return;
  Object.assign(state, next);
  fitToModel();
  els.textInput.value = state.text;
  askedKey = null; // a link asks afresh
  update();
  refreshNow();
});

// keyboard: "[" and "]" step through heads when focus is not in a text field
document.addEventListener("keydown", (ev) => {
  if (ev.target.closest("textarea, input, select") || ev.altKey || ev.ctrlKey || ev.metaKey) return;
  const nHead = state.model?.n_head ?? 4;
  const nLayer = state.model?.n_layer ?? 4;
  const flat = state.layer * nHead + state.head;
  if (ev.key === "]" || ev.key === "[") {
    const next = (flat + (ev.key === "]" ? 1 : -1) + nHead * nLayer) % (nHead * nLayer);
    selectHead(Math.floor(next / nHead), next % nHead);
  }
});

// switching heads off, head effects, generation (issue 18): their own modules, over these hooks
const whatIfs = { state, els, update, refreshNow, selectHead, changeText };
installAblation(whatIfs);
installEffects(whatIfs);
installGenerate(whatIfs);

// A read-only handle for tests and the benchmark.
window.attnscope = {
  get state() {
    return state;
  },
  get renders() {
    return renderCount;
  },
  /** True when nothing is pending and the current text's answers (or an error) are shown. */
  get settled() {
    if (scheduled || chainRunning || state.pending.grid || state.pending.detail) return false;
    if (isBlank(state.text)) return true; // the empty state: nothing to ask
    return state.error !== null || (!!currentGrid(state) && !!currentDetail(state));
  },
};

if (!window.Plotly) {
  state.error = "The charting library did not load from /vendor/plotly.min.js: is the plotly package installed on the server?";
}
update();
const modelReady = loadModel();
loadRoles();
refreshNow();
