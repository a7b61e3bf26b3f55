// The "Atlas" view: what each head does over a whole corpus, from the head atlases the server was
// started with (`attnscope serve --atlas DIR`, one or two; GET /api/atlas). A layer × head map per
// metric (the atlas's means), or with two atlases of one shape their difference on a diverging
// scale; a click on a head opens its card (GET /api/atlas/heads/{layer}/{head}): a histogram per
// metric and the contexts where the metric was highest, each a link that opens the explorer on
// that text at that head and query token. Every number is the server's; the page only draws.

import { getJSON, errorText } from "../api.js";
import { byId, drawPlot, onPlotClick, setText } from "../dom.js";
import { QUALITATIVE, SIGNED_SCALE, WEIGHT_SCALE, baseLayout, signedRange } from "../draw/figures.js";

export const id = "atlas";
export const label = "Atlas";
/** Its tab starts hidden: shown once the server says it has an atlas. */
export const hidden = true;
/** Its slice: the atlas index, the chosen metric, atlas and head, and that head's card. */
export const state = {
  atlasView: {
    index: null,
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

// metrics whose values are a share of a row's attention: drawn on 0..1
const SHARES = new Set([
  "first_token",
  "sink_mass",
  "previous_token",
  "self",
  "local_fraction",
  "local_fraction",
  "induction",
]);

/** Ask for the atlas index once: the tab shows only where the server has an atlas. */
export function install(app) {
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
  try {
    const index = await getJSON(`/api/atlas?${params}`);
    if (!index.atlases.length) return; // no atlas served: the tab stays hidden
    v.index = index;
    v.error = null;
    v.which = v.index.atlas;
    v.metric = v.metric && v.index.maps[v.metric] ? v.metric : Object.keys(v.index.maps)[0];
    byId("tab-atlas").hidden = false;
  } catch (err) {
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

const TOP_TOKENS = 8; // coloured by token: the most frequent tokens each a colour, the rest grey

/** The head's queries and keys projected together (AttentionViz): circles and crosses, coloured by
 * position, or (`by` "token") the most frequent tokens each in a colour of its own. */
export function qkFigure(answer, by = "position") {
  return by === "token" ? qkByToken(answer) : qkByPosition(answer);
}

function qkByToken(answer) {
  const counts = new Map();
  for (const p of answer.points) if (p.kind === "q") counts.set(p.token, (counts.get(p.token) ?? 0) + 1);
  const top = [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP_TOKENS)
    .map(([t]) => t);
  const groups = [...top.map((t, i) => [t, QUALITATIVE[i % QUALITATIVE.length]]), [null, "#c4c8d0"]];
  const data = [];
  for (const [token, colour] of groups) {
    for (const [kind, symbol] of [
      ["q", "circle"],
      ["k", "x"],
    ]) {
      const pts = answer.points.filter(
        (p) => p.kind === kind && (token === null ? !top.includes(p.token) : p.token === token),
      );
      data.push({
        type: "scatter",
        mode: "markers",
        name: token === null ? "other tokens" : token,
        legendgroup: token ?? "other",
        showlegend: kind === "q",
        x: pts.map((p) => p.x),
        y: pts.map((p) => p.y),
        customdata: pts.map((p) => [p.token, p.position, p.context]),
        marker: { symbol, size: 6, color: colour, opacity: 0.8 },
        hovertemplate:
          `${kind === "q" ? "query" : "key"} <b>%{customdata[0]}</b><br>position %{customdata[1]} ` +
          `of context %{customdata[2]}<extra></extra>`,
      });
    }
  }
  return { data, layout: qkLayout(answer, { legend: { orientation: "v", x: 1.02, y: 1 } }) };
}

function qkLayout(answer, extra) {
  const [a, b] = answer.explained.map((e) => `${(100 * e).toFixed(1)} %`);
  return baseLayout({
    margin: { l: 40, r: 10, t: 10, b: 40 },
    xaxis: { title: { text: `PC 1 (${a} of the variance)`, font: { size: 11 } }, zeroline: false },
    yaxis: { title: { text: `PC 2 (${b})`, font: { size: 11 } }, zeroline: false, scaleanchor: "x" },
    ...extra,
  });
}

function qkByPosition(answer) {
  const traces = [
    ["q", "queries", "circle"],
    ["k", "keys", "x"],
  ].map(([kind, name, symbol]) => {
    const pts = answer.points.filter((p) => p.kind === kind);
    return {
      type: "scatter",
      mode: "markers",
      name,
      x: pts.map((p) => p.x),
      y: pts.map((p) => p.y),
      customdata: pts.map((p) => [p.token, p.position, p.context]),
      marker: { symbol, size: 6, color: pts.map((p) => p.position), coloraxis: "coloraxis", opacity: 0.8 },
      hovertemplate:
        `${name.slice(0, -1)} <b>%{customdata[0]}</b><br>position %{customdata[1]} of context ` +
        `%{customdata[2]}<extra></extra>`,
    };
  });
  return {
    data: traces,
    layout: qkLayout(answer, {
      coloraxis: {
        colorscale: WEIGHT_SCALE,
        colorbar: { title: { text: "position", side: "right", font: { size: 11 } }, thickness: 10, outlinewidth: 0 },
      },
      legend: { orientation: "h", y: -0.15 },
    }),
  };
}

/** The layer × head map of one metric, or of a difference (signed: diverging, centred on 0). */
export function atlasMapFigure({ grid, layers, metric, signed }) {
  const heads = grid[0]?.length ?? 0;
  const range = signed ? signedRange(grid) : null;
  const share = SHARES.has(metric);
  return {
    data: [
      {
        type: "heatmap",
        z: grid,
        x: Array.from({ length: heads }, (_, h) => h),
        y: layers.map((_, i) => i),
        customdata: layers.map((l) => Array.from({ length: heads }, (_, h) => [l, h])),
        colorscale: signed ? SIGNED_SCALE : WEIGHT_SCALE,
        ...(signed ? { zmin: -range, zmax: range, zmid: 0 } : share ? { zmin: 0, zmax: 1 } : { zmin: 0 }),
        xgap: 1,
        ygap: 1,
        hoverongaps: false,
        hovertemplate:
          `L%{customdata[0]} · H%{customdata[1]}<br>${metric}${signed ? " difference" : ""} ` +
          `%{z:${signed ? "+" : ""}.4f}<extra>click for the head's card</extra>`,
        colorbar: {
          title: { text: signed ? "difference" : metric, side: "right", font: { size: 11 } },
          thickness: 12,
          outlinewidth: 0,
        },
      },
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 30, b: 30 },
      xaxis: { title: { text: "head", font: { size: 11 } }, dtick: 1, fixedrange: true, side: "top" },
      yaxis: {
        tickmode: "array",
        tickvals: layers.map((_, i) => i),
        ticktext: layers.map((l) => `L${l}`),
        autorange: "reversed",
        fixedrange: true,
      },
    }),
  };
}

/** One head's histograms, a small bar chart per metric, each over its bins' edges. */
export function atlasHistogramsFigure(card) {
  const names = Object.keys(card.metrics);
  const cols = 2;
  const rows = Math.ceil(names.length / cols);
  const data = [];
  const layout = baseLayout({
    margin: { l: 40, r: 10, t: 20, b: 30 },
    showlegend: false,
    grid: { rows, columns: cols, pattern: "independent", ygap: 0.5 },
    annotations: [],
  });
  names.forEach((name, n) => {
    const m = card.metrics[name];
    const axis = n === 0 ? "" : String(n + 1);
    // bins of one width on a number line; bins that double (distance in tokens) as named categories
    const widths = m.histogram.map((_, i) => m.bin_edges[i + 1] - m.bin_edges[i]);
    const even = widths.every((w) => Math.abs(w - widths[0]) < 1e-9);
    // named bins stop after the last one holding a row (distance bins run to 65535 tokens)
    const last = even ? m.histogram.length : Math.max(1, m.histogram.findLastIndex((c) => c > 0) + 1);
    const x = even
      ? m.histogram.map((_, i) => (m.bin_edges[i] + m.bin_edges[i + 1]) / 2)
      : m.histogram.slice(0, last).map((_, i) => binName(m.bin_edges[i], m.bin_edges[i + 1]));
    data.push({
      type: "bar",
      x,
      y: m.histogram.slice(0, last),
      ...(even ? { width: widths } : {}),
      xaxis: `x${axis}`,
      yaxis: `y${axis}`,
      marker: { color: "#3b6ea8" },
      customdata: m.histogram.map((_, i) => [m.bin_edges[i], m.bin_edges[i + 1]]),
      hovertemplate: `${name} in [%{customdata[0]:.3g}, %{customdata[1]:.3g}): %{y} rows<extra></extra>`,
    });
    layout.annotations.push({
      text: `${name} · mean ${m.mean === null ? "—" : m.mean.toFixed(3)}`,
      xref: `x${axis} domain`,
      yref: `y${axis} domain`,
      x: 0,
      y: 1.18,
      xanchor: "left",
      showarrow: false,
      font: { size: 11 },
    });
  });
  return { data, layout };
}

/** A bin of whole numbers by its name: [1.5, 3.5) is "2–3". */
function binName(lo, hi) {
  const a = Math.ceil(lo);
  const b = Math.ceil(hi) - 1;
  return a >= b ? String(a) : `${a}–${b}`;
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
  value.textContent = ` ${ex.value.toFixed(4)} `;
  const link = document.createElement("a");
  const hash = new URLSearchParams({ text: ex.text, layer: String(layer), head: String(head), view: "head" });
  if (ex.query !== null) hash.set("pos", String(ex.query));
  link.href = `#${hash}`;
  link.textContent = "open in the explorer";
  link.dataset.testid = "atlas-open";
  li.append(before, query, after, value, link);
  return li;
}

/** The words above the map: which atlas, its model and corpus, what the metric is, and the difference. */
export function atlasWords(index, metric, served) {
  const a = index.atlases.find((x) => x.id === index.atlas);
  const parts = [
    `${a.id}: ${a.model}, ${a.tokens.toLocaleString("en")} ` +
      `tokens${a.complete ? "" : " (stopped early: --resume continues it)"}.`,
  ];
  if (a.definitions[metric])
    parts.push(`${metric}: ${a.definitions[metric]}; each cell is its mean over the corpus's query rows.`);
  if (index.difference) parts.push(`Shown: ${index.atlas} − ${index.compare}, red where ${index.atlas} is higher.`);
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
  drawPlot(
    byId("atlas-hist"),
    `${v.card.atlas}|${v.head.layer}|${v.head.head}`,
    () => atlasHistogramsFigure(v.card),
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
