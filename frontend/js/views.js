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
import { countWords } from "./api.js";
import { compareLeftCaption, divisorWords, pipelineNotes } from "./captions.js";
import { paintGrid } from "./gridcanvas.js";
import { ROLE_INFO, VIEWS, VIEW_LABELS, currentDetail, currentGrid, gridKey, scaleParam } from "./state.js";


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

export const divisorOf = (state, headDim) => (scaleParam(state) === "none" ? 1 : Math.sqrt(headDim));
export const divisorLabel = (state) => (scaleParam(state) === "none" ? "" : " / √d_k");

/** The model's head size: from GET /api/model, else from the first answer that names it. */
function headDim(state) {
  return state.model?.head_dim ?? currentGrid(state)?.model?.head_dim ?? 32;
}

/**
 * What the chosen head shows now: the chosen-head answer when it is current, else the head's
 * pattern from the grid answer (no scores in the hover until the detail arrives), else null.
 */
export function chosenHead(state) {
  const detail = currentDetail(state);
  if (detail) {
    const h = detail.layers?.[0]?.heads?.[0];
    if (h) return { response: detail, head: h, full: true };
  }
  const grid = currentGrid(state);
  if (grid) {
    const layer = grid.layers.find((l) => l.layer === state.layer);
    const head = layer?.heads.find((h) => h.head === state.head);
    if (head?.pattern) return { response: grid, head, full: false }; // a plain-JSON grid holds full patterns
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

function renderModel(state, els) {
  const m = state.model;
  if (!m) return;
  const params = m.parameters >= 1e6 ? `${(m.parameters / 1e6).toFixed(2)} M` : `${Math.round(m.parameters / 1e3)} k`;
  const sig = JSON.stringify([m.name, m.parameters, m.device, m.dtype, m.family]);
  if (els.modelBadge.dataset.signature === sig) return;
  els.modelBadge.dataset.signature = sig;
  els.modelBadge.replaceChildren();
  const gqa = m.n_kv_head && m.n_kv_head < m.n_head ? ` (${m.n_kv_head} key/value heads, shared)` : "";
  const rule = m.divisor_rule ?? "sqrt(head_dim)";
  const divisor =
    rule === "sqrt(head_dim)"
      ? `scores ÷ √${m.head_dim}`
      : `scores ÷ ${Number(m.divisor).toPrecision(4)} (${rule})`;
  const parts = [
    ["name", m.name],
    ["family", m.family && m.family !== "attnscope" ? m.family : null],
    ["size", `${params} parameters`],
    ["shape", `${m.n_layer} layers × ${m.n_head} heads${gqa} · d_k ${m.head_dim}`],
    ["divisor", m.softcap ? `${divisor}, softcap ${m.softcap}` : divisor],
    ["context", `context ${m.block_size}${m.positions ? ` · ${m.positions} positions` : ""}`],
    ["device", m.dtype && m.dtype !== "float32" ? `${m.device} · ${m.dtype}` : m.device],
  ];
  // the scaling switch names the model's own divisor
  const label = document.querySelector("label[for=scale-toggle]");
  if (label && rule !== "sqrt(head_dim)") label.textContent = `Scale by ${Number(m.divisor).toPrecision(4)}`;
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

function renderTokens(state, els) {
  const response = currentGrid(state) ?? currentDetail(state);
  if (!response) {
    // a text the server refused, no answer yet after an error, or no text: no chips of an older
    // text; the counter says the server's own count of a refused text (the message's number)
    if (!state.error && state.text !== "") return;
    if (els.tokens.dataset.signature !== "none") {
      els.tokens.dataset.signature = "none";
      els.tokens.replaceChildren();
    }
    setText(els.tokenCount, countWords(state.refusal));
    return;
  }
  const { tokens, token_ids: tokenIds, offsets } = response;
  const sig = String(idOf(response));
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

function renderBanners(state, els) {
  setText(els.errorText, state.error ?? "");
  if (els.errorBanner.hidden !== !state.error) els.errorBanner.hidden = !state.error;
  const notes = [];
  if (!state.causal) {
    notes.push(
      "Causal mask removed: every token also sees the tokens after it, like an encoder. " +
        "The model was trained with the mask, so these patterns and predictions are not what it computes.",
    );
  }
  if (!state.scaled) {
    const m = state.model;
    const by = !m || (m.divisor_rule ?? "sqrt(head_dim)") === "sqrt(head_dim)" ? "√d_k" : `its divisor ${Number(m.divisor).toPrecision(4)}`;
    notes.push(
      `Scaling removed: scores are not divided by ${by} before softmax. The model was trained with the ` +
        `scaling, so the softmax sees scores ${by === "√d_k" ? "about √d_k" : "that many"} times too large and turns peaky.`,
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

function renderStatsTable(state, els, head) {
  const stats = head?.stats;
  if (!stats) return;
  const dk = headDim(state);
  const rows = statsRows(stats, dk, divisorOf(state, dk));
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

function renderPredictions(state, els) {
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
  return `${what} Grey cells are masked (no key there may be attended), not zero.${mean}`;
}

function drawHeadView(state, els) {
  const chosen = chosenHead(state);
  const grid = currentGrid(state);
  let head = false;
  let gridDrawn = false;
  if (chosen) {
    const { response, head: h, full } = chosen;
    const T = response.tokens.length;
    const p = selectedPosition(state, T);
    draw(
      els.headHeatmap,
      `${idOf(response)}|${state.layer}|${state.head}|${p}`,
      () =>
        headHeatmapFigure({
          tokens: response.tokens,
          pattern: h.pattern,
          mask: response.mask,
          raw: full ? h.attn_scores_raw : null,
          scaled: full ? h.attn_scores : null,
          layer: state.layer,
          head: state.head,
          position: p,
        }),
      `attnscope-L${state.layer}H${state.head}`,
    );
    setText(els.headTitle, `Layer ${state.layer} · head ${state.head}`);
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
  const h = detail.layers[0].heads[0];
  const sig = `${idOf(detail)}`;
  const label = divisorLabel(state);
  const both = (matrix, title, showscale, testid) =>
    headHeatmapFigure({
      tokens: detail.tokens,
      pattern: matrix,
      mask: detail.mask,
      raw: h.attn_scores_raw,
      scaled: h.attn_scores,
      layer: state.layer,
      head: state.head,
      title,
      showscale,
      maxTicks: 28,
      uirevision: testid,
    });
  draw(els.compareScaled, sig, () => both(h.pattern, null, false, "s"), "attnscope-scaled");
  draw(els.compareUnscaled, sig, () => both(h.pattern_unscaled, null, true, "u"), "attnscope-unscaled");
  setText(document.getElementById("compare-left-caption"), compareLeftCaption(state));
  for (const span of document.querySelectorAll(".divisor-label")) {
    setText(span, state.scaled ? `/ ${divisorWords(detail.divisor, headDim(state))}` : "/ 1, what-if");
  }
  draw(
    els.compareEntropy,
    sig,
    () =>
      entropyFigure({
        tokens: detail.tokens,
        rowEntropy: h.stats.row_entropy,
        rowEntropyUnscaled: h.stats.row_entropy_unscaled,
        mask: detail.mask,
        divisorLabel: label,
      }),
    "attnscope-entropy",
  );
  renderStatsTable(state, els, h);
  return true;
}

function drawPipeline(state, els) {
  const detail = currentDetail(state);
  if (!detail) return false;
  const h = detail.layers[0].heads[0];
  const dk = headDim(state);
  // the server's own numbers: its q·kᵀ (masked entries null) and the divisor it used
  const divisor = detail.divisor ?? divisorOf(state, dk);
  const rootDk = Math.abs(divisor - Math.sqrt(dk)) < 1e-9;
  draw(
    els.maskSteps,
    `${idOf(detail)}`,
    () =>
      maskStepsFigure({
        tokens: detail.tokens,
        full: h.attn_scores_raw,
        divisor,
        mask: detail.mask,
        pattern: h.pattern,
        causal: state.causal,
        divisorLabel: divisor === 1 ? "" : rootDk ? ` / √${dk}` : ` / ${divisor.toPrecision(4)}`,
      }),
    "attnscope-mask-steps",
  );
  const notes = pipelineNotes({ causal: detail.causal, divisor, headDim: dk });
  document.querySelectorAll("#pipeline-notes li").forEach((li, i) => setText(li, notes[i]));
  const sums = h.pattern.map((row) => row.reduce((a, v) => a + v, 0));
  const lo = Math.min(...sums);
  const hi = Math.max(...sums);
  setText(els.rowSums, `After softmax every row sums to 1: the smallest row sum is ${lo.toFixed(6)}, the largest ${hi.toFixed(6)}.`);
  setText(
    els.pipelineDivisor,
    divisor === 1 ? "1 (what-if: no scaling)" : rootDk ? `√${dk} ≈ ${divisor.toFixed(3)}` : `${divisor.toPrecision(4)} (the model's own divisor)`,
  );
  return true;
}

function drawVariance(state, els) {
  const detail = currentDetail(state);
  if (!detail) return false;
  const h = detail.layers[0].heads[0];
  draw(
    els.varianceHist,
    `${idOf(detail)}`,
    () => varianceFigure({ raw: h.attn_scores_raw, scaled: h.attn_scores, divisorLabel: divisorLabel(state) }),
    "attnscope-variance",
  );
  const s = h.stats;
  const dk = headDim(state);
  setText(
    els.varianceSummary,
    `var(q·kᵀ) = ${fmtSig(s.var_scores_raw)}, var after scaling = ${fmtSig(s.var_scores)}: ` +
    `the ratio is ${s.variance_ratio.toFixed(2)}` +
    (state.scaled ? `, which is d_k = ${dk}, because dividing by √d_k divides the variance by d_k.` : " (no scaling)."),
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
