// The explorer page's entry: the one state object, the page's elements, and the update that
// redraws from the state (render.js). Everything else is installed over `app`: the controls
// (controls.js), the requests (data.js), each view's own pointer (views.js), the export, and
// the cards (switched-off heads, head effects, generation).

import { blankSubject } from "./subject.js";
import { installAblation } from "./cards/ablation.js";
import { installChat } from "./cards/chat.js";
import { installStacks } from "./cards/stacks.js";
import { installTarget } from "./cards/target.js";
import { installAudioPick } from "./cards/audiopick.js";
import { installControls, changeText } from "./controls.js";
import { createData } from "./data.js";
import { installEffects } from "./cards/effects.js";
import { installExport, renderExport } from "./cards/export.js";
import { installGenerate } from "./cards/generate.js";
import { installModelPicker } from "./cards/modelpicker.js";
import { renderSafely, resizeView } from "./render.js";
import {
  chooseHead,
  chooseToken,
  clearNotice,
  createState,
  currentDetail,
  currentGrid,
  parseHash,
  showError,
  toHash,
} from "./state.js";
import { installGridPointer } from "./head/grid.js";
import { buildTabs, installTabs } from "./tabs.js";
import { VIEWS, VIEW_IDS } from "./views.js";

/** The page's elements, by what they are. */
function pageElements() {
  const $ = (id) => document.getElementById(id);
  return {
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
    scaleLabel: document.querySelector("label[for=scale-toggle]"),
    scaleSwitch: $("scale-toggle").closest(".control"),
    aggregateToggle: $("aggregate-toggle"),
    temperature: $("temperature"),
    temperatureValue: $("temperature-value"),
    errorBanner: $("error-banner"),
    errorText: $("error-text"),
    errorClose: $("error-close"),
    errorFit: $("error-fit"),
    linkNotice: $("link-notice"),
    linkNoticeText: $("link-notice-text"),
    linkNoticeClose: $("link-notice-close"),
    whatifBanner: $("whatif-banner"),
    whatifText: $("whatif-text"),
    views: $("views"),
    // the head view's parts: the notebook widget draws the same view into its own elements
    headTitle: $("head-title"),
    headHeatmap: $("head-heatmap"),
    headsGrid: $("heads-grid"),
    gridCanvas: $("heads-grid-canvas"),
    gridTip: $("grid-tip"),
    gridCaption: $("grid-caption"),
    layerRibbon: $("layer-ribbon"),
    gridPng: $("grid-png"),
    predictions: $("predictions"),
    predictionsTitle: $("predictions-title"),
    predictionsList: $("predictions-list"),
    predictionsActual: $("predictions-actual"),
    downloadCsv: $("download-csv"),
    downloadJson: $("download-json"),
    copyLink: $("copy-link"),
    toast: $("toast"),
    tabs: buildTabs($("tabs")),
    panels: Object.fromEntries(VIEW_IDS.map((v) => [v, $(`view-${v}`)])),
    cards: [], // {draw(state)} of the cards and the export buttons, drawn by every render after the view
  };
}

/**
 * The page: its one state object (read from the link), its elements, and `update`, the redraw from the state
 * that keeps the URL's hash in step and tells listeners (tests, the benchmark) what was drawn, with the
 * page's own count of renders. The requests (data.js) and what a click chooses are installed over it.
 */
function createPage() {
  const state = createState(VIEWS);
  Object.assign(state, parseHash(window.location.hash, VIEWS));
  const els = pageElements();
  const page = { renders: 0, hashTimer: null, frame: null };

  function update() {
    cancelAnimationFrame(page.frame); // an update asked for the next frame is this one
    page.frame = null;
    app.data?.askNeeded(); // the data step: the view's own questions, asked before it draws from the answers
    const done = renderSafely(state, els);
    if (done.failed) showError(state, done.error); // and it stays in the banner
    page.renders += 1;
    clearTimeout(page.hashTimer);
    page.hashTimer = setTimeout(() => {
      const hash = toHash(state, VIEWS);
      if (window.location.hash !== hash) window.history.replaceState(null, "", hash);
    }, 250);
    performance.mark("attnscope:render");
    document.dispatchEvent(new CustomEvent("attnscope:render", { detail: { ...done, count: page.renders } }));
  }

  /**
   * An answer landed: draw at the next frame, not at once, so that answers landing within one frame (the
   * chosen head's and the grid's, asked together) cost one render and one paint, not two.
   */
  function updateSoon() {
    page.frame ??= requestAnimationFrame(update);
  }

  const app = { state, els, update, updateSoon };
  const data = createData(app);
  Object.assign(app, {
    data,
    refreshNow: data.refreshNow,
    changeText: (text) => changeText(state, text),
    selectHead(layer, head) {
      if (layer === state.layer && head === state.head) return;
      chooseHead(state, layer, head);
      clearNotice(state); // the user chose a head: the note about the link's head is done
      update(); // draws at once from the grid's pattern
      data.fetchDetail(); // then the scores and the per-head views
    },
    selectPosition(p) {
      chooseToken(state, p);
      update();
    },
    setView(view) {
      if (!VIEW_IDS.includes(view) || view === state.view) return;
      state.view = view;
      update();
      resizeView(els, view);
      data.ensureData();
    },
  });
  return { app, page };
}

/** The controls, the tabs, the grid's pointer, the export, each view's own controls and the cards. */
function installPage(app) {
  const { state, els } = app;
  installControls(app);
  installTabs(app, els.tabs);
  installGridPointer(app);
  installExport(app);
  for (const view of VIEWS) view.install?.(app);
  // switching heads off, head effects, generation (issue 18): cards drawn by every render
  els.cards.push(
    installChat(app),
    installTarget(app),
    installAudioPick(app),
    installStacks(app),
    installModelPicker(app),
    installAblation(app),
    installEffects(app),
    installGenerate(app),
    { draw: () => renderExport(state, els) },
  );
  // the top bar grows a row for the picker or a long badge: the sticky view bar stays below it
  const topbar = document.querySelector(".topbar");
  new ResizeObserver(() =>
    document.documentElement.style.setProperty("--topbar-height", `${topbar.offsetHeight}px`),
  ).observe(topbar);
}

/** Build the page, give tests and the benchmark a read-only handle on it, draw it and ask for its answers. */
function startPage() {
  const { app, page } = createPage();
  const { state, data } = app;
  installPage(app);
  window.attnscope = {
    get state() {
      return state;
    },
    get renders() {
      return page.renders;
    },
    /** True when nothing is pending and the current text's answers (or an error) are shown. */
    get settled() {
      if (data.busy() || page.frame !== null) return false; // asked, or answered and not drawn yet
      if (blankSubject(state)) return true; // the empty state: nothing to ask
      return state.error !== null || (!!currentGrid(state) && !!currentDetail(state));
    },
  };
  if (!window.Plotly) {
    showError(
      state,
      "The charting library did not load from /vendor/plotly.min.js: is the plotly package installed on the server?",
    );
  }
  app.update();
  data.start();
  data.refreshNow();
}

startPage();
