// The render pass: one function of the state draws the page (and the notebook widget, whose
// elements are a subset): the model badge, the pickers and switches, the tabs, the banners,
// the status, the tokens, the predictions, the visible view (from the registry, views.js) and
// the cards (`els.cards`: head effects, switched-off heads, generation). Only what changed
// is touched (dom.js).

import { divisorShort, divisorWords, num, softcapWords } from "./draw/captions.js";
import { blankSubject, stackOf } from "./subject.js";
import { fillIndexSelect, setAttr, setHidden, setText } from "./dom.js";
import { renderPredictions } from "./draw/predictions.js";
import { currentDetail, currentGrid } from "./state.js";
import { attentionLayers } from "./stacks.js";
import { renderTokens } from "./draw/tokenstrip.js";
import { headsNoun } from "./draw/quirks.js";
import { VIEWS, viewById } from "./views.js";
import { drawTextOnly } from "./textonly.js";
import { stackModel } from "./stacks.js";

/** The badge's words on an architecture other than a decoder's. */
const ARCHITECTURE_WORDS = {
  encoder: "encoder: every token sees every other, guesses at each",
  "encoder-decoder": "encoder–decoder: the text is the source, the decoder writes a target",
};
const SPEECH_WORDS = "speech: the recording's frames are the source, the decoder writes its transcript";

/** The model's own divisor (GET /api/model) as the layer-like object captions.js reads. */
const modelDivisor = (m) => ({ divisor: m.divisor, divisor_rule: m.divisor_rule, softcap: m.softcap });

/** " (2 with softmax attention)" for a hybrid, "" where every layer attends. */
const hybridWords = (m) =>
  m.attention_layers && m.attention_layers.length < m.n_layer
    ? ` (${m.attention_layers.length} with softmax attention)`
    : "";

/**
 * Where the layers sit when `devices` (GET /api/model, per layer) names more than one place, as runs of
 * consecutive layers: "layers 0–11 cuda:0 · 12–23 cpu · 24–31 disk"; null when every layer is in one place.
 */
export function layerPlaces(devices) {
  const layers = Object.keys(devices ?? {})
    .map(Number)
    .sort((a, b) => a - b);
  if (new Set(layers.map((l) => devices[l])).size < 2) return null;
  const runs = [];
  for (const l of layers) {
    const last = runs.at(-1);
    if (last && last.place === devices[l] && last.to === l - 1) last.to = l;
    else runs.push({ from: l, to: l, place: devices[l] });
  }
  return `layers ${runs.map((r) => `${r.from === r.to ? r.from : `${r.from}–${r.to}`} ${r.place}`).join(" · ")}`;
}

/** The model badge: name, size, shape, divisor, window, context, device (each layer's, when they are spread). */
function renderModel(state, els) {
  const m = state.model;
  if (!m) return;
  const params = m.parameters >= 1e6 ? `${(m.parameters / 1e6).toFixed(2)} M` : `${Math.round(m.parameters / 1e3)} k`;
  const sig = JSON.stringify([m.name, m.parameters, m.device, m.devices, m.dtype, m.family, m.architecture]);
  if (els.modelBadge.dataset.signature === sig) return;
  els.modelBadge.dataset.signature = sig;
  els.modelBadge.replaceChildren();
  const gqa = m.n_kv_head && m.n_kv_head < m.n_head ? ` (${m.n_kv_head} key/value heads, shared)` : "";
  const divisor = `scores ÷ ${divisorWords(modelDivisor(m), m.head_dim)}`;
  const windows = (m.sliding_window ?? []).filter((w) => w !== null);
  const window = windows.length
    ? `sliding window ${[...new Set(windows)].join(", ")} ` +
      `tokens${windows.length < m.n_layer ? ` in ${windows.length} of ${m.n_layer} layers` : ""}`
    : null;
  const parts = [
    ["name", m.name],
    ["family", m.family && m.family !== "attnscope" ? m.family : null],
    ["architecture", m.audio ? SPEECH_WORDS : (ARCHITECTURE_WORDS[m.architecture] ?? null)],
    ["size", `${params} parameters`],
    ["format", m.source_format === "gguf" ? `GGUF ${m.quantization ?? ""}`.trim() : null], // e.g. "GGUF Q4_K_M"
    [
      "shape",
      `${m.n_layer} layers${hybridWords(m)} × ${m.n_head} ` +
        `${headsNoun(m)}${gqa} · d_k ` +
        `${m.head_dim}${m.v_head_dim && m.v_head_dim !== m.head_dim ? `, d_v ${m.v_head_dim}` : ""}`,
    ],
    ["divisor", m.softcap ? `${divisor}, softcap ${softcapWords(m.softcap)}` : divisor],
    ["window", window],
    ["context", `context ${m.block_size}${m.positions ? ` · ${m.positions} positions` : ""}`],
    ["device", [layerPlaces(m.devices) ?? m.device, m.dtype !== "float32" && m.dtype].filter(Boolean).join(" · ")],
  ];
  // the scaling switch names the model's own divisor (the page's label writes √d_k with a subscript)
  const name = divisorShort(modelDivisor(m));
  if (name !== "√d_k") els.scaleLabel.textContent = `Scale by ${name}`;
  els.scaleSwitch.title = `Off: scores are not divided by ${divisorWords(modelDivisor(m), m.head_dim)} (what-if)`;
  for (const [cls, text] of parts) {
    if (!text) continue;
    const span = document.createElement("span");
    span.className = `badge-${cls}`;
    span.textContent = text;
    els.modelBadge.append(span);
  }
  els.modelBadge.title = `checkpoint: ${m.checkpoint ?? "?"}`;
}

/** The head pickers and the switches, as the state has them. */
function renderControls(state, els) {
  const m = stackModel(state); // an encoder–decoder's chosen stack: its own layers and heads
  const nHead = m?.n_head ?? 4;
  fillIndexSelect(els.layerSelect, attentionLayers(m), "Layer", state.layer);
  fillIndexSelect(els.headSelect, nHead, "Head", state.head);
  if (els.causalToggle.checked !== state.causal) els.causalToggle.checked = state.causal;
  // no causal mask to switch off (an encoder, an encoder–decoder's encoder or cross stack): the switch stands aside
  const unmasked = m?.architecture === "encoder" || ["encoder", "cross"].includes(stackOf(state));
  if (els.causalToggle.disabled !== unmasked) els.causalToggle.disabled = unmasked;
  if (els.scaleToggle.checked !== state.scaled) els.scaleToggle.checked = state.scaled;
  if (els.aggregateToggle.checked !== state.aggregate) els.aggregateToggle.checked = state.aggregate;
  if (!els.temperature) return; // the widget has no temperature slider
  if (Number(els.temperature.value) !== state.temperature) els.temperature.value = String(state.temperature);
  setText(els.temperatureValue, state.temperature.toFixed(2));
}

/** The tab of the current view selected, its panel shown, the others hidden. */
function renderTabs(state, els) {
  if (!els.tabs) return; // the widget shows the head view alone
  for (const view of VIEWS) {
    const tab = els.tabs[view.id];
    const panel = els.panels[view.id];
    const on = view.id === state.view;
    setAttr(tab, "aria-selected", on ? "true" : "false");
    if (tab.tabIndex !== (on ? 0 : -1)) tab.tabIndex = on ? 0 : -1;
    setHidden(panel, !on);
  }
  const title = `attnscope · ${viewById(state.view).label}`;
  if (document.title !== title) document.title = title;
}

/** The error, and the what-if notes while a switch is off. */
function renderBanners(state, els) {
  setText(els.errorText, state.error ?? "");
  if (els.errorBanner.hidden !== !state.error) els.errorBanner.hidden = !state.error;
  // a text over the context: the server says where the part that fits ends, the page offers it
  const fits = state.refusal?.type === "too_many_tokens" ? state.refusal.ctx.fits_chars : undefined;
  setHidden(els.errorFit, fits === undefined);
  if (fits !== undefined && els.errorFit) setText(els.errorFit, `Show what fits: the first ${state.refusal.ctx.limit}`);
  const notes = [];
  const m = state.model;
  if (!state.causal && m?.architecture !== "encoder") {
    const windowed = (m?.sliding_window ?? []).some((w) => w !== null);
    notes.push(
      `Causal mask removed: every token also sees the tokens after ` +
        `it${windowed ? ", and every earlier one (no sliding window)" : ""}, like an encoder. ` +
        "The model was trained with the mask, so these patterns and predictions are not what it computes.",
    );
  }
  if (!state.scaled) {
    const by = m ? divisorWords(modelDivisor(m), m.head_dim) : "the model's divisor";
    const times = m ? `${num(m.divisor)} times` : "that many times";
    notes.push(
      `Scaling removed: scores are not divided by ${by} before softmax. The model was trained with the ` +
        `scaling, so the softmax sees scores ${times} too large${m?.softcap ? " (before its softcap)" : ""} and ` +
        `turns peaky.`,
    );
  }
  // a view whose numbers the what-ifs do not change says so instead (the head roles)
  const instead = viewById(state.view).whatIfNote;
  const shown = instead && notes.length ? [instead] : notes;
  setHidden(els.whatifBanner, shown.length === 0);
  const sig = shown.join("|");
  if (els.whatifText.dataset.signature !== sig) {
    els.whatifText.dataset.signature = sig;
    els.whatifText.replaceChildren(
      ...shown.map((n) => {
        const p = document.createElement("p");
        p.textContent = n;
        return p;
      }),
    );
  }
  document.body.classList.toggle("what-if", shown.length > 0 && shown === notes);
}

/** The busy spinner, the server's time, and the dimming of views an answer no longer matches. */
function renderStatus(state, els) {
  const busy = state.pending.grid || state.pending.detail;
  els.status.classList.toggle("busy", busy);
  const grid = currentGrid(state);
  // the widget's answers come from the kernel, without a server time
  if (busy) setText(els.statusText, "updating…");
  else if (grid && grid.timing_ms !== undefined) setText(els.statusText, `server ${Math.round(grid.timing_ms)} ms`);
  else setText(els.statusText, "");
  // dim what no longer matches the text while a new answer is on its way or failed
  els.views?.classList.toggle("stale", !grid && !!state.grid);
}

/** The page's notes around the views: the calm notice of a link, the empty state of an empty box. */
function renderNotices(state, els) {
  if (els.linkNotice) {
    setText(els.linkNoticeText, state.notice ?? "");
    setHidden(els.linkNotice, !state.notice);
  }
  setHidden(els.emptyState, !blankSubject(state));
}

/**
 * Draw everything the state calls for. Returns what was drawn from current data: `{view, text,
 * tokens, detail}` and the view's own answer (the head view: `head`, `grid`; another: its id).
 */
export function render(state, els) {
  renderNotices(state, els);
  renderModel(state, els);
  renderControls(state, els);
  renderTabs(state, els);
  renderBanners(state, els);
  renderStatus(state, els);
  renderTokens(state, els);
  renderPredictions(state, els);
  const view = viewById(state.view);
  const done = { view: state.view, text: state.text, head: false, grid: false, detail: !!currentDetail(state) };
  const drawn = view.draw(state, els); // from the answers in hand: the data step asked (data.js askNeeded)
  if (typeof drawn === "object") Object.assign(done, drawn);
  else done[view.id] = drawn;
  drawTextOnly(state, els, view); // a view whose route takes no image says it runs on the text alone
  // after the view: the toggles of the switched-off heads sit on the grid it painted
  for (const part of els.cards ?? []) part.draw(state);
  const tokens = currentGrid(state)?.tokens ?? currentDetail(state)?.tokens;
  done.tokens = tokens ? tokens.length : 0;
  return done;
}

/**
 * `render`, except that a drawing bug does not blank the page: the error banner says what failed
 * and what is on screen stays. The answer then has `failed` and `error` (the words shown).
 */
export function renderSafely(state, els) {
  try {
    return render(state, els);
  } catch (err) {
    const error = `Could not draw this view: ${err && err.message ? err.message : err}`;
    console.error("attnscope:", err);
    els.errorText.textContent = error;
    els.errorBanner.hidden = false;
    return { view: state.view, text: state.text, failed: true, error };
  }
}

/**
 * After a view becomes visible, let its Plotly plots take their container's size (a canvas plot watches its own).
 * Only the plots on show: a drawn plot hidden since (the why box's under a new text) would make Plotly reject.
 */
export function resizeView(els, view) {
  if (!window.Plotly) return;
  for (const el of els.panels[view].querySelectorAll(".js-plotly-plot.drawn"))
    if (el.getClientRects().length) window.Plotly.Plots.resize(el);
}
