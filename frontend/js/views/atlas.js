// The "Atlas" view: what each head does over a whole corpus, from the head atlases the server was
// started with (`attnscope serve --atlas DIR`, one or two; GET /api/atlas). A layer × head map per
// metric (the atlas's means), or with two atlases of one shape their difference on a diverging
// scale; a click on a head opens its card (GET /api/atlas/heads/{layer}/{head}): a histogram per
// metric and the contexts where the metric was highest, each a link that opens the explorer on
// that text at that head and query token. Every number is the server's; the page only draws.

import { getJSON, errorText } from "../api.js";
import { byId, drawPlot, onPlotClick, setText } from "../dom.js";
import {
  TOP_TOKENS,
  atlasHistogramsFigure,
  atlasMapFigure,
  histColumns,
  histHeight,
  qkFigure,
  valueText,
} from "../draw/atlas.js";

export const id = "atlas";
export const label = "Atlas";
/** Its tab starts hidden: shown once the server says it has an atlas. */
export const hidden = true;
/**
 * Its slice: the atlas index and the query it was last asked with (`asked`: an older query's answer is dropped),
 * the chosen metric, atlas and head, and that head's card.
 */
export const state = {
  atlasView: {
    index: null,
    asked: null,
    error: null,
    metric: null,
    which: null,
    difference: false,
    head: null,
    card: null,
    qkColour: "position",
  },
};
/** Its own requests (GET /api/atlas, a head's card), asked for when the view is shown. */
export const needs = [];

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <div class="card">
    <div class="card-head">
      <h2>Head atlas over a corpus</h2>
      <label class="small">metric <select id="atlas-metric" data-testid="atlas-metric"></select></label>
      <span id="atlas-two" class="small" hidden>
        <label>atlas <select id="atlas-which" data-testid="atlas-which"></select></label>
        <label><input type="checkbox" id="atlas-difference" data-testid="atlas-difference" />
          minus the other</label>
      </span>
    </div>
    <p id="atlas-caption" class="muted small" data-testid="atlas-caption"></p>
    <div id="atlas-map" class="plot plot-atlas" data-testid="atlas-map" role="img"
      aria-label="A metric's mean for every layer and head over the corpus"></div>
  </div>
  <div id="atlas-card" class="card" data-testid="atlas-card" hidden>
    <h2 id="atlas-card-title"></h2>
    <div id="atlas-hist" class="plot plot-atlas-hist" data-testid="atlas-hist" role="img"
      aria-label="The head's histograms, one per metric"></div>
    <p id="atlas-card-caption" class="muted small"></p>
    <ol id="atlas-exemplars" class="atlas-exemplars" data-testid="atlas-exemplars"></ol>
    <h3 class="small">Queries and keys
      <label class="small muted">colour by <select id="atlas-qk-colour" data-testid="atlas-qk-colour">
          <option value="position">position</option><option value="token">token</option>
        </select></label>
    </h3>
    <p id="atlas-qk-caption" class="muted small" data-testid="atlas-qk-caption"></p>
    <div id="atlas-qk" class="plot plot-atlas-qk" data-testid="atlas-qk" role="img"
      aria-label="The head's queries and keys projected together"></div>
  </div>`;

/** Ask for the atlas index once: the tab shows only where the server has an atlas. */
export function install(app) {
  byId("view-atlas").innerHTML = PANEL;
  byId("atlas-qk-colour").addEventListener("change", (e) => {
    app.state.atlasView.qkColour = e.target.value;
    app.update();
  });
  for (const [elId, key] of [
    ["atlas-metric", "metric"],
    ["atlas-which", "which"],
  ]) {
    byId(elId).addEventListener("change", (e) => {
      const v = app.state.atlasView;
      v[key] = e.target.value;
      if (key === "which") {
        v.head = v.card = v.qk = null; // another atlas: its own heads, opened afresh
        refresh(app);
      } else app.update();
    });
  }
  onPlotClick(byId("atlas-map"), (pt) => openHead(app, pt.customdata[0], pt.customdata[1]));
  byId("atlas-difference").addEventListener("change", (e) => {
    app.state.atlasView.difference = e.target.checked;
    refresh(app);
  });
  refresh(app);
}

/** (Re)load the index: the chosen atlas's maps, and with the difference on, minus the other atlas's. */
async function refresh(app) {
  const v = app.state.atlasView;
  const params = new URLSearchParams();
  if (v.which) params.set("atlas", v.which);
  const other = otherAtlas(v);
  if (v.difference && other) params.set("compare", other);
  const asked = (v.asked = params.toString());
  try {
    const index = await getJSON(`/api/atlas?${params}`);
    if (v.asked !== asked) return; // asked again since: only the latest answer counts
    if (!index.atlases.length) return; // no atlas served: the tab stays hidden
    v.index = index;
    v.error = null;
    v.which = v.index.atlas;
    v.metric = v.metric && v.index.maps[v.metric] ? v.metric : Object.keys(v.index.maps)[0];
    byId("tab-atlas").hidden = false;
  } catch (err) {
    if (v.asked !== asked) return;
    v.index = null;
    v.error = errorText(err);
  }
  app.update();
}

/** The other atlas's id, where two are served. */
const otherAtlas = (v) => v.index?.atlases.find((a) => a.id !== (v.which ?? v.index.atlas))?.id ?? null;

/** Open one head's card: its histograms and exemplars. */
async function openHead(app, layer, head) {
  const v = app.state.atlasView;
  v.head = { layer, head };
  v.card = null;
  v.qk = null;
  app.update();
  const url = `/api/atlas/heads/${layer}/${head}`;
  const which = `?atlas=${encodeURIComponent(v.which)}`;
  const asked = v.which;
  const current = () => v.head?.layer === layer && v.head?.head === head && v.which === asked;
  try {
    const card = await getJSON(url + which);
    if (current()) v.card = card;
  } catch (err) {
    if (current()) v.card = { error: errorText(err) };
  }
  app.update();
  try {
    const qk = await getJSON(`${url}/qk${which}`); // one forward pass per exemplar context
    if (current()) v.qk = qk;
  } catch (err) {
    if (current()) v.qk = { error: errorText(err) };
  }
  app.update();
}

/** Line breaks and tabs as visible marks, one character for one, so that a context stays on its line. */
const visible = (s) => s.replaceAll("\n", "↵").replaceAll("\t", "→");

/** An exemplar as a list item: the text with its query token marked, the value, and the explorer link. */
function exemplarItem(ex, layer, head) {
  const li = document.createElement("li");
  const chars = Array.from(ex.text); // the server's offsets count code points; a JS string counts UTF-16 units
  const part = (a, b) => visible(chars.slice(a, b).join(""));
  const before = document.createElement("span");
  before.textContent = part(0, ex.query_start);
  const query = document.createElement("mark");
  query.textContent = part(ex.query_start, ex.query_end);
  const after = document.createElement("span");
  after.textContent = part(ex.query_end);
  const value = document.createElement("span");
  value.className = "muted small";
  value.textContent = ` ${valueText(ex.value, 4)} `;
  const link = document.createElement("a");
  const hash = new URLSearchParams({ text: ex.text, layer: String(layer), head: String(head), view: "head" });
  if (ex.query !== null) hash.set("pos", String(ex.query));
  link.href = `#${hash}`;
  link.textContent = "open in the explorer";
  link.dataset.testid = "atlas-open";
  li.append(before, query, after, value, link);
  return li;
}

/**
 * The words above the map: which atlas, its model and corpus, what the metric is, and the difference, or
 * that the other atlas lacks the metric (no difference then: the map is the chosen atlas's own).
 */
export function atlasWords(index, metric, served) {
  const a = index.atlases.find((x) => x.id === index.atlas);
  const parts = [
    `${a.id}: ${a.model}, ${a.tokens.toLocaleString("en")} ` +
      `tokens${a.complete ? "" : " (stopped early: --resume continues it)"}.`,
  ];
  if (a.definitions[metric])
    parts.push(`${metric}: ${a.definitions[metric]}; each cell is its mean over the corpus's query rows.`);
  if (index.difference?.[metric])
    parts.push(`Shown: ${index.atlas} − ${index.compare}, red where ${index.atlas} is higher.`);
  else if (index.difference)
    parts.push(`${index.compare} has no ${metric}, so no difference is drawn: the map is ${index.atlas}'s own.`);
  if (served && a.model !== served)
    parts.push(
      `This atlas measured ${a.model}; the explorer serves ${served}, so an opened context shows the served model.`,
    );
  return parts.join(" ");
}

export function draw(state) {
  const v = state.atlasView;
  if (!v) return false;
  if (v.error) setText(byId("atlas-caption"), `Could not read the atlas: ${v.error}`);
  if (!v.index) return false;
  const { index } = v;
  fillSelect(byId("atlas-metric"), Object.keys(index.maps), v.metric);
  fillSelect(
    byId("atlas-which"),
    index.atlases.map((a) => a.id),
    index.atlas,
  );
  byId("atlas-two").hidden = index.atlases.length < 2;
  const signed = Boolean(v.difference && index.difference?.[v.metric]);
  const grid = signed ? index.difference[v.metric] : index.maps[v.metric];
  setText(byId("atlas-caption"), atlasWords(index, v.metric, state.model?.name));
  const map = byId("atlas-map");
  drawPlot(
    map,
    `${index.atlas}|${index.compare}|${v.metric}|${signed}`,
    () => atlasMapFigure({ grid, layers: index.layers, metric: v.metric, signed }),
    "attnscope-atlas",
  );
  drawCard(v);
  return true;
}

function drawCard(v) {
  const box = byId("atlas-card");
  box.hidden = !v.head;
  if (!v.head) return;
  setText(byId("atlas-card-title"), `Layer ${v.head.layer} · head ${v.head.head}`);
  const list = byId("atlas-exemplars");
  if (!v.card || v.card.error) {
    setText(byId("atlas-card-caption"), v.card?.error ? `Could not read the head: ${v.card.error}` : "reading…");
    list.replaceChildren();
    return;
  }
  const shown = v.card.exemplars.filter((e) => e.metric === v.metric);
  setText(
    byId("atlas-card-caption"),
    `Where ${v.metric} was highest over the corpus (${shown.length} contexts, the query token marked):`,
  );
  const hist = byId("atlas-hist");
  const cols = histColumns(hist.clientWidth);
  const height = `${histHeight(Object.keys(v.card.metrics).length, cols)}px`;
  if (hist.style.height !== height) hist.style.height = height; // a row of charts per HIST_ROW_PX
  drawPlot(
    hist,
    `${v.card.atlas}|${v.head.layer}|${v.head.head}|${cols}`,
    () => atlasHistogramsFigure(v.card, cols),
    "attnscope-atlas-head",
  );
  drawQK(v);
  const key = `${v.card.atlas}|${v.head.layer}|${v.head.head}|${v.metric}`;
  if (list.dataset.key !== key) {
    list.dataset.key = key;
    list.replaceChildren(...shown.map((e) => exemplarItem(e, v.head.layer, v.head.head)));
  }
}

function drawQK(v) {
  const caption = byId("atlas-qk-caption");
  if (!v.qk || v.qk.error) {
    setText(caption, v.qk?.error ? `No queries and keys: ${v.qk.error}` : "running the contexts through the model…");
    return;
  }
  const colouredBy =
    v.qkColour === "token" ? `token (the ${TOP_TOKENS} most frequent, the rest grey)` : "position in the context";
  setText(
    caption,
    `Queries (circles) and keys (crosses) of this head at every position of its ${v.qk.texts.length} exemplar ` +
      `contexts, as the served model computes them, ` +
      "projected together onto their first two principal components after moving the keys onto the queries' " +
      "mean (which no softmax row notices): " +
      `a query sits near the keys it attends most. Coloured by ${colouredBy}.`,
  );
  drawPlot(
    byId("atlas-qk"),
    `${v.qk.atlas}|${v.qk.layer}|${v.qk.head}|${v.qkColour}`,
    () => qkFigure(v.qk, v.qkColour),
    "attnscope-atlas-qk",
  );
}

function fillSelect(select, values, chosen) {
  if (select.dataset.values !== values.join("|")) {
    select.dataset.values = values.join("|");
    select.replaceChildren(
      ...values.map((x) => Object.assign(document.createElement("option"), { value: x, textContent: x })),
    );
  }
  if (chosen && select.value !== chosen) select.value = chosen;
}
