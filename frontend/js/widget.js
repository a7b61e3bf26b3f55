// The notebook widget (attnscope.show): the page's head view inside a notebook output.
//
// Drawing is the page's own: views.js draws the chosen head, the all-heads grid, the tokens,
// the predictions and the what-if notes from a state object shaped like the page's
// (state.js), gridcanvas.js answers what a grid pixel shows. This module only builds the
// widget's DOM (classes, never ids: several widgets share a page) and wires it to the
// anywidget model instead of fetch: the kernel computes the API's answers and puts them in
// the traitlets `grid` and `detail` as {"text", "causal", "scale", ["layer", "head"], "answer"}.

import { cellAt, gridTooltip } from "./gridcanvas.js";
import { divisorShort } from "./captions.js";
import { createState, fitHead, gridKey, headKey } from "./state.js";
import { drawHeadView, renderBanners, renderModel, renderPredictions, renderTokens } from "./views.js";
import { decodeResponse } from "./wire.js";

const TEMPLATE = `
  <div class="aw-bar">
    <div class="model-badge" data-testid="model-info"></div>
    <span class="status" aria-live="polite"><span class="spinner" aria-hidden="true"></span><span class="status-text"></span></span>
  </div>
  <label class="aw-label">Text <span class="aw-help">updates as you type · Enter runs now</span>
    <textarea class="aw-text" rows="2" spellcheck="false" autocomplete="off" data-testid="text-input"></textarea>
  </label>
  <div class="aw-tokens-head"><span class="aw-caption">Tokens</span> <span class="token-count"></span>
    <span class="aw-help">click one for its next-token predictions</span></div>
  <div class="tokens" data-testid="tokens" role="group" aria-label="Tokens of the text"></div>
  <div class="aw-controls">
    <label>Layer <select class="layer-select"></select></label>
    <label>Head <select class="head-select"></select></label>
    <label title="Off: every token also sees the tokens after it (what-if)"><input type="checkbox" class="causal-toggle" /> Causal mask</label>
    <label title="Off: scores are not divided by the model's divisor (what-if)"><input type="checkbox" class="scale-toggle" /> <span class="scale-label">Scale by √d_k</span></label>
    <label title="A last column with the mean over each layer's heads"><input type="checkbox" class="aggregate-toggle" /> Mean column</label>
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

export function render({ model, el }) {
  el.classList.add("attnscope-widget");
  el.innerHTML = TEMPLATE;
  const q = (cls) => el.querySelector(`.${cls}`);
  const els = {
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
    predictions: q("predictions"),
    predictionsTitle: q("predictions-title"),
    predictionsList: q("predictions-list"),
    predictionsActual: q("predictions-actual"),
  };

  const state = createState();
  const sync = () => {
    state.text = model.get("text");
    state.layer = model.get("layer");
    state.head = model.get("head");
    state.causal = model.get("causal");
    state.scaled = model.get("scaled");
    state.error = model.get("error") || null;
  };
  // an answer's key is the page's own (state.js gridKey, headKey) of the state it answers
  const keyState = (t) => ({ ...state, text: t.text, causal: t.causal, scaled: t.scale !== "none", layer: t.layer, head: t.head });
  const readAnswers = () => {
    const grid = answerOf(model.get("grid"));
    state.grid = grid && { key: gridKey(keyState(grid.tag)), response: grid.response };
    const detail = answerOf(model.get("detail"));
    state.detail = detail && {
      key: headKey(keyState(detail.tag)),
      textKey: gridKey(keyState(detail.tag)),
      temperature: state.temperature,
      response: detail.response,
    };
  };
  state.model = JSON.parse(model.get("model_info") || "null");
  sync();
  readAnswers();

  function fillSelect(select, n, prefix, value) {
    if (select.options.length !== n) {
      select.replaceChildren(
        ...Array.from({ length: n }, (_, i) => {
          const o = document.createElement("option");
          o.value = String(i);
          o.textContent = `${prefix} ${i}`;
          return o;
        }),
      );
    }
    if (select.value !== String(value)) select.value = String(value);
  }

  let renders = 0;
  // a read-only handle for tests, as the page's window.attnscope
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
  let last = null;
  function draw() {
    const m = state.model;
    state.pending.grid = state.pending.detail = model.get("busy");
    renderModel(state, els);
    if (m) q("scale-label").textContent = `Scale by ${divisorShort({ divisor: m.divisor, divisor_rule: m.divisor_rule, softcap: m.softcap })}`;
    fillSelect(els.layerSelect, m?.n_layer ?? 1, "Layer", state.layer);
    fillSelect(els.headSelect, m?.n_head ?? 1, "Head", state.head);
    els.causalToggle.checked = state.causal;
    els.scaleToggle.checked = state.scaled;
    els.aggregateToggle.checked = state.aggregate;
    if (document.activeElement !== els.textInput && els.textInput.value !== state.text) els.textInput.value = state.text;
    renderBanners(state, els);
    els.status.classList.toggle("busy", state.pending.grid);
    els.statusText.textContent = state.pending.grid ? "updating…" : "";
    renderTokens(state, els);
    renderPredictions(state, els);
    return drawHeadView(state, els);
  }

  function update() {
    let done;
    try {
      done = draw();
    } catch (err) {
      // a drawing bug must not blank the widget: say what failed, keep what is drawn
      console.error("attnscope widget:", err);
      els.errorText.textContent = `Could not draw this view: ${err && err.message ? err.message : err}`;
      els.errorBanner.hidden = false;
      done = { failed: true };
    }
    renders += 1;
    last = done;
    el.dispatchEvent(new CustomEvent("attnscope:render", { bubbles: true, detail: { ...done, count: renders } }));
  }

  // ---- the user changes something: the kernel recomputes, the traitlets bring the answers back
  const push = (changes) => {
    for (const [k, v] of Object.entries(changes)) model.set(k, v);
    model.set("busy", true);
    model.save_changes();
    update();
  };
  let typingTimer = null;
  const sendText = () => {
    clearTimeout(typingTimer);
    if (els.textInput.value !== model.get("text")) push({ text: els.textInput.value });
  };
  els.textInput.addEventListener("input", () => {
    state.text = els.textInput.value;
    state.position = null;
    clearTimeout(typingTimer);
    typingTimer = setTimeout(sendText, DEBOUNCE_MS);
  });
  els.textInput.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      sendText();
    }
  });
  function selectHead(layer, head) {
    if (layer === state.layer && head === state.head) return;
    state.layer = layer;
    state.head = head;
    push({ layer, head });
  }
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

  // ---- the grid canvas: hover shows the cell, click opens the head (as on the page)
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
    els.gridTip.style.left = `${Math.max(0, Math.min(x, box.width - els.gridTip.offsetWidth - 4))}px`;
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
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    const mv = moves[ev.key];
    if (!mv || !state.model) return;
    ev.preventDefault();
    const fit = fitHead({ layer: Math.max(0, state.layer + mv[0]), head: Math.max(0, state.head + mv[1]) }, state.model);
    selectHead(fit.layer, fit.head);
  });

  // ---- answers from the kernel
  const onAnswer = () => {
    sync();
    readAnswers();
    update();
  };
  const onState = () => {
    sync();
    update();
  };
  model.on("change:grid", onAnswer);
  model.on("change:detail", onAnswer);
  model.on("change:error", onState);
  model.on("change:busy", onState);
  for (const name of ["text", "layer", "head", "causal", "scaled"]) model.on(`change:${name}`, onState);

  // Plotly and the canvas measure their box: draw once the output is in the page, and again
  // when its width changes (a resized notebook panel)
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

  return () => {
    resize.disconnect();
    clearTimeout(typingTimer);
    model.off("change:grid", onAnswer);
    model.off("change:detail", onAnswer);
    model.off("change:error", onState);
    model.off("change:busy", onState);
    for (const name of ["text", "layer", "head", "causal", "scaled"]) model.off(`change:${name}`, onState);
    if (window.Plotly) window.Plotly.purge(els.headHeatmap);
  };
}
