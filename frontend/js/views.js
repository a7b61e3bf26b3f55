// The render step: reads the state, builds figures with figures.js and hands them to
// Plotly.react; fills the few HTML parts (tokens, tables, predictions, banners).
//
// Only the visible view is drawn. Each figure remembers a signature of what it shows, so a
// render that changes nothing for a figure costs nothing.

import {
  entropyFigure,
  fmtSig,
  headHeatmapFigure,
  maskStepsFigure,
  rolesFigure,
  statsRows,
  varianceFigure,
} from "./figures.js";
import { countWords, isBlank } from "./api.js";
import {
  compareLeftCaption,
  divisorShort,
  divisorWords,
  entropyCaption,
  hatchMeaning,
  maskKinds,
  num,
  pipelineNotes,
  ratioWords,
  scoresFormula,
  softcapWords,
  unscaled,
  unscaledFormula,
} from "./captions.js";
import { layerMask, paintGrid } from "./gridcanvas.js";
import { ROLE_INFO, VIEWS, VIEW_LABELS, currentDetail, currentGrid, gridKey } from "./state.js";
import { blockSpan, currentRegion, headData, pooledHeatmapFigure, spanWords, zoomWords } from "./pooled.js";
import { VIRTUAL_FROM, leaveVirtual, renderVirtualStrip } from "./tokenstrip.js";


/** Set an element's text only when it changes: each write would invalidate the page's layout. */
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/** Set an attribute only when it changes. */
function setAttr(el, name, value) {
  if (el.getAttribute(name) !== value) el.setAttribute(name, value);
}

// Stable ids for API answers, so a figure can tell whether its data changed.
const ids = new WeakMap();
let nextId = 1;
export function idOf(obj) {
  if (!obj) return 0;
  if (!ids.has(obj)) ids.set(obj, nextId++);
  return ids.get(obj);
}

function plotConfig(filename) {
  return {
    responsive: true,
    displaylogo: false,
    showSendToCloud: false,
    showEditInChartStudio: false,
    displayModeBar: "hover",
    modeBarButtonsToRemove: [
      "select2d",
      "lasso2d",
      "autoScale2d",
      "toggleSpikelines",
      "hoverClosestCartesian",
      "hoverCompareCartesian",
      "sendChartToCloud",
    ],
    toImageButtonOptions: { format: "png", filename, scale: 2 },
    // for papers: the same figure as vector graphics (Plotly draws it offline, in the page)
    modeBarButtonsToAdd: [
      {
        name: "Download as SVG",
        icon: window.Plotly?.Icons?.camera,
        click: (gd) => window.Plotly.downloadImage(gd, { format: "svg", filename, width: gd.clientWidth, height: gd.clientHeight }),
      },
    ],
  };
}

/** Plotly.react `el` with `build()` unless it already shows `signature`. */
function draw(el, signature, build, filename) {
  const Plotly = window.Plotly;
  if (!Plotly || el.dataset.signature === signature) return false;
  const start = performance.now();
  const fig = build();
  const built = performance.now();
  Plotly.react(el, fig.data, fig.layout, plotConfig(filename));
  performance.measure(`attnscope:build:${el.id}`, { start, end: built });
  performance.measure(`attnscope:draw:${el.id}`, { start, end: performance.now() });
  el.dataset.signature = signature;
  el.classList.add("drawn");
  return true;
}

/** The model's head size, as GET /api/model or an answer's `model` says (null before either). */
function headDim(state) {
  return state.model?.head_dim ?? currentGrid(state)?.model?.head_dim ?? currentDetail(state)?.model?.head_dim ?? null;
}

/** The model's own divisor (GET /api/model) as the layer-like object captions.js reads. */
const modelDivisor = (m) => ({ divisor: m.divisor, divisor_rule: m.divisor_rule, softcap: m.softcap });

/**
 * What the chosen head shows now: the chosen-head answer when it is current, else the head's
 * pattern from the grid answer (no scores in the hover until the detail arrives), else null.
 */
export function chosenHead(state) {
  const detail = currentDetail(state);
  if (detail?.focus?.thumbnail) {
    // asked through `focus` (a long text): max-pooled cells, or exact ones where block is 1
    const d = headData(detail);
    const head = { pattern: d.pattern, attn_scores_raw: d.raw, attn_scores: d.scores, stats: d.stats };
    if (d.pattern) return { response: detail, layer: d.layer, mask: d.mask, head, full: true, block: d.block };
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

/** Tokens of the newest answer for the current text, if any. */
function tokensNow(state) {
  return currentGrid(state)?.tokens ?? currentDetail(state)?.tokens ?? null;
}

export function selectedPosition(state, T) {
  if (state.position === null || state.position >= T) return T - 1;
  return state.position;
}

// ---------------------------------------------------------------- HTML parts

export function renderModel(state, els) {
  const m = state.model;
  if (!m) return;
  const params = m.parameters >= 1e6 ? `${(m.parameters / 1e6).toFixed(2)} M` : `${Math.round(m.parameters / 1e3)} k`;
  const sig = JSON.stringify([m.name, m.parameters, m.device, m.dtype, m.family]);
  if (els.modelBadge.dataset.signature === sig) return;
  els.modelBadge.dataset.signature = sig;
  els.modelBadge.replaceChildren();
  const gqa = m.n_kv_head && m.n_kv_head < m.n_head ? ` (${m.n_kv_head} key/value heads, shared)` : "";
  const divisor = `scores ÷ ${divisorWords(modelDivisor(m), m.head_dim)}`;
  const windows = (m.sliding_window ?? []).filter((w) => w !== null);
  const window = windows.length
    ? `sliding window ${[...new Set(windows)].join(", ")} tokens${windows.length < m.n_layer ? ` in ${windows.length} of ${m.n_layer} layers` : ""}`
    : null;
  const parts = [
    ["name", m.name],
    ["family", m.family && m.family !== "attnscope" ? m.family : null],
    ["size", `${params} parameters`],
    ["format", m.source_format === "gguf" ? `GGUF ${m.quantization ?? ""}`.trim() : null], // e.g. "GGUF Q4_K_M"
    ["shape", `${m.n_layer} layers × ${m.n_head} heads${gqa} · d_k ${m.head_dim}`],
    ["divisor", m.softcap ? `${divisor}, softcap ${softcapWords(m.softcap)}` : divisor],
    ["window", window],
    ["context", `context ${m.block_size}${m.positions ? ` · ${m.positions} positions` : ""}`],
    ["device", m.dtype && m.dtype !== "float32" ? `${m.device} · ${m.dtype}` : m.device],
  ];
  // the scaling switch names the model's own divisor
  const label = document.querySelector("label[for=scale-toggle]");
  const name = divisorShort(modelDivisor(m));
  if (label && name !== "√d_k") label.textContent = `Scale by ${name}`;
  label?.closest(".control")?.setAttribute("title", `Off: scores are not divided by ${divisorWords(modelDivisor(m), m.head_dim)} (what-if)`);
  for (const [cls, text] of parts) {
    if (!text) continue;
    const span = document.createElement("span");
    span.className = `badge-${cls}`;
    span.textContent = text;
    els.modelBadge.append(span);
  }
  els.modelBadge.title = `checkpoint: ${m.checkpoint ?? "?"}`;
}

function renderSelects(state, els) {
  const m = state.model;
  const nLayer = m?.n_layer ?? 4;
  const nHead = m?.n_head ?? 4;
  const fill = (select, n, prefix, value) => {
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
  };
  fill(els.layerSelect, nLayer, "Layer", state.layer);
  fill(els.headSelect, nHead, "Head", state.head);
  if (els.causalToggle.checked !== state.causal) els.causalToggle.checked = state.causal;
  if (els.scaleToggle.checked !== state.scaled) els.scaleToggle.checked = state.scaled;
  if (els.aggregateToggle.checked !== state.aggregate) els.aggregateToggle.checked = state.aggregate;
  if (Number(els.temperature.value) !== state.temperature) els.temperature.value = String(state.temperature);
  setText(els.temperatureValue, state.temperature.toFixed(2));
  if (els.roleSelect.value !== state.role && [...els.roleSelect.options].some((o) => o.value === state.role)) {
    els.roleSelect.value = state.role;
  }
}

export function renderTokens(state, els) {
  const response = currentGrid(state) ?? currentDetail(state);
  if (!response) {
    // a text the server refused, no answer yet after an error, or no text: no chips of an older
    // text; the counter says the server's own count of a refused text (the message's number)
    if (!state.error && !isBlank(state.text)) return;
    if (els.tokens.dataset.signature !== "none") {
      els.tokens.dataset.signature = "none";
      leaveVirtual(els.tokens);
      els.tokens.replaceChildren();
    }
    setText(els.tokenCount, countWords(state.refusal));
    return;
  }
  const { tokens, token_ids: tokenIds, offsets } = response;
  const sig = String(idOf(response));
  if (tokens.length > VIRTUAL_FROM) {
    // a long text: only the chips in view are in the DOM (tokenstrip.js)
    let chars = null;
    const title = (i) => {
      chars ??= codePoints(state.text);
      const [start, end] = offsets?.[i] ?? [null, null];
      const source = start === null ? "" : chars.slice(start, end).join("");
      return `position ${i} · id ${tokenIds[i]} · characters ${start}–${end}: ${JSON.stringify(source)}`;
    };
    const selected = selectedPosition(state, tokens.length);
    renderVirtualStrip(els.tokens, { key: sig, tokens, ids: tokenIds, title, selected, reveal: state.position !== null });
    els.tokens.dataset.signature = sig;
    setText(els.tokenCount, `${tokens.length} tokens`);
    return;
  }
  if (els.tokens.virtual) {
    leaveVirtual(els.tokens);
    els.tokens.dataset.signature = "";
  }
  if (els.tokens.dataset.signature !== sig) {
    els.tokens.dataset.signature = sig;
    const frag = document.createDocumentFragment();
    tokens.forEach((tok, i) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "chip";
      b.dataset.index = String(i);
      const [start, end] = offsets?.[i] ?? [null, null];
      // offsets count characters (code points), as Python does; JS strings count UTF-16 units
      const source = start === null ? "" : codePoints(state.text).slice(start, end).join("");
      b.title = `position ${i} · id ${tokenIds[i]} · characters ${start}–${end}: ${JSON.stringify(source)}`;
      b.setAttribute("aria-label", `token ${i}: ${tok}, id ${tokenIds[i]}`);
      const t = document.createElement("span");
      t.className = "chip-text";
      t.textContent = tok;
      const id = document.createElement("span");
      id.className = "chip-id";
      id.textContent = String(tokenIds[i]);
      b.append(t, id);
      frag.append(b);
    });
    els.tokens.replaceChildren(frag);
    els.tokenCount.textContent = `${tokens.length} token${tokens.length === 1 ? "" : "s"}`;
  }
  const p = selectedPosition(state, tokens.length);
  for (const chip of els.tokens.children) {
    const on = Number(chip.dataset.index) === p;
    chip.classList.toggle("selected", on);
    setAttr(chip, "aria-pressed", on ? "true" : "false");
  }
}

/** A string as its characters (code points): offsets from the API index this, not UTF-16 units. */
export const codePoints = (text) => Array.from(text);

export function renderBanners(state, els) {
  setText(els.errorText, state.error ?? "");
  if (els.errorBanner.hidden !== !state.error) els.errorBanner.hidden = !state.error;
  const notes = [];
  const m = state.model;
  if (!state.causal) {
    const windowed = (m?.sliding_window ?? []).some((w) => w !== null);
    notes.push(
      `Causal mask removed: every token also sees the tokens after it${windowed ? ", and every earlier one (no sliding window)" : ""}, like an encoder. ` +
        "The model was trained with the mask, so these patterns and predictions are not what it computes.",
    );
  }
  if (!state.scaled) {
    const by = m ? divisorWords(modelDivisor(m), m.head_dim) : "the model's divisor";
    const times = m ? `${num(m.divisor)} times` : "that many times";
    notes.push(
      `Scaling removed: scores are not divided by ${by} before softmax. The model was trained with the ` +
        `scaling, so the softmax sees scores ${times} too large${m?.softcap ? " (before its softcap)" : ""} and turns peaky.`,
    );
  }
  if (state.view === "roles" && notes.length) {
    // role scores are measured once, on the trained model: the switches do not change them
    notes.splice(
      0,
      notes.length,
      "Head roles are measured on the trained model (causal mask on, trained scaling); the what-if switches do not change these scores.",
    );
    document.body.classList.remove("what-if");
    if (els.whatifBanner.hidden) els.whatifBanner.hidden = false;
    const sig = notes.join("|");
    if (els.whatifText.dataset.signature !== sig) {
      els.whatifText.dataset.signature = sig;
      const p = document.createElement("p");
      p.textContent = notes[0];
      els.whatifText.replaceChildren(p);
    }
    return;
  }
  if (els.whatifBanner.hidden !== (notes.length === 0)) els.whatifBanner.hidden = notes.length === 0;
  const sig = notes.join("|");
  if (els.whatifText.dataset.signature !== sig) {
    els.whatifText.dataset.signature = sig;
    els.whatifText.replaceChildren(
      ...notes.map((n) => {
        const p = document.createElement("p");
        p.textContent = n;
        return p;
      }),
    );
  }
  document.body.classList.toggle("what-if", notes.length > 0);
}

function renderStatus(state, els) {
  const busy = state.pending.grid || state.pending.detail;
  els.status.classList.toggle("busy", busy);
  const grid = currentGrid(state);
  if (busy) setText(els.statusText, "updating…");
  else if (grid) setText(els.statusText, `server ${Math.round(grid.timing_ms ?? 0)} ms`);
  else setText(els.statusText, "");
  // dim what no longer matches the text while a new answer is on its way or failed
  els.views.classList.toggle("stale", !grid && !!state.grid);
}

function renderStatsTable(state, els, head, layer, T) {
  const stats = head?.stats;
  if (!stats) return;
  const rows = statsRows(stats, { layer, headDim: headDim(state), T });
  const sig = JSON.stringify(rows);
  if (els.statsTable.dataset.signature === sig) return;
  els.statsTable.dataset.signature = sig;
  const body = document.createElement("tbody");
  for (const row of rows) {
    const tr = document.createElement("tr");
    tr.dataset.stat = row.key;
    if (row.highlight) tr.className = "highlight";
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = row.label;
    const v = document.createElement("td");
    v.className = "num";
    v.textContent = row.value;
    const u = document.createElement("td");
    u.className = "num";
    u.textContent = row.unscaled ?? "";
    const note = document.createElement("td");
    note.className = "note";
    note.textContent = row.note;
    tr.append(th, v, u, note);
    body.append(tr);
  }
  els.statsTable.querySelector("tbody").replaceWith(body);
  setText(els.statsCaption, `Layer ${state.layer} · head ${state.head}`);
}

export function renderPredictions(state, els) {
  const d = state.detail;
  const fresh = d && d.textKey === gridKey(state);
  if (!fresh) return;
  const { tokens, predictions } = d.response;
  if (!predictions || !tokens) return;
  const T = tokens.length;
  const p = selectedPosition(state, T);
  const sig = `${idOf(d.response)}|${p}`;
  els.predictions.classList.toggle("stale", d.temperature !== state.temperature);
  if (els.predictionsList.dataset.signature === sig) return;
  els.predictionsList.dataset.signature = sig;
  const actual = p + 1 < T ? tokens[p + 1] : null;
  els.predictionsTitle.replaceChildren();
  const lead = document.createTextNode("After ");
  const tok = document.createElement("code");
  tok.textContent = tokens[p];
  const where = document.createTextNode(` (position ${p})`);
  els.predictionsTitle.append(lead, tok, where);
  const rows = predictions[p] ?? [];
  const list = document.createDocumentFragment();
  rows.forEach((pred, rank) => {
    const li = document.createElement("li");
    if (actual !== null && pred.token === actual) li.classList.add("actual");
    const name = document.createElement("span");
    name.className = "pred-token";
    name.textContent = pred.token;
    const bar = document.createElement("span");
    bar.className = "pred-bar";
    const fill = document.createElement("span");
    // the whole track is probability 1: a bar is as long as its probability, not scaled to the top guess
    fill.style.width = `${100 * pred.prob}%`;
    bar.append(fill);
    const pct = document.createElement("span");
    pct.className = "pred-prob";
    pct.textContent = pred.prob < 0.0005 ? "<0.1%" : `${(100 * pred.prob).toFixed(pred.prob < 0.1 ? 1 : 0)}%`;
    li.title = `#${rank + 1}: ${pred.token} (id ${pred.id}) p = ${pred.prob.toFixed(4)}`;
    li.append(name, bar, pct);
    list.append(li);
  });
  els.predictionsList.replaceChildren(list);
  if (actual === null) {
    els.predictionsActual.textContent = "This is the last token: the model's guess for what comes next.";
  } else {
    const rank = rows.findIndex((r) => r.token === actual);
    els.predictionsActual.textContent =
      rank >= 0
        ? `The text continues with “${actual}”, the model's #${rank + 1} guess.`
        : `The text continues with “${actual}”, not in the model's top ${rows.length}.`;
  }
}

// ---------------------------------------------------------------- figures per view

/** The head view's words on hatching: what it means here, hidden when nothing is masked (`hatch` null). */
function renderHeadCaption(els, hatch) {
  const box = document.getElementById("head-hatch");
  if (!box) return;
  if (box.hidden !== !hatch) box.hidden = !hatch;
  if (hatch) setText(document.getElementById("head-hatch-text"), hatch);
}

/** What the grid shows, in words: how far the thumbnails are downsampled, what a cell is. */
export function gridCaption(grid, aggregate) {
  const T = grid.tokens.length;
  const { block, size } = grid.thumbnail;
  const n = grid.layers.length;
  const h = grid.layers[0]?.heads.length ?? 0;
  const what =
    block === 1
      ? `${n} layers × ${h} heads, every cell one query and key (${T} tokens, not downsampled).`
      : `${n} layers × ${h} heads, downsampled ${block}× (${T} tokens → ${size} cells a side): each cell is the largest weight in a ${block}×${block} block of queries and keys, so a one-token diagonal stays visible.`;
  const mean = aggregate ? " The last column is the mean over each layer's heads of those cell values." : "";
  return `${what}${gridMaskWords(grid)}${mean}`;
}

/** What the grey cells of the grid are, from each layer's thumbnail mask and window ("" when none is grey). */
export function gridMaskWords(grid) {
  const kinds = grid.layers.map((l) => maskKinds(layerMask(l, grid.thumbnail.mask)));
  if (!kinds.some((k) => k.any)) return "";
  const why = [];
  if (kinds.some((k) => k.after)) why.push("keys after the query");
  const windowed = grid.layers.filter((_, i) => kinds[i].before);
  if (windowed.length) {
    const sizes = [...new Set(windowed.map((l) => l.window))].join(", ");
    const where =
      windowed.length === grid.layers.length
        ? "in every layer"
        : `in layer${windowed.length > 1 ? "s" : ""} ${windowed.map((l) => l.layer).join(", ")}`;
    why.push(`${where}, keys outside the sliding window of ${sizes} tokens`);
  }
  return ` Grey cells are masked (${why.join("; ")}): no key there may be attended, not a zero weight.`;
}

export function drawHeadView(state, els) {
  const chosen = chosenHead(state);
  const grid = currentGrid(state);
  let head = false;
  let gridDrawn = false;
  const zoomNote = document.getElementById("head-zoom");
  if (chosen && chosen.block > 1) {
    // a long text: the pooled cells, and the exact cells of the zoomed block once they are in
    const { response, layer, mask, head: h, block } = chosen;
    const T = response.tokens.length;
    const p = selectedPosition(state, T);
    const region = currentRegion(state);
    draw(
      els.headHeatmap,
      `${idOf(response)}|${state.layer}|${state.head}|${p}|${idOf(region)}|${JSON.stringify(state.zoom)}`,
      () =>
        pooledHeatmapFigure({
          tokens: response.tokens,
          block,
          pattern: h.pattern,
          mask,
          raw: h.attn_scores_raw,
          scaled: h.attn_scores,
          scaledLabel: scoresFormula(layer),
          window: layer.window,
          layer: state.layer,
          head: state.head,
          position: p,
          region,
          view: state.zoom,
        }),
      `attnscope-L${state.layer}H${state.head}`,
    );
    setText(els.headTitle, `Layer ${state.layer} · head ${state.head}`);
    // masked blocks are solid grey here, not hatched (pooled.js)
    renderHeadCaption(els, hatchMeaning(maskKinds(mask), layer.window)?.replace("hatched", "grey"));
    document.getElementById("head-hatch")?.classList.add("solid");
    if (zoomNote) {
      setText(zoomNote, zoomWords(state, T, block, h.pattern.length));
      zoomNote.hidden = false;
    }
    head = true;
  } else if (chosen) {
    if (zoomNote) zoomNote.hidden = true;
    document.getElementById("head-hatch")?.classList.remove("solid");
    const { response, layer, mask, head: h, full } = chosen;
    const T = response.tokens.length;
    const p = selectedPosition(state, T);
    draw(
      els.headHeatmap,
      `${idOf(response)}|${state.layer}|${state.head}|${p}`,
      () =>
        headHeatmapFigure({
          tokens: response.tokens,
          pattern: h.pattern,
          mask,
          raw: full ? h.attn_scores_raw : null,
          scaled: full ? h.attn_scores : null,
          scaledLabel: scoresFormula(layer),
          window: layer.window,
          layer: state.layer,
          head: state.head,
          position: p,
        }),
      `attnscope-L${state.layer}H${state.head}`,
    );
    setText(els.headTitle, `Layer ${state.layer} · head ${state.head}`);
    renderHeadCaption(els, hatchMeaning(maskKinds(mask), layer.window));
    head = true;
  }
  if (grid && grid.thumbnail) {
    const width = Math.max(240, els.headsGrid.clientWidth || 560);
    const sig = `${idOf(grid)}|${state.layer}|${state.head}|${state.aggregate}|${width}`;
    if (els.headsGrid.dataset.signature !== sig) {
      const start = performance.now();
      const layout = paintGrid(els.gridCanvas, grid, {
        selected: { layer: state.layer, head: state.head },
        aggregate: state.aggregate,
        width,
      });
      els.headsGrid.gridLayout = { grid, layout, aggregate: state.aggregate };
      els.headsGrid.dataset.signature = sig;
      els.headsGrid.classList.add("drawn");
      performance.measure("attnscope:draw:heads-grid", { start, end: performance.now() });
    }
    setText(els.gridCaption, gridCaption(grid, state.aggregate));
    gridDrawn = true;
  }
  return { head, grid: gridDrawn };
}

function drawCompare(state, els) {
  const detail = currentDetail(state);
  if (!detail) return false;
  const layer = detail.layers[0];
  const d = headData(detail);
  // a long text's answer: the fields of `focus` (max-pooled where block > 1) and the head's stats
  const h = detail.focus?.thumbnail
    ? { pattern: d.pattern, pattern_unscaled: d.pattern_unscaled, attn_scores_raw: d.raw, attn_scores: d.scores, stats: d.stats }
    : layer.heads[0];
  if (!h.pattern_unscaled) return false; // asked for the head view only: main.js asks again
  const mask = d.mask;
  const sig = `${idOf(detail)}`;
  // one head's heatmap, exact or max-pooled (block > 1): the same arguments either way
  const heatmap = (matrix, showscale, testid) => {
    const args = {
      tokens: detail.tokens,
      pattern: matrix,
      mask,
      raw: h.attn_scores_raw,
      scaled: h.attn_scores,
      scaledLabel: scoresFormula(layer),
      window: layer.window,
      layer: state.layer,
      head: state.head,
      showscale,
      maxTicks: 28,
      uirevision: testid,
    };
    return d.block > 1 ? pooledHeatmapFigure({ ...args, block: d.block }) : headHeatmapFigure(args);
  };
  draw(els.compareScaled, sig, () => heatmap(h.pattern, false, "s"), "attnscope-scaled");
  draw(els.compareUnscaled, sig, () => heatmap(h.pattern_unscaled, true, "u"), "attnscope-unscaled");
  setText(document.getElementById("compare-left-caption"), compareLeftCaption(state));
  for (const span of document.querySelectorAll(".divisor-label")) {
    const what = unscaled(layer) ? "÷ 1, what-if" : `÷ ${divisorWords(layer, headDim(state))}`;
    setText(span, layer.softcap ? `${what}, softcap ${num(layer.softcap)}` : what);
  }
  setText(document.getElementById("unscaled-label"), unscaledFormula(layer));
  setText(document.getElementById("entropy-caption"), entropyCaption(layer));
  draw(
    els.compareEntropy,
    sig,
    () =>
      entropyFigure({
        tokens: detail.tokens,
        rowEntropy: h.stats.row_entropy,
        rowEntropyUnscaled: h.stats.row_entropy_unscaled,
        mask: d.block > 1 ? null : mask,
        layer,
      }),
    "attnscope-entropy",
  );
  renderStatsTable(state, els, h, layer, detail.tokens.length);
  return true;
}

function drawPipeline(state, els) {
  const detail = currentDetail(state);
  if (!detail) return false;
  // the server's own numbers and words: its q·kᵀ, its scores before and after the softcap
  // (masked entries null), the layer's divisor, softcap, window and mask
  const layer = detail.layers[0];
  const d = headData(detail);
  const T = detail.tokens.length;
  // a long text's matrices are max-pooled: the rows and columns are blocks of tokens
  const spans = d.block > 1 ? d.pattern.map((_, c) => blockSpan(T, d.block, c)) : null;
  const cells = spans && {
    rows: spans.map(([a, b]) => `queries ${spanWords(detail.tokens, a, b)}`),
    cols: spans.map(([a, b]) => `keys ${spanWords(detail.tokens, a, b)}`),
  };
  const kinds = maskKinds(d.mask);
  draw(
    els.maskSteps,
    `${idOf(detail)}`,
    () =>
      maskStepsFigure({
        tokens: detail.tokens,
        raw: d.raw,
        uncapped: d.uncapped,
        scores: d.scores,
        mask: d.mask,
        pattern: d.pattern,
        layer,
        kinds,
        causal: detail.causal,
        cells,
      }),
    "attnscope-mask-steps",
  );
  const notes = pipelineNotes({ causal: detail.causal, layer, kinds, headDim: headDim(state) });
  const list = document.getElementById("pipeline-notes");
  if (list.children.length !== notes.length) {
    list.replaceChildren(...notes.map(() => document.createElement("li")));
    list.style.setProperty("--steps", String(notes.length));
  }
  [...list.children].forEach((li, i) => setText(li, notes[i]));
  if (cells) {
    // row sums need every cell of a row; these cells are block maxima
    setText(
      els.rowSums,
      `${T} tokens, drawn as ${d.pattern.length}×${d.pattern.length} cells: each is the largest value of a ` +
        `${d.block}×${d.block} block of queries and keys, so a row of this picture is not a row of the softmax, and its cells do not sum to 1 (every softmax row does).`,
    );
  } else {
    const sums = d.pattern.map((row) => row.reduce((a, v) => a + v, 0));
    const lo = Math.min(...sums);
    const hi = Math.max(...sums);
    setText(els.rowSums, `After softmax every row sums to 1: the smallest row sum is ${lo.toFixed(6)}, the largest ${hi.toFixed(6)}.`);
  }
  const words = unscaled(layer) ? "1 (what-if: no scaling)" : divisorWords(layer, headDim(state));
  setText(els.pipelineDivisor, layer.softcap ? `${words}, then the softcap ${softcapWords(layer.softcap)}` : words);
  return true;
}

function drawVariance(state, els) {
  const detail = currentDetail(state);
  if (!detail) return false;
  const layer = detail.layers[0];
  const d = headData(detail);
  const s = d.stats;
  draw(
    els.varianceHist,
    `${idOf(detail)}`,
    () => varianceFigure({ raw: d.raw, scaled: d.scores, stats: s, layer, block: d.block }),
    "attnscope-variance",
  );
  // a long text's scores come max-pooled: the bars count blocks, the variances every pair
  const caption = document.getElementById("variance-caption");
  if (caption) {
    caption.dataset.exact ??= caption.textContent;
    setText(
      caption,
      d.block > 1
        ? `The largest unmasked score of each ${d.block}×${d.block} block of (query, key) pairs (${detail.tokens.length} tokens ` +
            `are too many pairs to send), on shared bins. Dashed lines: one standard deviation either side of the mean, over every pair.`
        : caption.dataset.exact,
    );
  }
  const ratio = ratioWords({ stats: s, layer, headDim: headDim(state), T: detail.tokens.length });
  setText(
    els.varianceSummary,
    `var(q·kᵀ) = ${fmtSig(s.var_scores_raw)}, var(${scoresFormula(layer)}) = ${fmtSig(s.var_scores)}: ${ratio.sentence}`,
  );
  return true;
}

function drawRoles(state, els) {
  const roles = state.roles;
  if (!roles) return false;
  draw(
    els.headRoles,
    `${idOf(roles)}|${state.role}|${state.layer}|${state.head}`,
    () => rolesFigure({ roles: roles.roles, scores: roles.scores, role: state.role, selected: { layer: state.layer, head: state.head } }),
    `attnscope-roles-${state.role}`,
  );
  const name = state.role.replace("_", "-");
  setText(els.roleInfo, `${/^[aeiou]/i.test(name) ? "An" : "A"} ${name} head ${ROLE_INFO[state.role] ?? ""}`);
  const r = roles.roles.indexOf(state.role);
  let best = null;
  roles.scores.forEach((row, l) =>
    row.forEach((cell, h) => {
      if (!best || cell[r] > best.score) best = { l, h, score: cell[r] };
    }),
  );
  setText(els.roleBest, best ? `Strongest: layer ${best.l}, head ${best.h} (${best.score.toFixed(2)}).` : "");
  return true;
}

function renderTabs(state, els) {
  for (const view of VIEWS) {
    const tab = els.tabs[view];
    const panel = els.panels[view];
    const on = view === state.view;
    setAttr(tab, "aria-selected", on ? "true" : "false");
    if (tab.tabIndex !== (on ? 0 : -1)) tab.tabIndex = on ? 0 : -1;
    if (panel.hidden !== !on) panel.hidden = !on;
  }
  const title = `attnscope · ${VIEW_LABELS[state.view]}`;
  if (document.title !== title) document.title = title;
}

/** Draw everything that the state calls for; returns what was drawn from current data. */
export function render(state, els) {
  renderModel(state, els);
  renderSelects(state, els);
  renderTabs(state, els);
  renderBanners(state, els);
  renderStatus(state, els);
  renderTokens(state, els);
  renderPredictions(state, els);
  const done = { view: state.view, text: state.text, head: false, grid: false, detail: !!currentDetail(state) };
  const drawnTokens = tokensNow(state);
  if (state.view === "head") Object.assign(done, drawHeadView(state, els));
  else if (state.view === "compare") done.compare = drawCompare(state, els);
  else if (state.view === "pipeline") done.pipeline = drawPipeline(state, els);
  else if (state.view === "variance") done.variance = drawVariance(state, els);
  else if (state.view === "roles") done.roles = drawRoles(state, els);
  done.tokens = drawnTokens ? drawnTokens.length : 0;
  return done;
}

/** After a view becomes visible, let its plots take their container's size. */
export function resizeView(els, view) {
  if (!window.Plotly) return;
  for (const el of els.panels[view].querySelectorAll(".plot.drawn")) window.Plotly.Plots.resize(el);
}
