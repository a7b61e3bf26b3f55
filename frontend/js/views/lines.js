// The "Lines" view, BertViz's head view: one layer's attention as lines from each query token (left
// column) to the keys it attends (right column), a colour per head, each line as opaque as its
// weight. Hover a token to keep only its lines (a query's on the left, a key's on the right); click
// a head's swatch to hide or show it. A long text stays readable: each query draws only its
// heaviest keys. The weights are the server's (POST /api/attention, the layer's patterns).
// Click tokens to select several (queries on the left, keys on the right): the chosen head's
// attention of the selection, summed or averaged by the server (POST /api/selection), is drawn
// below: where the selected queries look, and who looks at the selected keys. On an encoder–decoder's cross
// stack the two columns are BertViz's: the target's tokens (the decoder's queries) left, the source's right.

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setHidden, setText } from "../dom.js";
import { BLUE, ORANGE, QUALITATIVE, baseLayout } from "../draw/figures.js";
import { quirkWords } from "../draw/quirks.js";
import { blankSubject, imageOf, subject, subjectKey } from "../subject.js";
import { keyTokens, stackSides } from "../stacks.js";

export const id = "lines";
export const label = "Lines";
/** Its slice: the chosen layer's patterns and the selection's answer ({key, response, error}), and what is shown. */
export const state = {
  lines: null,
  linesHidden: [], // heads whose lines are hidden
  linesFocus: null, // {side: "query" | "key", index}: the hovered token whose lines alone are shown
  linesSelection: { prompt: null, queries: [], keys: [] }, // tokens clicked, in the prompt they were clicked in
  linesReduce: "mean", // how the selected rows and columns are combined: "mean" or "sum"
  linesSelected: null, // POST /api/selection
};
export const answers = ["lines", "linesSelected"];
/** Its own requests (the layer's patterns, the selection's rows and columns): its `need`. */
export const needs = [];

const ALL_KEYS_UP_TO = 24; // texts this short draw every weight; longer ones the heaviest of each query
const HEAVIEST = 3;
const MIN_WEIGHT = 0.01; // lighter lines would not be seen

const SVG = "http://www.w3.org/2000/svg";

/** The tokens clicked, while the prompt is the one they were clicked in (another text's positions are not kept). */
const selectionOf = (state) =>
  state.linesSelection.prompt === subjectKey(state, false) ? state.linesSelection : { queries: [], keys: [] };

/** The chosen layer's patterns, every head (float32 typed arrays, not JSON numbers): its question, or null. */
function linesQuestion(state) {
  if (blankSubject(state)) return null;
  const url = "/api/attention";
  const body = { ...subject(state, url), layers: [state.layer], include: ["pattern"], top_k: 0, encoding: "b64" };
  return question("lines", url, body);
}

/**
 * The selected tokens' rows and columns of the chosen head, combined: its question once the lines are drawn and a
 * token is selected (none with an image: the route reads the text alone, whose positions differ), else null.
 */
function selectionQuestion(state) {
  const { queries, keys } = selectionOf(state);
  if (!queries.length && !keys.length) return null;
  if (imageOf(state) || !answerIn(state, linesQuestion(state)).response) return null;
  const url = "/api/selection";
  const { layer, head, linesReduce: reduce } = state;
  return question("linesSelected", url, { ...subject(state, url), layer, head, queries, keys, reduce });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [linesQuestion(state), selectionQuestion(state)];

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row">
      <h2>The chosen layer as lines</h2>
      <div id="lines-heads" class="lines-heads" data-testid="lines-heads"
        aria-label="Heads: click to hide or show"></div>
    </header>
    <p id="lines-caption" class="muted small" data-testid="lines-caption"></p>
    <div class="lines-box">
      <svg id="lines-svg" data-testid="lines-svg" role="img"
        aria-label="Attention of every head of the layer as lines from query tokens to key tokens"></svg>
    </div>
    <div id="lines-selection" class="lines-selection" data-testid="lines-selection" hidden>
      <label class="small">selected tokens, the chosen head:
        <select id="lines-reduce" data-testid="lines-reduce">
          <option value="mean">averaged</option><option value="sum">summed</option>
        </select></label>
      <p id="lines-selection-caption" class="muted small" data-testid="lines-selection-caption"></p>
      <div id="lines-selection-plot" class="plot plot-selection" data-testid="lines-selection-plot" role="img"
        aria-label="The selected tokens' attention, combined"></div>
    </div>
  </article>`;

export function install(app) {
  byId("view-lines").innerHTML = PANEL;
  const svg = byId("lines-svg");
  // hovering a token keeps its lines; leaving the picture shows them all again
  svg.addEventListener("mouseover", (ev) => {
    const token = ev.target.closest("[data-side]");
    if (!token) return;
    app.state.linesFocus = { side: token.dataset.side, index: Number(token.dataset.index) };
    showFocus(app.state);
  });
  svg.addEventListener("mouseleave", () => {
    app.state.linesFocus = null;
    showFocus(app.state);
  });
  // a click selects a token (or lets it go): queries on the left, keys on the right
  svg.addEventListener("click", (ev) => {
    const token = ev.target.closest("[data-side]");
    if (!token) return;
    const side = token.dataset.side === "query" ? "queries" : "keys";
    const i = Number(token.dataset.index);
    const chosen = new Set(selectionOf(app.state)[side]);
    if (chosen.has(i)) chosen.delete(i);
    else chosen.add(i);
    const selection = { ...selectionOf(app.state), prompt: subjectKey(app.state, false) };
    app.state.linesSelection = { ...selection, [side]: [...chosen].sort((x, y) => x - y) };
    app.update();
  });
  byId("lines-reduce").addEventListener("change", (ev) => {
    app.state.linesReduce = ev.target.value;
    app.update();
  });
  byId("lines-heads").addEventListener("click", (ev) => {
    const swatch = ev.target.closest("[data-head]");
    if (!swatch) return;
    const h = Number(swatch.dataset.head);
    const hidden = new Set(app.state.linesHidden);
    if (hidden.has(h)) hidden.delete(h);
    else hidden.add(h);
    app.state.linesHidden = [...hidden].sort((x, y) => x - y);
    app.update();
  });
}

/**
 * The lines to draw: `{head, query, key, weight}` for every visible head, every weight of a short
 * text (≥ MIN_WEIGHT), the HEAVIEST of each query for a longer one. Chooses among the server's
 * weights; computes none.
 */
export function linesOf(heads, hidden = []) {
  const out = [];
  for (const h of heads) {
    if (hidden.includes(h.head)) continue;
    const T = h.pattern.length;
    h.pattern.forEach((row, query) => {
      let keys = Array.from(row, (weight, key) => ({ key, weight })).filter((e) => e.weight >= MIN_WEIGHT);
      if (T > ALL_KEYS_UP_TO) keys = keys.sort((a, b) => b.weight - a.weight).slice(0, HEAVIEST);
      for (const { key, weight } of keys) out.push({ head: h.head, query, key, weight });
    });
  }
  return out;
}

function showFocus(state) {
  const f = state.linesFocus;
  for (const line of byId("lines-svg").querySelectorAll("line")) {
    const on = !f || Number(line.dataset[f.side === "query" ? "query" : "key"]) === f.index;
    line.style.display = on ? "" : "none";
  }
}

/** An SVG text at (x, y) anchored at `anchor`, of class `cls`, with `data` in its dataset. */
function svgText(x, y, anchor, cls, words, data) {
  const text = document.createElementNS(SVG, "text");
  for (const [k, v] of [["x", x], ["y", y], ["text-anchor", anchor], ["class", cls]]) text.setAttribute(k, String(v));
  Object.assign(text.dataset, data);
  text.textContent = words;
  return text;
}

/** The columns: queries left, keys right; `sides` (stacks.js `stackSides`) heads them "target" and "source". */
function drawSvg(svg, tokens, lines, keys = tokens, sides = null) {
  const rowH = 18;
  const width = Math.min(520, svg.parentElement.clientWidth || 520);
  const top = sides ? 18 : 0; // room for the columns' heads
  const height = Math.max(tokens.length, keys.length) * rowH + 10 + top;
  const colW = Math.min(130, width * 0.3);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  const y = (i) => top + 5 + i * rowH + rowH / 2;
  const parts = [];
  for (const l of lines) {
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("x1", String(colW));
    line.setAttribute("y1", String(y(l.query)));
    line.setAttribute("x2", String(width - colW));
    line.setAttribute("y2", String(y(l.key)));
    line.setAttribute("stroke", QUALITATIVE[l.head % QUALITATIVE.length]);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("stroke-opacity", String(l.weight));
    Object.assign(line.dataset, {
      head: String(l.head),
      query: String(l.query),
      key: String(l.key),
      weight: String(l.weight),
    });
    parts.push(line);
  }
  for (const [side, x, anchor, names] of [
    ["query", colW - 6, "end", tokens],
    ["key", width - colW + 6, "start", keys],
  ]) {
    if (sides) parts.push(svgText(x, 12, anchor, "lines-column", sides[side], { column: side }));
    names.forEach((t, i) => {
      const words = t.length > 14 ? `${t.slice(0, 13)}…` : t;
      parts.push(svgText(x, y(i) + 4, anchor, "lines-token", words, { side, index: String(i) }));
    });
  }
  svg.replaceChildren(...parts);
  svg.classList.add("drawn"); // as drawPlot marks a drawn figure
}

function drawHeads(box, heads, hidden) {
  const sig = JSON.stringify([heads.map((h) => h.head), hidden]);
  if (box.dataset.signature === sig) return;
  box.dataset.signature = sig;
  box.replaceChildren(
    ...heads.map((h) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "lines-head";
      b.dataset.head = String(h.head);
      b.setAttribute("aria-pressed", hidden.includes(h.head) ? "false" : "true");
      b.style.setProperty("--head", QUALITATIVE[h.head % QUALITATIVE.length]);
      b.textContent = `H${h.head}`;
      b.title = `head ${h.head}: click to ${hidden.includes(h.head) ? "show" : "hide"} its lines`;
      return b;
    }),
  );
}

/**
 * The selection's two bar charts: where the selected queries look (over keys), who looks at the selected keys
 * (over queries).
 */
export function selectionFigure({ tokens, from_queries: fromQ, to_keys: toK, reduce }, keys = tokens) {
  const labels = (names) => names.map((t, i) => `${i} ${t}`);
  const rows = [
    fromQ && { x: labels(keys), y: fromQ, name: `where the selected queries look (${reduce})`, color: BLUE },
    toK && { x: labels(tokens), y: toK, name: `who looks at the selected keys (${reduce})`, color: ORANGE },
  ].filter(Boolean);
  const two = keys !== tokens && rows.length === 2; // a cross stack's keys (the source) and queries (the target)
  const data = rows.map((r, i) => ({
    type: "bar",
    x: r.x,
    y: r.y,
    name: r.name,
    marker: { color: r.color },
    xaxis: two && i === 1 ? "x2" : "x",
    yaxis: i === 0 ? "y" : "y2",
    hovertemplate: `%{x}: %{y:.4f}<extra>${r.name}</extra>`,
  }));
  const layout = baseLayout({
    margin: { l: 50, r: 10, t: 40, b: 90 },
    showlegend: true,
    legend: { orientation: "h", y: 1.15 },
  });
  layout.xaxis = { tickangle: -55, fixedrange: true };
  rows.forEach((_, i) => {
    const key = i === 0 ? "yaxis" : "yaxis2";
    layout[key] = {
      domain: rows.length === 2 ? (i === 0 ? [two ? 0.68 : 0.55, 1] : [0, two ? 0.32 : 0.45]) : [0, 1],
      fixedrange: true,
      rangemode: "tozero",
    };
  });
  if (two) layout.xaxis2 = { tickangle: -55, fixedrange: true, anchor: "y2" };
  else if (rows.length === 2) layout.xaxis.anchor = "y2";
  return { data, layout };
}

const TEXT_ONLY_SELECTION =
  "The selection is combined on the text alone (POST /api/selection takes no image), whose positions are not " +
  "those of these lines with the image: remove the image to combine a selection.";

function drawSelection(state) {
  const box = byId("lines-selection");
  const { queries, keys } = selectionOf(state);
  const any = queries.length + keys.length > 0;
  setHidden(box, !any);
  for (const text of byId("lines-svg").querySelectorAll("text[data-side]")) {
    const list = text.dataset.side === "query" ? queries : keys;
    text.classList.toggle("selected", list.includes(Number(text.dataset.index)));
  }
  const reduce = byId("lines-reduce");
  if (reduce.value !== state.linesReduce) reduce.value = state.linesReduce;
  if (!any) return;
  const plot = byId("lines-selection-plot");
  setHidden(plot, !!imageOf(state));
  if (imageOf(state)) {
    // the lines count the image's tokens; the selection's route reads the text alone: its positions would differ
    setText(byId("lines-selection-caption"), TEXT_ONLY_SELECTION);
    return;
  }
  const { response, error } = answerIn(state, selectionQuestion(state));
  const words = error
    ? `Could not combine the selection: ${error}`
    : response
      ? `Head ${response.head} of layer ${response.layer}: ${response.queries.length} ` +
        `quer${response.queries.length === 1 ? "y" : "ies"} (${response.queries.join(", ") || "none"}) and ` +
        `${response.keys.length} key${response.keys.length === 1 ? "" : "s"} ` +
        `(${response.keys.join(", ") || "none"}) selected, their rows and columns ` +
        `${response.reduce === "mean" ? "averaged" : "summed"}. Click a token again to let it go.`
      : "combining…";
  setText(byId("lines-selection-caption"), words);
  // a cross stack's columns are the source's tokens, which the layer's answer (same subject) names
  const layer = answerIn(state, linesQuestion(state)).response;
  const columns = layer && keyTokens(state, layer) !== layer.tokens ? keyTokens(state, layer) : undefined;
  if (response) drawPlot(plot, idOf(response), () => selectionFigure(response, columns), "attnscope-selection");
}

export function draw(state) {
  const q = linesQuestion(state);
  if (!q) return false;
  const { response, error } = answerIn(state, q);
  if (error) setText(byId("lines-caption"), `Could not draw the lines: ${error}`);
  if (!response) return false;
  const layer = response.layers[0];
  const hidden = state.linesHidden;
  drawHeads(byId("lines-heads"), layer.heads, hidden);
  const lines = linesOf(layer.heads, hidden);
  const svg = byId("lines-svg");
  const sig = JSON.stringify([idOf(response), hidden, svg.parentElement.clientWidth]);
  if (svg.dataset.signature !== sig) {
    svg.dataset.signature = sig;
    drawSvg(svg, response.tokens, lines, keyTokens(state, response), stackSides(state, response));
    showFocus(state);
  }
  drawSelection(state);
  const T = response.tokens.length;
  const s = stackSides(state, response);
  setText(
    byId("lines-caption"),
    `Layer ${layer.layer}: each ${s ? `${s.query} token (left, the queries) to the ${s.key} tokens` : "query " +
      "token (left) to the keys"} it attends (right), a colour per head, each line ` +
      `as opaque as its weight` +
      (T > ALL_KEYS_UP_TO
        ? `; ${T} tokens, so each query shows its ${HEAVIEST} heaviest keys (weights from ${MIN_WEIGHT})`
        : ` (weights from ${MIN_WEIGHT})`) +
      quirkWords(state.model, "lines", { layer }) +
      ". Hover a token to keep only its lines; click tokens to select several.",
  );
  return true;
}
