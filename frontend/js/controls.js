// The page's controls: what a typed key, a click or a link does to the state. The text box,
// the examples, the token chips, the head pickers, the what-if switches, the temperature, the
// tabs, the keys "[" and "]", and the URL hash. Each handler changes the state and then asks
// for an update (a redraw) or a refresh (new answers from the server, data.js).

import { EXAMPLES, chooseToken, clearErrors, clearNotice, parseHash, toHash } from "./state.js";
import { toggleBand } from "./views/image.js";
import { attentionLayers } from "./stacks.js";
import { codePoints } from "./draw/tokenstrip.js";
import { stackModel } from "./stacks.js";
import { VIEWS } from "./views.js";

/**
 * A new text lets go of a clicked token. After an edit the same position may hold another
 * token, and someone typing watches the guess for what comes after their last word: so any
 * change of the text goes back to the last token, rather than keeping a stale choice.
 */
export function changeText(state, text) {
  if (text === state.text) return;
  state.text = text;
  chooseToken(state, null);
}

/** The text box, the fit-the-text button of a refusal and the examples. */
function wireTextBox({ state, els, data }) {
  els.textInput.value = state.text;
  els.errorFit.addEventListener("click", () => {
    const fits = state.refusal?.ctx?.fits_chars;
    if (fits === undefined) return;
    changeText(state, codePoints(state.text).slice(0, fits).join("")); // the server counts code points, as Python does
    els.textInput.value = state.text;
    data.refreshNow();
  });
  els.textInput.addEventListener("input", () => {
    changeText(state, els.textInput.value);
    data.scheduleRefresh();
  });
  els.textInput.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      changeText(state, els.textInput.value);
      data.refreshNow();
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
      changeText(state, ex.text);
      data.refreshNow();
    });
    els.examples.append(b);
  }
}

/** The keys "[" and "]" step through heads when focus is not in a text field. */
function wireHeadKeys(app) {
  const { state } = app;
  document.addEventListener("keydown", (ev) => {
    if (ev.target.closest("textarea, input, select") || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key !== "]" && ev.key !== "[") return;
    // heads in reading order over the attention layers: past a layer's last head, the next layer's first
    const nHead = stackModel(state)?.n_head ?? 4;
    const layers = attentionLayers(stackModel(state));
    const flat = Math.max(0, layers.indexOf(state.layer)) * nHead + state.head;
    const next = (flat + (ev.key === "]" ? 1 : -1) + nHead * layers.length) % (nHead * layers.length);
    app.selectHead(layers[Math.floor(next / nHead)], next % nHead);
  });
}

/** Wire the controls; `app`: {state, els, update, data, selectHead, selectPosition, setView}. */
export function installControls(app) {
  const { state, els, update, data } = app;
  const { refreshNow } = data;

  wireTextBox(app);

  els.tokens.addEventListener("click", (ev) => {
    const chip = ev.target.closest(".chip");
    if (chip?.dataset.band !== undefined) {
      // the image's band (tokenstrip.js): fold or expand its tokens, in the strip and on the heatmap's axes
      toggleBand(state);
      update();
    } else if (chip) app.selectPosition(Number(chip.dataset.index));
  });

  els.layerSelect.addEventListener("change", () => app.selectHead(Number(els.layerSelect.value), state.head));
  els.headSelect.addEventListener("change", () => app.selectHead(state.layer, Number(els.headSelect.value)));
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

  let temperatureTimer = null;
  els.temperature.addEventListener("input", () => {
    state.temperature = Number(els.temperature.value);
    clearTimeout(temperatureTimer);
    temperatureTimer = setTimeout(data.fetchPredictions, 80);
    update();
  });

  els.linkNoticeClose.addEventListener("click", () => {
    clearNotice(state);
    update();
  });
  els.errorClose.addEventListener("click", () => {
    clearErrors(state);
    update();
  });

  window.addEventListener("hashchange", () => {
    const next = parseHash(window.location.hash, VIEWS);
    if (toHash({ ...state, ...next }, VIEWS) === toHash(state, VIEWS)) return;
    // what a link leaves out is the default, not what the last link said
    const sampling = { on: false, top_k: null, top_p: null, seed: null };
    clearNotice(state);
    Object.assign(state, { messages: [], stack: null, target: "", sampling }, next);
    data.fitToModel();
    els.textInput.value = state.text;
    data.forgetAsked(); // a link asks afresh
    update();
    refreshNow();
  });

  wireHeadKeys(app);
}
