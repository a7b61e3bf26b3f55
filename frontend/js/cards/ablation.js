// Switching heads off (issue 18): a toggle on every head of the all-heads grid and the key "x"
// for the chosen head change `state.ablate` (switchedoff.js); every /api/attention request
// carries it, so the grid, the head and the predictions are the ablated model's. A card lists
// the switched-off heads and says what the switch did to the chosen prediction: the token the
// intact model puts first, its probability before → after: two questions (`ablationNeed`), asked by
// the data step and keyed by their bodies (answers.js), so the line follows the text, the heads and the
// what-ifs; drawing asks nothing.

import { answerIn, question } from "../answers.js";
import { mount, setHidden } from "../dom.js";
import { selectedPosition } from "../state.js";
import { blankSubject, subject } from "../subject.js";
import { isOff, sortHeads, switchOff, toggled } from "../switchedoff.js";

/** Where each head's toggle sits over the grid canvas (CSS pixels): its tile's top-right corner. */
export function toggleSpots(layout, layers) {
  const { geom, cols } = layout;
  const spots = [];
  layers.forEach((layer, r) => {
    cols.forEach((head, c) => {
      if (head < 0) return; // the "mean" column has no head to switch
      spots.push({
        layer: layer.layer,
        head,
        x: geom.label + (c + 1) * geom.tile - 2,
        y: geom.label + r * geom.tile + 2,
      });
    });
  });
  return spots;
}

export const fmt = (p) => (p >= 0.001 ? `${(100 * p).toFixed(1)} %` : p > 0 ? p.toExponential(1) : "0");

/** The ✕ over one head's tile (`spot`, toggleSpots), pressed when the head is off. */
function toggleButton(spot, ablate) {
  const b = document.createElement("button");
  const off = isOff(ablate, spot.layer, spot.head);
  b.type = "button";
  b.className = off ? "ablate-toggle off" : "ablate-toggle";
  b.textContent = "✕";
  b.style.left = `${spot.x}px`;
  b.style.top = `${spot.y}px`;
  b.dataset.layer = String(spot.layer);
  b.dataset.head = String(spot.head);
  b.dataset.testid = `ablate-L${spot.layer}H${spot.head}`;
  b.setAttribute("aria-pressed", off ? "true" : "false");
  b.title = `${off ? "Switch back on" : "Switch off"} layer ${spot.layer}, head ${spot.head}`;
  return b;
}

/**
 * The toggles over the grid canvas, one a head, laid where the grid drew its tiles; built again only when
 * where they sit or which heads are off changed (a new text repaints the grid, its tiles stay where they were).
 * The overlay sits where the canvas starts by CSS (cards.css), so drawing it reads no layout: a keystroke's
 * render forces no style and layout pass of its own here.
 */
function drawOverlay({ state, grid, overlay }) {
  const g = grid.gridLayout;
  const layers = g?.grid?.layers;
  const spots = g && layers ? toggleSpots(g.layout, layers) : [];
  const sig = spots.length ? JSON.stringify([spots, state.ablate]) : "";
  if (overlay.dataset.signature === sig) return;
  overlay.dataset.signature = sig;
  overlay.replaceChildren();
  for (const s of spots) overlay.append(toggleButton(s, state.ablate));
}

/** The card's list of switched-off heads, each a chip that switches it back on. */
function drawList({ state, root, list, clear, setAblate }) {
  root.classList.toggle("active", state.ablate.length > 0);
  setHidden(clear, state.ablate.length === 0);
  const sig = JSON.stringify(state.ablate); // the chips again only when the heads switched off changed
  if (list.dataset.signature === sig) return;
  list.dataset.signature = sig;
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
      : [document.createTextNode("None: the model as trained.")]),
  );
}

const URL = "/api/attention";

/**
 * The card's two questions, asked by the data step (data.js `askNeeded`, answers.js): the top guesses after every
 * token of the intact model, and of the model with the heads off; none while no head is off.
 */
export function ablationNeed(state) {
  if (!state.ablate.length || blankSubject(state) || !state.model) return [];
  const { temperature } = state;
  const body = { ...subject(state, URL), ablate: [], layers: [], include: [], top_k: 50, temperature };
  return [question("ablationBefore", URL, body), question("ablationAfter", URL, { ...body, ablate: state.ablate })];
}

/** The card's before → after line at the chosen position, from the answers to `ablationNeed`'s questions. */
function drawEffect({ state, effect }) {
  const asked = ablationNeed(state);
  if (!asked.length) {
    if (state.model || !state.ablate.length) {
      effect.textContent = "";
      for (const key of ["before", "after", "token"]) delete effect.dataset[key];
    } // else a link's heads are checked against the model first (fitToModel)
    return;
  }
  const [b, a] = asked.map((q) => answerIn(state, q));
  const error = b.error ?? a.error;
  if (error) {
    effect.textContent = `Could not measure: ${error}`;
    return;
  }
  if (!b.response || !a.response) {
    effect.textContent = "Measuring what switching these heads off does to the top guess…";
    return;
  }
  const pos = selectedPosition(state, b.response.predictions.length);
  const [token, after] = [b.response.tokens[pos], a.response.predictions[pos]];
  const top = b.response.predictions[pos][0];
  const found = after.find((p) => p.id === top.id);
  const now = found ? fmt(found.prob) : `< ${fmt(after.at(-1).prob)}`;
  const strong = document.createElement("strong");
  strong.textContent = top.token;
  effect.replaceChildren("P(", strong, `) after “${token}”: ${fmt(top.prob)} → ${now}`);
  effect.dataset.before = String(top.prob);
  effect.dataset.after = String(found ? found.prob : 0);
  effect.dataset.token = top.token;
  if (after[0].id !== top.id) effect.append(` · now first: ${after[0].token} ${fmt(after[0].prob)}`);
}

/** The toggles, the card's "switch all back on" and the key "x" (the chosen head). */
function wireSwitches({ state, overlay, clear, setAblate }) {
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
}

/**
 * Install the toggles, the key and the card. `app`: {state, els, update, refreshNow}. Returns the card,
 * `{draw(state)}`.
 */
export function installAblation(app) {
  const { state, els } = app;
  const grid = els.headsGrid;
  const overlay = document.createElement("div");
  overlay.className = "ablate-overlay";
  overlay.dataset.testid = "ablate-overlay";
  grid.prepend(overlay); // before the canvas: its static position is the canvas's corner

  const { root, parts } = mount(
    "article",
    "card ablation-card",
    "ablation",
    `<header class="card-head row"><h2>Heads switched off</h2>
      <button type="button" class="linkish" data-testid="ablate-clear">switch all back on</button></header>
    <p class="muted small">The ✕ in a head's corner switches its output off (zeros before the layer's output
      projection); <kbd>x</kbd> switches the chosen head. Later layers and the predictions follow.</p>
    <p class="ablate-list" data-testid="ablate-list"></p>
    <p class="ablate-effect" data-testid="ablate-effect" aria-live="polite"></p>`,
  );
  grid.closest("article").after(root);
  const { "ablate-list": list, "ablate-effect": effect, "ablate-clear": clear } = parts;

  function setAblate(next) {
    switchOff(state, sortHeads(next));
    app.update();
    app.refreshNow();
  }
  const card = { app, state, grid, overlay, root, list, effect, clear, setAblate };
  wireSwitches(card);
  return {
    need: ablationNeed,
    answers: ["ablationBefore", "ablationAfter"], // a new model drops them (data.js)
    draw() {
      drawOverlay(card);
      drawList(card);
      drawEffect(card);
    },
  };
}
