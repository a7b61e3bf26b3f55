// The all-heads grid, beside the chosen head in the head view (and in the notebook widget):
// every layer and head as a max-pooled thumbnail painted on one canvas (gridcanvas.js), its
// caption in words, and the pointer on it: hover names the cell, a click or an arrow key
// opens a head.

import { earlierMasked, maskKinds } from "../draw/captions.js";
import { idOf, setHidden, setText } from "../dom.js";
import { renderLayerRibbon } from "../draw/layerribbon.js";
import { cellAt, layerMask, paintGrid, weightLegend } from "../draw/gridcanvas.js";
import { gridTooltip } from "./gridtip.js";
import { chooseImplicit, implicitGridWords, signedLegend } from "./implicit.js";
import { currentGrid, stepLayer } from "../state.js";
import { bandLabel, imageRun } from "../draw/imageband.js";
import { imageMask } from "../draw/imagemap.js";
import { layersWords } from "../draw/quirks.js";
import { paintSpanBars, spanSwitch } from "./spans.js";
import { keyTokens, stackModel, stackWords } from "../stacks.js";

const SPAN_WORDS =
  " The bar along the foot of each head: the last token's weight on each turn of the conversation, a segment per " +
  "turn in its role's colour (system violet, user blue, assistant amber), as wide as its share.";

/** What the grid shows, in words: how far the thumbnails are downsampled, what a cell is, what quirks change. */
export function gridCaption(grid, aggregate, model = null) {
  const T = grid.tokens.length;
  const { block, size } = grid.thumbnail;
  const n = grid.layers.length;
  const h = grid.layers[0]?.heads.length ?? 0;
  const what =
    block === 1
      ? `${n} layers × ${h} heads, every cell one query and key (${T} tokens, not downsampled).`
      : `${n} layers × ${h} heads, downsampled ${block}× (${T} tokens → ${size} cells a side): each cell is the ` +
        `largest weight in a ${block}×${block} block of queries and keys, so a one-token diagonal stays visible.`;
  const mean = aggregate ? " The last column is the mean over each layer's heads of those cell values." : "";
  const quirks = layersWords(model, "grid", grid.layers);
  return `${what}${gridMaskWords(grid)}${gridImageWords(grid)}${mean}${quirks}${implicitGridWords(grid)}`;
}

/**
 * Where the image is in the grid's tokens and, where the thumbnails are not downsampled (their mask is the exact
 * one), in which layers the mask is not causal inside it ("" without an image).
 */
export function gridImageWords(grid) {
  const run = imageRun(grid.token_kinds);
  if (!run) return "";
  const where = ` The image is tokens ${run.from}–${run.to} (${bandLabel(run)}), of the ${grid.tokens.length}.`;
  if (grid.thumbnail.block !== 1) return where;
  const shapes = grid.layers.map((l) => imageMask(layerMask(l, grid.thumbnail.mask), grid.token_kinds));
  if (shapes.every((s) => s === "none")) return `${where} The mask is off (what-if): every token sees every token.`;
  if (shapes.every((s) => s === "causal")) return `${where} The mask is causal inside the image too.`;
  const both = grid.layers.filter((_, i) => shapes[i] === "both ways" || shapes[i] === "windowed");
  const which =
    both.length === grid.layers.length
      ? "every layer"
      : `layer${both.length > 1 ? "s" : ""} ${both.map((l) => l.layer).join(", ")}`;
  return (
    `${where} Inside the image the mask is not causal in ${which}: each image token also sees the image tokens ` +
    "after it."
  );
}

/** What the grey cells of the grid are, from each layer's thumbnail mask and window ("" when none is grey). */
export function gridMaskWords(grid) {
  const kinds = grid.layers.map((l) => maskKinds(layerMask(l, grid.thumbnail.mask)));
  if (!kinds.some((k) => k.any)) return "";
  const why = [];
  if (kinds.some((k) => k.after)) why.push("keys after the query");
  const windowed = grid.layers.filter((_, i) => kinds[i].before);
  // one clause per kind of limit (a sliding window, chunks), naming its layers
  const clauses = new Map();
  for (const l of windowed) {
    const words = earlierMasked(l) ?? "earlier keys";
    clauses.set(words, [...(clauses.get(words) ?? []), l.layer]);
  }
  for (const [words, layers] of clauses) {
    const where =
      layers.length === grid.layers.length
        ? "in every layer"
        : `in layer${layers.length > 1 ? "s" : ""} ${layers.join(", ")}`;
    why.push(`${where}, keys ${words}`);
  }
  return ` Grey cells are masked (${why.join("; ")}): no key there may be attended, not a zero weight.`;
}

/**
 * Paint the grid of the current answer (again only when it, the chosen head or the width changed); false
 * without one.
 */
export function drawGrid(state, els) {
  const grid = currentGrid(state);
  if (!grid || !grid.thumbnail) return false;
  const width = Math.max(240, els.headsGrid.clientWidth || 560);
  const spans = Boolean(grid.span_mass); // a conversation's answer: the turns' bars may be shown
  const bars = spans && state.gridSpans;
  // a speech model's alignment heads, marked on its cross stack: "these time the words"
  const marked = grid.stack === "cross" ? (state.model?.alignment_heads ?? []) : [];
  const sig = `${idOf(grid)}|${state.layer}|${state.head}|${state.aggregate}|${width}|${bars}|${marked}`;
  if (els.headsGrid.dataset.signature !== sig) {
    const start = performance.now();
    const layout = paintGrid(els.gridCanvas, grid, {
      selected: { layer: state.layer, head: state.head },
      aggregate: state.aggregate,
      width,
      marked,
    });
    if (bars) paintSpanBars(els.gridCanvas, layout, grid);
    els.headsGrid.gridLayout = { grid, layout, aggregate: state.aggregate };
    els.headsGrid.dataset.signature = sig;
    drawLegends(els.headsGrid, grid);
    els.headsGrid.classList.add("drawn");
    performance.measure("attnscope:draw:heads-grid", { start, end: performance.now() });
  }
  const toggle = spanSwitch(); // none in the notebook widget
  if (toggle) {
    setHidden(toggle.closest(".control"), !spans);
    if (toggle.checked !== state.gridSpans) toggle.checked = state.gridSpans;
  }
  const aligned = marked.length ? " Orange corners: the alignment heads (their cross-attention times the words)." : "";
  const words = gridCaption(grid, state.aggregate, state.model) + stackWords(state, grid) + aligned;
  setText(els.gridCaption, words + (bars ? SPAN_WORDS : ""));
  renderLayerRibbon(els.layerRibbon, state.model);
  return true;
}

/** The grid's colour legends under its canvas: the weights', and the implicit rows' diverging one where there are. */
function drawLegends(box, grid) {
  let legends = box.parentElement.querySelector("[data-testid=grid-legends]");
  if (!legends) {
    legends = document.createElement("div");
    legends.className = "grid-legends row";
    legends.dataset.testid = "grid-legends";
    box.after(legends);
  }
  const implicit = grid.layers.some((l) => l.implicit);
  legends.replaceChildren(weightLegend("grid-weight-legend"), ...(implicit ? [signedLegend()] : []));
}

/**
 * The pointer on the grid canvas, for the page and the widget alike: hover shows the cell in
 * the tooltip, a click opens the head, arrow keys step to the next head. `app`: {state, els, selectHead}.
 */
export function installGridPointer({ state, els, selectHead, update }) {
  const hitAt = (ev) => {
    const g = els.headsGrid.gridLayout;
    if (!g) return null;
    const rect = els.gridCanvas.getBoundingClientRect();
    const { geom, size, nRows, nCols } = g.layout;
    const hit = cellAt(geom, size, nRows, nCols, ev.clientX - rect.left, ev.clientY - rect.top);
    return hit ? { ...hit, g } : null;
  };
  const tip = els.gridTip;
  els.gridCanvas.addEventListener("mousemove", (ev) => {
    const hit = hitAt(ev);
    if (!hit) {
      tip.hidden = true;
      return;
    }
    const model = state.model;
    const { grid, aggregate } = hit.g;
    tip.textContent = gridTooltip({ grid, hit, aggregate, model, keys: keyTokens(state, grid) }).join("\n");
    tip.hidden = false;
    const box = els.headsGrid.getBoundingClientRect();
    const x = ev.clientX - box.left + 14;
    tip.style.left = `${Math.max(0, Math.min(x, box.width - tip.offsetWidth - 4))}px`;
    tip.style.top = `${ev.clientY - box.top + 14}px`;
  });
  els.gridCanvas.addEventListener("mouseleave", () => (tip.hidden = true));
  els.gridCanvas.addEventListener("click", (ev) => {
    const hit = hitAt(ev);
    if (!hit) return;
    const head = hit.g.layout.cols[hit.col];
    const row = hit.g.grid.layers[hit.row];
    if (head >= 0 && row.implicit && update) {
      // an implicit head opens under the grid (head/implicit.js), not in the softmax head's views
      chooseImplicit(state, `${row.layer}:${head}`);
      update();
    } else if (head >= 0 && !row.implicit) selectHead(row.layer, head);
  });
  els.gridCanvas.addEventListener("keydown", (ev) => {
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    const move = moves[ev.key];
    const m = stackModel(state); // the chosen stack's layers and heads
    if (!move || !m) return;
    ev.preventDefault();
    const clamp = (v, n) => Math.min(n - 1, Math.max(0, v));
    selectHead(stepLayer(m, state.layer, move[0]), clamp(state.head + move[1], m.n_head));
  });
}
