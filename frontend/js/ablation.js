// Switching heads off (issue 18): a toggle on every head of the all-heads grid and the key "x"
// for the chosen head. The switched-off set is `state.ablate` ([{layer, head}], sorted); every
// /api/attention request carries it (state.js), so the grid, the head and the predictions are
// the ablated model's, and the URL keeps it (`off=2.1,0.3`). A card says what the switch did
// to the chosen prediction: the token the intact model puts first, its probability before → after.

import { errorText, isBlank, postJSON } from "./api.js";

/** "2.1,0.3" -> [{layer: 0, head: 3}, {layer: 2, head: 1}] (sorted, no duplicates, bad parts dropped). */
export function parseOff(value) {
  const seen = new Map();
  for (const part of String(value ?? "").split(",")) {
    const m = /^(\d{1,4})\.(\d{1,4})$/.exec(part.trim());
    if (m) seen.set(`${m[1]}.${m[2]}`, { layer: Number(m[1]), head: Number(m[2]) });
  }
  return sortHeads([...seen.values()]);
}

/** The URL form of a switched-off set: "0.3,2.1"; "" when none. */
export const offParam = (ablate) => ablate.map((a) => `${a.layer}.${a.head}`).join(",");

export const sortHeads = (heads) => [...heads].sort((a, b) => a.layer - b.layer || a.head - b.head);

export const isOff = (ablate, layer, head) => ablate.some((a) => a.layer === layer && a.head === head);

/** The set with (layer, head) switched the other way. */
export function toggled(ablate, layer, head) {
  return isOff(ablate, layer, head)
    ? ablate.filter((a) => !(a.layer === layer && a.head === head))
    : sortHeads([...ablate, { layer, head }]);
}

/** Where each head's toggle sits over the grid canvas (CSS pixels): its tile's top-right corner. */
export function toggleSpots(layout, layers) {
  const { geom, cols } = layout;
  const spots = [];
  layers.forEach((layer, r) => {
    cols.forEach((head, c) => {
      if (head < 0) return; // the "mean" column has no head to switch
      spots.push({ layer: layer.layer, head, x: geom.label + (c + 1) * geom.tile - 2, y: geom.label + r * geom.tile + 2 });
    });
  });
  return spots;
}

const fmt = (p) => (p >= 0.001 ? `${(100 * p).toFixed(1)} %` : p > 0 ? p.toExponential(1) : "0");

/**
 * Install the toggles, the key and the card. `ctx`: {state, els, update, refreshNow}.
 * Returns `setAblate(list)`.
 */
export function installAblation(ctx) {
  const { state, els } = ctx;
  const grid = els.headsGrid;
  const overlay = document.createElement("div");
  overlay.className = "ablate-overlay";
  overlay.dataset.testid = "ablate-overlay";
  grid.append(overlay);

  const card = document.createElement("article");
  card.className = "card ablation-card";
  card.dataset.testid = "ablation";
  card.innerHTML = `
    <header class="card-head row"><h2>Heads switched off</h2>
      <button type="button" class="linkish" data-testid="ablate-clear">switch all back on</button></header>
    <p class="muted small">The ✕ in a head's corner switches its output off (zeros before the layer's output
      projection); <kbd>x</kbd> switches the chosen head. Later layers and the predictions follow.</p>
    <p class="ablate-list" data-testid="ablate-list"></p>
    <p class="ablate-effect" data-testid="ablate-effect" aria-live="polite"></p>`;
  grid.closest("article").after(card);
  const list = card.querySelector("[data-testid=ablate-list]");
  const effect = card.querySelector("[data-testid=ablate-effect]");
  const clear = card.querySelector("[data-testid=ablate-clear]");

  function setAblate(next) {
    state.ablate = sortHeads(next);
    ctx.update();
    ctx.refreshNow();
  }

  function drawOverlay() {
    const g = grid.gridLayout;
    const layers = g?.grid?.layers;
    overlay.replaceChildren();
    if (!g || !layers) return;
    const canvas = grid.querySelector("canvas");
    overlay.style.left = `${canvas.offsetLeft}px`;
    overlay.style.top = `${canvas.offsetTop}px`;
    for (const s of toggleSpots(g.layout, layers)) {
      const b = document.createElement("button");
      const off = isOff(state.ablate, s.layer, s.head);
      b.type = "button";
      b.className = off ? "ablate-toggle off" : "ablate-toggle";
      b.textContent = "✕";
      b.style.left = `${s.x}px`;
      b.style.top = `${s.y}px`;
      b.dataset.layer = String(s.layer);
      b.dataset.head = String(s.head);
      b.dataset.testid = `ablate-L${s.layer}H${s.head}`;
      b.setAttribute("aria-pressed", off ? "true" : "false");
      b.title = `${off ? "Switch back on" : "Switch off"} layer ${s.layer}, head ${s.head}`;
      overlay.append(b);
    }
  }

  function drawCard() {
    card.classList.toggle("active", state.ablate.length > 0);
    clear.hidden = state.ablate.length === 0;
    list.replaceChildren(
      ...(state.ablate.length
        ? state.ablate.map((a) => {
            const chip = document.createElement("button");
            chip.type = "button";
            chip.className = "ablate-chip";
            chip.textContent = `L${a.layer} · H${a.head} ✕`;
            chip.title = "Switch this head back on";
            chip.addEventListener("click", () => setAblate(toggled(state.ablate, a.layer, a.head)));
            return chip;
          })
        : [document.createTextNode("None: the model as trained.")])
    );
  }

  // before → after: the intact model's top guess at the chosen position, its probability in both
  let measured = 0;
  async function measure() {
    const ticket = ++measured;
    if (!state.ablate.length || isBlank(state.text)) {
      effect.textContent = "";
      return;
    }
    const body = { text: state.text, layers: [], include: [], top_k: 50, causal: state.causal, scale: state.scaled ? "model" : "none", temperature: state.temperature };
    try {
      const [before, after] = await Promise.all([postJSON("/api/attention", body), postJSON("/api/attention", { ...body, ablate: state.ablate })]);
      if (ticket !== measured) return;
      const pos = state.position ?? before.predictions.length - 1;
      const top = before.predictions[pos][0];
      const found = after.predictions[pos].find((p) => p.id === top.id);
      const last = after.predictions[pos].at(-1);
      const now = found ? fmt(found.prob) : `< ${fmt(last.prob)}`;
      effect.innerHTML = "";
      const strong = document.createElement("strong");
      strong.textContent = top.token;
      effect.append("P(", strong, `) after “${before.tokens[pos]}”: ${fmt(top.prob)} → ${now}`);
      effect.dataset.before = String(top.prob);
      effect.dataset.after = String(found ? found.prob : 0);
      effect.dataset.token = top.token;
      const newTop = after.predictions[pos][0];
      if (newTop.id !== top.id) effect.append(` · now first: ${newTop.token} ${fmt(newTop.prob)}`);
    } catch (err) {
      if (ticket === measured) effect.textContent = `Could not measure: ${errorText(err)}`;
    }
  }

  overlay.addEventListener("click", (ev) => {
    const b = ev.target.closest(".ablate-toggle");
    if (!b) return;
    ev.stopPropagation();
    setAblate(toggled(state.ablate, Number(b.dataset.layer), Number(b.dataset.head)));
  });
  clear.addEventListener("click", () => setAblate([]));
  document.addEventListener("keydown", (ev) => {
    if (ev.target.closest("textarea, input, select") || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "x" || ev.key === "X") setAblate(toggled(state.ablate, state.layer, state.head));
  });
  let lastKey = null;
  document.addEventListener("attnscope:render", () => {
    drawOverlay();
    drawCard();
    const key = JSON.stringify([state.text, state.position, offParam(state.ablate), state.causal, state.scaled, state.temperature]);
    if (key !== lastKey) {
      lastKey = key;
      measure();
    }
  });
  return setAblate;
}
