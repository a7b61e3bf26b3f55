// Where the last token looks in a conversation (docs/API.md "Conversations"): the answer's `spans` ({message,
// role, start, end}: the tokens of each turn's content) and `span_mass` ([layer][head][span]: the weight the last
// query row puts on each). A box under the head heatmap lists each turn's share for the chosen head, in its role's
// colour; the grid's option paints each head's shares as a bar along the foot of its tile. Numbers are the server's.

import { idOf, mount, setHidden, setText } from "../dom.js";
import { shortToken } from "../draw/figures.js";

/** Each role's colour (the conversation editor's edges, css/cards.css). */
export const ROLE_COLOURS = { system: "#7c3aed", user: "#2563eb", assistant: "#d97706" };

/** The shares of `layer`, `head` (one per span), or null where the answer has none. */
export const massOf = (answer, layer, head) => answer?.span_mass?.[layer]?.[head] ?? null;

/** The box under the heatmap, made once. */
function box() {
  let el = document.getElementById("span-mass");
  if (!el) {
    el = mount("section", "cell-box span-mass", "span-mass",
      "<h3>Where the last token looks, by turn</h3><p class=\"small\" data-testid=\"span-mass-caption\"></p>" +
      "<ol class=\"span-mass-rows\" data-testid=\"span-mass-rows\"></ol>").root;
    el.id = "span-mass";
    document.getElementById("head-heatmap")?.after(el);
  }
  return el;
}

/** One turn's row: its number and role, the start of its content, its share as a bar and a number. */
function spanRow(span, share, tokens) {
  const li = document.createElement("li");
  li.dataset.role = span.role;
  li.dataset.share = String(share); // the server's number, as sent
  li.style.setProperty("--role", ROLE_COLOURS[span.role] ?? "#64748b");
  const words = tokens.slice(span.start, Math.min(span.end, span.start + 6)).join("");
  const label = document.createElement("span");
  label.textContent = `${span.message + 1} ${span.role} “${shortToken(words, 24)}”`;
  const bar = document.createElement("span");
  bar.className = "span-bar";
  bar.style.width = `${(100 * share).toFixed(1)}%`;
  const value = document.createElement("span");
  value.textContent = share.toFixed(3);
  li.append(label, bar, value);
  return li;
}

/** Draw the chosen head's shares of `answer` (the grid's), or hide the box without a conversation's answer. */
export function drawSpanBox(state, answer) {
  const mass = massOf(answer, state.layer, state.head);
  const el = mass || document.getElementById("span-mass") ? box() : null;
  if (!el) return false;
  setHidden(el, !mass);
  if (!mass) return false;
  setText(
    el.querySelector("[data-testid=span-mass-caption]"),
    `Layer ${state.layer} · head ${state.head}: the weight the last token gives each turn's content (the ` +
      "template's own markup, outside every turn, takes the rest).",
  );
  const rows = el.querySelector("ol");
  const sig = `${idOf(answer)}|${state.layer}|${state.head}`;
  if (rows.dataset.signature === sig) return true; // drawn already: a render that changes nothing writes nothing
  rows.dataset.signature = sig;
  rows.replaceChildren(...answer.spans.map((span, i) => spanRow(span, mass[i], answer.tokens)));
  return true;
}

/**
 * Over a painted grid (gridcanvas.js `paintGrid`'s `layout`), each head's shares as a bar along the foot of its
 * tile, a segment per turn in its role's colour, as wide as its share of the tile.
 */
export function paintSpanBars(canvas, { geom, cols }, answer) {
  const ctx = canvas.getContext("2d");
  const h = Math.max(3, Math.round((geom.tileH ?? geom.tile) * 0.2));
  answer.layers.forEach((l, r) => {
    cols.forEach((head, c) => {
      const mass = head >= 0 ? massOf(answer, l.layer, head) : null;
      if (!mass) return;
      let x = geom.label + c * geom.tile;
      const y = geom.label + (r + 1) * (geom.tileH ?? geom.tile) - 1 - h;
      answer.spans.forEach((span, i) => {
        const w = (geom.tile - 1) * mass[i];
        ctx.fillStyle = ROLE_COLOURS[span.role] ?? "#64748b";
        ctx.fillRect(x, y, w, h);
        x += w;
      });
    });
  });
}

/** The grid's switch of the turns' bars, put after its "mean per layer" switch once; its input. */
export function spanSwitch() {
  let input = document.getElementById("grid-spans");
  if (input) return input;
  const after = document.getElementById("aggregate-toggle")?.closest(".control");
  if (!after) return null;
  const { root, parts } = mount("div", "control switch small", "grid-spans-switch",
    '<input type="checkbox" id="grid-spans" role="switch" data-testid="grid-spans" />' +
    '<label for="grid-spans">turns, by role</label>');
  root.hidden = true;
  root.title = "Each head's shares of the last token's weight over the conversation's turns, as a bar in its tile";
  after.after(root);
  input = parts["grid-spans"];
  return input;
}
