// The notebook widget (attnscope.show): the page's head view inside a notebook output.
//
// Drawing is the page's own: the widget holds the page's state object (state.js) and its
// render pass (render.js) draws the head view (view_head.js: the chosen head and the all-heads
// grid), the tokens, the predictions and the what-if notes into the widget's elements, a subset
// of the page's; the grid's pointer is the page's too (head/grid.js). This module only builds
// the widget's DOM (classes, never ids: several widgets share a page) and wires it to the
// anywidget model instead of fetch: the kernel computes the API's answers and puts them in
// the traitlets `grid` and `detail` as {"text", "causal", "scale", ["layer", "head"], "answer"}.

import { installSeq2seq } from "./cards/seq2seq.js";
import { changeText } from "./controls.js";
import { inputsFor } from "./measured.js";
import { renderSafely } from "./render.js";
import { createState, gridKey, headKey } from "./state.js";
import { subjectKey } from "./subject.js";
import { installGridPointer } from "./head/grid.js";
import { VIEWS } from "./views.js";
import { decodeResponse } from "./wire.js";

const TEMPLATE = `
  <div class="aw-bar">
    <div class="model-badge" data-testid="model-info"></div>
    <span class="status" aria-live="polite"
      ><span class="spinner" aria-hidden="true"></span><span class="status-text"></span></span>
  </div>
  <label class="aw-label">Text <span class="aw-help">updates as you type · Enter runs now</span>
    <textarea class="aw-text" rows="2" spellcheck="false" autocomplete="off" data-testid="text-input"></textarea>
  </label>
  <div class="aw-seq2seq">
    <div class="stack-field" data-testid="stack-picker" hidden></div>
    <div class="target-field" data-testid="target-field" hidden></div>
  </div>
  <div class="aw-tokens-head"><span class="aw-caption">Tokens</span> <span class="token-count"></span>
    <span class="aw-help">click one for its next-token predictions</span></div>
  <div class="tokens" data-testid="tokens" role="group" aria-label="Tokens of the text"></div>
  <div class="aw-controls">
    <label>Layer <select class="layer-select"></select></label>
    <label>Head <select class="head-select"></select></label>
    <label title="Off: every token also sees the tokens after it (what-if)"
      ><input type="checkbox" class="causal-toggle" /> Causal mask</label>
    <label title="Off: scores are not divided by the model's divisor (what-if)"
      ><input type="checkbox" class="scale-toggle" /> <span class="scale-label">Scale by √d_k</span></label>
    <label title="A last column with the mean over each layer's heads"
      ><input type="checkbox" class="aggregate-toggle" /> Mean column</label>
  </div>
  <div class="notice notice-error" data-testid="error-banner" role="alert" hidden><p class="error-text"></p></div>
  <div class="notice notice-warn" data-testid="whatif-banner" role="status" hidden><div class="whatif-text"></div></div>
  <div class="aw-views">
    <section class="aw-head">
      <h3 class="head-title"></h3>
      <div class="plot aw-heatmap" data-testid="head-heatmap"></div>
    </section>
    <section class="aw-side">
      <h3>All heads <span class="aw-help">hover a cell · click to open the head</span></h3>
      <div class="layer-ribbon" data-testid="layer-ribbon" hidden></div>
      <div class="heads-grid" data-testid="heads-grid">
        <canvas class="heads-grid-canvas" tabindex="0" aria-label="Every layer and head as a thumbnail"></canvas>
        <div class="grid-tip" role="tooltip" hidden></div>
      </div>
      <p class="grid-caption aw-help"></p>
      <div class="predictions" data-testid="predictions">
        <h3 class="predictions-title"></h3>
        <ol class="predictions-list"></ol>
        <p class="predictions-actual aw-help"></p>
      </div>
    </section>
  </div>`;

const DEBOUNCE_MS = 120;

/** An answer trait ("" or tagged JSON) -> {tag, response} with the response decoded, or null. */
function answerOf(json) {
  if (!json) return null;
  const tag = JSON.parse(json);
  const response = decodeResponse(tag.answer);
  delete tag.answer;
  return { tag, response };
}

/** The widget's elements, found by class in `el`: the names the page's render pass draws into. */
function widgetElements(el) {
  const q = (cls) => el.querySelector(`.${cls}`);
  return {
    modelBadge: q("model-badge"),
    status: q("status"),
    statusText: q("status-text"),
    textInput: q("aw-text"),
    tokens: q("tokens"),
    tokenCount: q("token-count"),
    layerSelect: q("layer-select"),
    headSelect: q("head-select"),
    causalToggle: q("causal-toggle"),
    scaleToggle: q("scale-toggle"),
    scaleLabel: q("scale-label"),
    scaleSwitch: q("scale-toggle").closest("label"),
    aggregateToggle: q("aggregate-toggle"),
    errorBanner: q("notice-error"),
    errorText: q("error-text"),
    whatifBanner: q("notice-warn"),
    whatifText: q("whatif-text"),
    headTitle: q("head-title"),
    headHeatmap: q("aw-heatmap"),
    headsGrid: q("heads-grid"),
    gridCanvas: q("heads-grid-canvas"),
    gridTip: q("grid-tip"),
    gridCaption: q("grid-caption"),
    layerRibbon: q("layer-ribbon"),
    predictions: q("predictions"),
    predictionsTitle: q("predictions-title"),
    predictionsList: q("predictions-list"),
    predictionsActual: q("predictions-actual"),
  };
}

/** Copy the model's inputs (text, head, what-ifs) and its error into the state. */
function syncState(state, model) {
  state.text = model.get("text");
  state.layer = model.get("layer");
  state.head = model.get("head");
  state.causal = model.get("causal");
  state.scaled = model.get("scaled");
  state.stack = model.get("stack") || null;
  state.target = model.get("target");
  state.error = model.get("error") || null;
}

// an answer's key is the page's own (state.js gridKey, headKey) of the state it answers
const keyState = (state, t) => ({
  ...state,
  text: t.text,
  causal: t.causal,
  scaled: t.scale !== "none",
  stack: t.stack || null,
  target: t.target ?? "",
  layer: t.layer,
  head: t.head,
});

/** Store the kernel's answers (the traitlets `grid` and `detail`) in the state, keyed as the page keys them. */
function readAnswers(state, model) {
  const grid = answerOf(model.get("grid"));
  const gridAsked = grid && keyState(state, grid.tag);
  state.grid = grid && {
    key: gridKey(gridAsked),
    text: gridAsked.text,
    prompt: subjectKey(gridAsked, false),
    response: grid.response,
  };
  const detail = answerOf(model.get("detail"));
  const asked = detail && keyState(state, detail.tag);
  state.detail = detail && {
    key: headKey(asked),
    text: asked.text,
    prompt: subjectKey(asked, false),
    textKey: gridKey(asked),
    temperature: state.temperature,
    inputs: inputsFor(asked, ["text", "ablate", "causal", "scaled"]),
    response: detail.response,
  };
}

/**
 * The widget's draw: the page's render pass over its elements, announced as an `attnscope:render`
 * event, with a read-only handle for tests on `el.attnscope` (as the page's window.attnscope). Returns update().
 */
function widgetUpdate({ model, el, els, state }) {
  let renders = 0;
  let last = null;
  el.attnscope = {
    get state() {
      return state;
    },
    get renders() {
      return renders;
    },
    get last() {
      return last;
    },
  };
  return function update() {
    state.pending.grid = state.pending.detail = model.get("busy");
    if (document.activeElement !== els.textInput && els.textInput.value !== state.text)
      els.textInput.value = state.text;
    const done = renderSafely(state, els);
    renders += 1;
    last = done;
    el.dispatchEvent(new CustomEvent("attnscope:render", { bubbles: true, detail: { ...done, count: renders } }));
  };
}

/** The text box: typing reaches the kernel DEBOUNCE_MS after the last key, Enter at once. Returns the cleanup. */
function wireText({ model, els, state, push }) {
  let typingTimer = null;
  const sendText = () => {
    clearTimeout(typingTimer);
    if (els.textInput.value !== model.get("text")) push({ text: els.textInput.value });
  };
  els.textInput.addEventListener("input", () => {
    changeText(state, els.textInput.value);
    clearTimeout(typingTimer);
    typingTimer = setTimeout(sendText, DEBOUNCE_MS);
  });
  els.textInput.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      sendText();
    }
  });
  return () => clearTimeout(typingTimer);
}

/** The head selects, the what-if toggles, the mean column and the token chips. */
function wireControls({ els, state, update, push, selectHead }) {
  els.layerSelect.addEventListener("change", () => selectHead(Number(els.layerSelect.value), state.head));
  els.headSelect.addEventListener("change", () => selectHead(state.layer, Number(els.headSelect.value)));
  els.causalToggle.addEventListener("change", () => {
    state.causal = els.causalToggle.checked;
    push({ causal: state.causal });
  });
  els.scaleToggle.addEventListener("change", () => {
    state.scaled = els.scaleToggle.checked;
    push({ scaled: state.scaled });
  });
  els.aggregateToggle.addEventListener("change", () => {
    state.aggregate = els.aggregateToggle.checked;
    update();
  });
  els.tokens.addEventListener("click", (ev) => {
    const chip = ev.target.closest(".chip");
    if (!chip) return;
    state.position = Number(chip.dataset.index);
    update();
  });
}

/** Follow the kernel: its answers and its inputs redraw the widget. Returns the function that stops it. */
function followModel({ model, state, update }) {
  const onAnswer = () => {
    syncState(state, model);
    readAnswers(state, model);
    update();
  };
  const onState = () => {
    syncState(state, model);
    update();
  };
  const traits = ["text", "layer", "head", "causal", "scaled", "stack", "target"];
  const inputs = traits.map((name) => [`change:${name}`, onState]);
  const handlers = [
    ["change:grid", onAnswer],
    ["change:detail", onAnswer],
    ["change:error", onState],
    ["change:busy", onState],
    ...inputs,
  ];
  for (const [event, handler] of handlers) model.on(event, handler);
  return () => {
    for (const [event, handler] of handlers) model.off(event, handler);
  };
}

/**
 * Plotly and the canvas measure their box: draw once the output is in the page, and again
 * when its width changes (a resized notebook panel). Returns the observer.
 */
function redrawOnResize(el, update) {
  let lastWidth = 0;
  const resize = new ResizeObserver(() => {
    const w = el.clientWidth;
    if (w && w !== lastWidth) {
      lastWidth = w;
      update();
    }
  });
  resize.observe(el);
  if (el.isConnected) update();
  return resize;
}

export function render({ model, el }) {
  el.classList.add("attnscope-widget");
  el.innerHTML = TEMPLATE;
  const els = widgetElements(el);
  const state = createState(VIEWS);
  state.model = JSON.parse(model.get("model_info") || "null");
  state.routes = JSON.parse(model.get("routes") || "{}"); // the parts each route takes, from the kernel's schemas
  syncState(state, model);
  readAnswers(state, model);
  const update = widgetUpdate({ model, el, els, state });

  // ---- the user changes something: the kernel recomputes, the traitlets bring the answers back
  const push = (changes) => {
    for (const [k, v] of Object.entries(changes)) model.set(k, v);
    model.set("busy", true);
    model.save_changes();
    update();
  };
  const selectHead = (layer, head) => {
    if (layer === state.layer && head === state.head) return;
    state.layer = layer;
    state.head = head;
    push({ layer, head });
  };
  const widget = { model, els, state, update, push, selectHead };
  const stopTyping = wireText(widget);
  wireControls(widget);
  const seq2seq = installSeq2seq({ ...widget, el }, DEBOUNCE_MS);
  els.cards = seq2seq.cards;
  // the grid canvas: hover shows the cell, click opens the head (the page's own pointer)
  installGridPointer({ state, els, selectHead });
  const stopFollowing = followModel(widget);
  const resize = redrawOnResize(el, update);

  return () => {
    resize.disconnect();
    stopTyping();
    seq2seq.stop();
    stopFollowing();
  };
}
