// The head view ("Head & grid"): the chosen head's attention pattern as a heatmap (exact,
// or max-pooled for a long text with the exact cells of a zoomed block), the all-heads grid
// beside it (head/grid.js), and the pointer on the heatmap: a click on a row chooses that
// query, a dragged box zooms in on a block of tokens (zoom.js). The notebook widget draws this view.

import { hatchMeaning, maskKinds, scoresFormula } from "../draw/captions.js";
import { drawPlot, idOf, setHidden, setText } from "../dom.js";
import { drawCanvasPlot } from "../draw/canvashover.js";
import { headHeatmapFigure } from "../draw/heatmap.js";
import {
  cellHover,
  colorbarTitle,
  headNumbers,
  partPanels,
  partsFigure,
  quirkWords,
  rowStrips,
  signedLayer,
} from "../draw/quirks.js";
import { bandWords, tokenBands, withBands } from "../draw/quirkbands.js";
import { headData, pooledHeatmapFigure, regionFits, zoomWords } from "../draw/pooled.js";
import { currentDetail, currentGrid, selectedPosition } from "../state.js";
import { answerIn, question } from "../answers.js";
import { subject } from "../subject.js";
import { drawGrid } from "../head/grid.js";
import { drawImplicit, implicitQuestion, installImplicit } from "../head/implicit.js";
import { isUndecoded } from "../wire.js";
import { lazyRows } from "../draw/figures.js";
import { installZoom } from "../draw/zoom.js";
import { HEATMAP_DEFAULTS } from "../draw/headframe.js";
import { bandLabel, imageMaskWords, imageRun } from "../draw/imageband.js";
import { cellsParam, installKnockout, knockoutQuestion, knockoutState, parseCells, toggleCell }
  from "../head/knockout.js";
import { cellMarks, drawCellTools, parseWhy, whyParam, whyQuestion, whyState } from "../head/why.js";
import { drawHeadWrites, headWritesQuestion } from "../head/writes.js";
import { drawSpanBox, spanSwitch } from "../head/spans.js";
import { STACK_LABELS, keyTokens, stackAxes, stackInfo, stackWords } from "../stacks.js";

export const id = "head";
export const label = "Head & grid";
/** Its slice of the page state: the grid's mean column, a long text's zoomed block and its exact cells. */
export const state = {
  aggregate: false, // show the per-layer mean of the heads in the grid
  // long texts (issue 16): the zoomed token block ({q0, q1, k0, k1}, null = the whole head; draw/zoom.js) and
  // the answer holding the exact cells of that block (its `focus.region`, answers.js)
  zoom: null,
  region: null,
  gridSpans: false, // a conversation's grid: each head's shares of the turns as a bar (head/spans.js)
  // what a click on a cell does: "row" chooses its query, "knockout" knocks it out, "why" splits its score
  cellMode: "row",
  ...knockoutState,
  ...whyState,
  headWrites: null, // POST /api/lens (Jacobian, heads) under the heatmap: {key, response, error} (head/writes.js)
  implicit: null, // POST /api/attention of a hybrid's chosen linear layer, under the grid (head/implicit.js)
  implicitHead: null, // the implicit head drawn there, "layer:head" (null: the first)
};
/** The answers a new model makes stale: the knockout's, the split's, the head's writes and the exact cells. */
export const answers = ["knockoutAnswer", "qk", "headWrites", "region", "implicit"];
const CELL_MODES = ["row", "knockout", "why"];
/** `mean=1`: the grid's mean column; `click=`, `ko=`, `koall=1`, `why=`: the cells' mode, knockout and split. */
export const link = {
  read(params, out) {
    if (params.has("mean")) out.aggregate = params.get("mean") === "1";
    if (CELL_MODES.includes(params.get("click"))) out.cellMode = params.get("click");
    if (params.has("ko")) out.knockout = parseCells(params.get("ko"));
    if (params.has("koall")) out.knockoutAll = params.get("koall") === "1";
    if (params.has("why")) out.whyCell = parseWhy(params.get("why"));
  },
  write(s, params) {
    if (s.aggregate) params.set("mean", "1");
    if (s.cellMode !== "row") params.set("click", s.cellMode);
    if (s.knockout.length) params.set("ko", cellsParam(s.knockout));
    if (s.knockoutAll) params.set("koall", "1");
    if (s.whyCell) params.set("why", whyParam(s.whyCell));
  },
};
/** The grid answer (its pattern draws the head at once); the chosen head's answer comes with every text. */
export const needs = ["grid"];

/** The zoomed block while it lies inside `T` queries and `S` keys (a cross map's: the source's tokens), else null. */
const zoomIn = (state, T, S = T) => (state.zoom && state.zoom.q1 <= T && state.zoom.k1 <= S ? state.zoom : null);

/** The exact cells of a long text's zoomed block (`focus.region`), once its pooled head is in: its question. */
function regionQuestion(state) {
  const d = currentDetail(state);
  const zoom = d?.focus?.thumbnail?.block > 1 ? zoomIn(state, d.tokens.length, keyTokens(state, d).length) : null;
  if (!zoom || !regionFits(state, zoom)) return null;
  const url = "/api/attention";
  const include = ["pattern", "attn_scores_raw", "attn_scores"];
  const focus = { layer: state.layer, head: state.head, include, region: [zoom.q0, zoom.q1, zoom.k0, zoom.k1] };
  const body = { ...subject(state, url), layers: [], include: [], focus, encoding: "b64", precision: "f2", top_k: 0 };
  return question("region", url, body);
}

/** What the view asks for besides the grid and the chosen head (the data step asks it, answers.js). */
export const need = (state) => [knockoutQuestion(state), whyQuestion(state), headWritesQuestion(state),
  regionQuestion(state), implicitQuestion(state)];

/**
 * What the chosen head shows now: the chosen-head answer when it is current, else the head's
 * pattern from the grid answer (no scores in the hover until the detail arrives), else null.
 */
export function chosenHead(state) {
  const detail = currentDetail(state);
  if (detail?.focus?.thumbnail) {
    // asked through `focus` (a long text): max-pooled cells, or exact ones where block is 1
    const head = headData(detail); // the head's fields by the server's names
    if (head.pattern)
      return { response: detail, layer: head.layer, mask: head.mask, head, full: true, block: head.block };
  } else if (detail) {
    const h = detail.layers?.[0]?.heads?.[0];
    if (h) return { response: detail, layer: detail.layers[0], mask: detail.mask, head: h, full: true };
  }
  const grid = currentGrid(state);
  if (grid) {
    const layer = grid.layers.find((l) => l.layer === state.layer);
    const head = layer?.heads.find((h) => h.head === state.head);
    // a plain-JSON grid holds full patterns; a layer's own mask where a sliding window makes it differ
    if (head?.pattern) return { response: grid, layer, mask: layer.mask ?? grid.mask, head, full: false };
  }
  return null;
}

/**
 * `head[key]`, a matrix of `n` rows that only the hover reads (an exact head's scores), as rows made when first
 * read: a field still undecoded (wire.js) is decoded at the first hovered row, not by the redraw.
 */
const rowsWhenRead = (head, key, n) =>
  isUndecoded(head, key) ? lazyRows(n, (i) => head[key][i]) : (head[key] ?? null);

/** The head view's words on hatching: what it means here, hidden when nothing is masked (`hatch` null). */
function renderHeadCaption(els, hatch) {
  const box = document.getElementById("head-hatch");
  if (!box) return;
  if (box.hidden !== !hatch) box.hidden = !hatch;
  if (hatch) setText(document.getElementById("head-hatch-text"), hatch);
}

/**
 * The heatmap of one matrix of the chosen head: exact, or max-pooled where `block` > 1, with the
 * same arguments either way. `chosen`: {response, layer, mask, head, block} (chosenHead's shape);
 * `extra`: further arguments of headHeatmapFigure / pooledHeatmapFigure.
 */
export function headFigure(state, { response, layer, mask, head, block = 1 }, extra = {}) {
  const args = {
    tokens: response.tokens,
    keys: keyTokens(state, response), // cross-attention: the source's tokens on the key axis
    axes: stackAxes(state, response),
    pattern: head.pattern,
    mask,
    raw: block > 1 ? head.attn_scores_raw : rowsWhenRead(head, "attn_scores_raw", response.tokens.length),
    scaled: block > 1 ? head.attn_scores : rowsWhenRead(head, "attn_scores", response.tokens.length),
    scaledLabel: scoresFormula(layer),
    window: layer.window,
    chunk: layer.chunk ?? null,
    layer: state.layer,
    head: state.head,
    // the head's quirks (quirks.js, from /api/model `fields`): per-query strips and its parts in the hover,
    // exact cells only; a signed map (pooled: |pattern| in the cells, the sign in a zoomed cell's hover)
    rows: block > 1 ? [] : rowStrips(state.model, head),
    hover: block > 1 ? null : cellHover(state.model, layer, head, { raw: extra.raw !== null, head: state.head }),
    signed: signedLayer(state.model, layer),
    colorbar: colorbarTitle(state.model, layer, state.head),
    ...extra,
  };
  return block > 1 ? pooledHeatmapFigure({ ...args, block }) : headHeatmapFigure(args);
}

/** Draw the chosen head's heatmap and the grid; `{head, grid}` say which of them had current data. */
export function drawHeadView(state, els) {
  const chosen = chosenHead(state);
  const zoomNote = document.getElementById("head-zoom");
  const hatch = document.getElementById("head-hatch");
  if (!chosen) return { head: false, grid: drawGrid(state, els) };
  const pooled = (chosen.block ?? 1) > 1;
  const S = keyTokens(state, chosen.response).length; // the keys: a cross map's are the source's tokens
  const zoom = zoomIn(state, chosen.response.tokens.length, S); // a zoom past the end of a shorter text is no zoom
  const zoomed = !pooled && zoom;
  setHidden(zoomNote, !pooled && !zoomed);
  const { response, layer, mask, head: h, full, block } = chosen;
  const T = response.tokens.length;
  const p = selectedPosition(state, T);
  // a long text: the pooled cells, and the exact cells of the zoomed block once they are in
  const region = pooled ? answerIn(state, regionQuestion(state)).response?.focus.region ?? null : null;
  const extra = pooled
    ? { position: p, region, view: zoom }
    : { position: p, view: zoom, ...(full ? {} : { raw: null, scaled: null }) };
  const marks = cellMarks(state, T);
  const sig = (pooled ? `|${idOf(region)}` : "") + `|${JSON.stringify(zoom)}|${JSON.stringify(marks)}`;
  const band = {
    tokens: response.tokens,
    bands: tokenBands(state.model, response),
    expanded: !!state.imageExpanded,
    maxTicks: HEATMAP_DEFAULTS.maxTicks,
  };
  drawCanvasPlot(
    els.headHeatmap,
    `${idOf(response)}|${state.layer}|${state.head}|${p}${sig}|${band.expanded}`,
    () => withShapes(withBands(headFigure(state, chosen, extra), band), marks),
    `attnscope-L${state.layer}H${state.head}`,
  );
  // the layer's quirk numbers beside the head (quirks.js: each quirk's label and number)
  const numbers = headNumbers(state.model, layer, state.head);
  const stack = stackWords(state, response) ? STACK_LABELS[stackInfo(state).name] : null; // several stacks: its name
  setText(els.headTitle, [stack, `Layer ${state.layer} · head ${state.head}`, ...numbers].filter(Boolean).join(" · "));
  const rows = document.getElementById("head-rows");
  if (rows)
    setText(
      rows,
      rowWords(state.model, layer, state.head) +
        stackWords(state, response) +
        (pooled ? quirkWords(state.model, "pooled", { layer }) : "") +
        imageWords(state, chosen, pooled) +
        bandWords(band.bands),
    );
  drawParts(state, chosen, pooled);
  const meaning = hatchMeaning(maskKinds(mask), layer.window, layer.chunk);
  // masked blocks are solid grey in a pooled head, not hatched (pooled.js)
  renderHeadCaption(els, pooled ? meaning?.replace("hatched", "grey") : meaning);
  hatch?.classList.toggle("solid", pooled);
  const cells = [h.pattern.length, h.pattern[0]?.length]; // the pooled picture's rows and columns
  if (pooled) setText(zoomNote, zoomWords({ ...state, zoom }, T, block, cells[0], region, S, cells[1]));
  else if (zoomed) setText(zoomNote, exactZoomWords(zoom));
  drawCellTools(state);
  drawHeadWrites(state);
  drawSpanBox(state, currentGrid(state));
  drawImplicit(state);
  return { head: true, grid: drawGrid(state, els) };
}

/** The words under an exact head zoomed in on a block of tokens. */
const exactZoomWords = (z) =>
  `Zoomed to queries ${z.q0}–${z.q1 - 1} × keys ${z.k0}–${z.k1 - 1}. Double-click to see the whole head.`;

/**
 * The head's words on the image (none without one): where its run of tokens is, and, from the answer's exact mask,
 * whether the mask is causal inside it (a pooled head's mask is block maxima: not read there).
 */
function imageWords(state, { response, mask }, pooled) {
  const run = imageRun(response.token_kinds);
  if (!run) return "";
  const where =
    ` The image is tokens ${run.from}–${run.to}, one band on the axes (${bandLabel(run)}; ` +
    `${state.imageExpanded ? "fold it" : "show each"} with the band in the token strip).`;
  return where + (pooled ? "" : ` ${imageMaskWords(mask, response.token_kinds, state.layer)}`);
}

const withShapes = (fig, marks) => {
  fig.layout.shapes = [...(fig.layout.shapes ?? []), ...marks];
  return fig;
};

/** The head's parts (quirks.js `partPanels`) under its map; hidden for a head without, and for a pooled one. */
function drawParts(state, { response, layer, mask, head }, pooled) {
  const box = document.getElementById("head-parts");
  if (!box) return;
  const panels = pooled ? [] : partPanels(state.model, layer, head, state.head);
  const show = panels.length > 0;
  if (box.hidden !== !show) box.hidden = !show;
  if (!show) return;
  drawPlot(
    box,
    `${idOf(response)}|parts|${state.layer}|${state.head}|${!!state.imageExpanded}`,
    () => {
      const fig = partsFigure({ tokens: response.tokens, panels, mask, layer: state.layer, head: state.head });
      const pairs = panels.map((_, n) => [n ? `x${n + 1}` : "x", "y"]);
      const bands = tokenBands(state.model, response);
      return withBands(fig, { tokens: response.tokens, bands, expanded: !!state.imageExpanded, maxTicks: 20, pairs });
    },
    `attnscope-L${state.layer}H${state.head}-parts`,
  );
}

/** What a row of the heatmap holds: 1 unit of attention over the keys, or what the layer's quirks say it holds. */
export const rowWords = (model, layer, head = null) =>
  quirkWords(model, "rows", { layer, head }) ||
  "Each row is a query token; it spreads 1 unit of attention over the keys.";

/** Draw the view: the chosen head and the grid; `{head, grid}` say which of them had current data. */
export const draw = drawHeadView;

/**
 * A click anywhere on the heatmap, the hatched (masked) cells too: the cell comes from the axes
 * under the pointer. By the mode picker it chooses that query
 * (its row), knocks the cell out (a shift-click: the box from the last clicked cell), or splits its
 * score. `app`: {els, selectPosition, update, state}.
 */
export function install(app) {
  const { els, state } = app;
  const zoom = installZoom(app);
  els.headHeatmap.addEventListener("click", (ev) => {
    if (zoom.endedDrag()) return; // the click that ends a dragged box chooses no row
    const cell = cellAt(els.headHeatmap, ev);
    if (!cell) return;
    if (state.cellMode === "row") return app.selectPosition(cell.query);
    if (cell.key === null) return;
    if (state.cellMode === "knockout") toggleCell(state, cell.query, cell.key, ev.shiftKey);
    else state.whyCell = cell;
    app.update();
  });
  for (const input of document.querySelectorAll("input[name=cell-mode]"))
    input.addEventListener("change", () => {
      if (!input.checked) return;
      state.cellMode = input.value;
      app.update();
    });
  installKnockout(app);
  installImplicit(app);
  spanSwitch()?.addEventListener("change", (ev) => {
    state.gridSpans = ev.target.checked;
    app.update();
  });
}

/** The cell {query, key} of the heatmap `gd` under a mouse event (key null off the keys), or null off its rows. */
function cellAt(gd, ev) {
  const ya = gd.plotAxes?.yaxis;
  const xa = gd.plotAxes?.xaxis;
  // a long text's heatmap has fewer cells than tokens; its axes count tokens (layout.meta)
  const n = gd.layout?.meta?.tokens ?? gd.data?.[0]?.z?.length ?? 0;
  if (!ya || !xa || !n) return null;
  const box = gd.getBoundingClientRect();
  const x = ev.clientX - box.left - xa.offset;
  const y = ev.clientY - box.top - ya.offset;
  const paper = gd.plotGeometry.paper;
  const px = ev.clientX - box.left;
  // the rows reach over the paper: a quirk's strip right of the keys (quirks.js) is its row, but no cell
  if (y < 0 || y > ya.length || px < paper.x || px > paper.x + paper.w) return null;
  const query = Math.round(ya.p2d(y));
  const key = x >= 0 && x <= xa.length ? Math.round(xa.p2d(x)) : null;
  const ok = (i, size = n) => Number.isInteger(i) && i >= 0 && i < size;
  return ok(query) ? { query, key: ok(key, gd.layout?.meta?.keys ?? n) ? key : null } : null;
}
