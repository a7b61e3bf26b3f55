// The "Head roles" view: the server's role scores of every head (measured once on probe inputs,
// not on the text) as a layers × heads heatmap for the chosen role; a click opens that head.

import { byId, drawPlot, idOf, onPlotClick, setText } from "../dom.js";
import { ACCENT, WEIGHT_SCALE, baseLayout } from "../draw/figures.js";
import { paramLink } from "../state.js";

export const id = "roles";
export const label = "Head roles";
/** Its slice: the chosen role, and GET /api/heads (data.js asks it once, at start). */
export const state = { role: "induction", roles: null };
export const answers = ["roles"];
/** `role=`, written while this view is open. */
export const link = paramLink("role", "role", (s) => s.view === "roles");
/** Nothing per text: the role scores come once, from GET /api/heads. */
export const needs = [];
/** Said instead of the what-if notes: the switches do not change these scores. */
export const whatIfNote =
  "Head roles are measured on the trained model (causal mask on, trained scaling); the what-if switches do not " +
  "change these scores.";

export const ROLE_INFO = {
  previous_token: "attends to the token just before the query (position t−1).",
  first_token: "parks its attention on the very first token, a common ‘attention sink’.",
  induction: "on a repeated sequence, looks at the token that followed the earlier copy of the current token.",
  self: "attends to the query’s own position (the diagonal).",
};

/** The role picker: one option per role the server measured, the chosen one selected. */
function fillRoles(state) {
  const picker = byId("role-select");
  const roles = state.roles?.roles;
  if (roles && [...picker.options].map((o) => o.value).join() !== roles.join()) {
    picker.replaceChildren(
      ...roles.map((role) => {
        const o = document.createElement("option");
        o.value = role;
        o.textContent = role.replace("_", " ");
        return o;
      }),
    );
  }
  if (picker.value !== state.role && [...picker.options].some((o) => o.value === state.role)) picker.value = state.role;
}

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row">
      <h2>What each head does</h2>
      <div class="control">
        <label for="role-select">Role</label>
        <select id="role-select" data-testid="role-select"><option value="induction">induction</option></select>
      </div>
    </header>
    <div id="head-roles" class="plot plot-roles" data-testid="head-roles" role="img"
      aria-label="Role score of every head"></div>
  </article>
  <article class="card">
    <header class="card-head"><h2>About the scores</h2></header>
    <p id="role-info"></p>
    <p id="role-best" class="summary"></p>
    <p class="muted small">Scores are measured by the server on built-in probe inputs, not on your text: the
      mean weight a head puts where the role says it should. 1 would be a perfect head of that kind. Click a
      cell to open that head.</p>
  </article>`;

/** The role picker chooses the role; a click on a cell opens that head in the head view. */
export function install(app) {
  byId("view-roles").innerHTML = PANEL;
  const picker = byId("role-select");
  picker.addEventListener("change", () => {
    app.state.role = picker.value;
    app.update();
  });
  // axis labels are "L2" and "H1", or indices
  const indexOf = (v) => (typeof v === "number" ? v : Number.parseInt(String(v).replace(/\D/g, ""), 10));
  onPlotClick(byId("head-roles"), (pt) => {
    const layer = indexOf(pt.y); // "L3": the layer's number, not its row
    const head = indexOf(pt.x);
    if (!Number.isInteger(layer) || !Number.isInteger(head)) return;
    app.selectHead(layer, head);
    app.setView("head");
  });
}

/** The figure's height for `rows` layers: one labelled row of at least ROW_PX each, never under the card's 440 px. */
const ROW_PX = 24;
export const rolesHeight = (rows) => Math.max(440, 40 + rows * ROW_PX);

/** Draw the view from GET /api/heads (asked once, at start); false until it answered. */
export function draw(state) {
  fillRoles(state);
  const roles = state.roles;
  if (!roles) return false;
  const plot = byId("head-roles");
  const height = `${rolesHeight(roles.scores.filter((row) => row).length)}px`;
  if (plot.style.height !== height) plot.style.height = height; // sized by the layer count, so every row has its label
  drawPlot(
    plot,
    `${idOf(roles)}|${state.role}|${state.layer}|${state.head}`,
    () =>
      rolesFigure({
        roles: roles.roles,
        scores: roles.scores,
        role: state.role,
        selected: { layer: state.layer, head: state.head },
      }),
    `attnscope-roles-${state.role}`,
  );
  const name = state.role.replace("_", "-");
  setText(byId("role-info"), `${/^[aeiou]/i.test(name) ? "An" : "A"} ${name} head ${ROLE_INFO[state.role] ?? ""}`);
  const r = roles.roles.indexOf(state.role);
  let best = null;
  roles.scores.forEach((row, l) =>
    row?.forEach((cell, h) => {
      if (!best || cell[r] > best.score) best = { l, h, score: cell[r] };
    }),
  );
  setText(byId("role-best"), best ? `Strongest: layer ${best.l}, head ${best.h} (${best.score.toFixed(2)}).` : "");
  return true;
}

/** Layers × heads heatmap of one role's scores, the chosen head outlined. */
export function rolesFigure({ roles, scores, role, selected }) {
  const r = Math.max(0, roles.indexOf(role));
  // one row per layer with heads, by the model's numbers (a hybrid's other layers are null: no row)
  const layers = scores.flatMap((row, l) => (row ? [l] : []));
  const nHead = scores[layers[0]].length;
  const z = layers.map((l) => scores[l].map((cell) => cell[r]));
  // categories named as the grid names them; a click reads the numbers back from "L3" and "H1"
  const x = Array.from({ length: nHead }, (_, h) => `H${h}`);
  const y = layers.map((l) => `L${l}`);
  // the chosen head: a white frame with the accent colour inside it
  const row = layers.indexOf(selected?.layer);
  const box = selected &&
    row >= 0 && { type: "rect", x0: selected.head - 0.5, x1: selected.head + 0.5, y0: row - 0.5, y1: row + 0.5 };
  const shapes = box
    ? [
        { ...box, line: { color: "#ffffff", width: 4 } },
        { ...box, line: { color: ACCENT, width: 2 } },
      ]
    : [];
  return {
    data: [
      {
        type: "heatmap",
        z,
        x,
        y,
        colorscale: WEIGHT_SCALE,
        zmin: 0,
        zmax: 1,
        xgap: 3,
        ygap: 3,
        texttemplate: "%{z:.2f}",
        textfont: { size: layers.length > 12 ? 11 : 13 }, // a row of ROW_PX holds an 11 px number
        hovertemplate: `%{y} · %{x}<br>${role.replace("_", " ")} score %{z:.3f}<extra>click to open</extra>`,
        colorbar: { title: { text: "score", side: "right", font: { size: 11 } }, thickness: 12, outlinewidth: 0 },
      },
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 30, b: 10 },
      xaxis: {
        side: "top",
        showgrid: false,
        zeroline: false,
        ticks: "",
        fixedrange: true,
      },
      yaxis: {
        autorange: "reversed",
        dtick: 1, // every layer named: Plotly would name every other one past ~20 rows
        showgrid: false,
        zeroline: false,
        ticks: "",
        fixedrange: true,
      },
      shapes,
      uirevision: "roles",
    }),
  };
}

/** The chosen role kept where the model's roles (GET /api/heads) have it, else their first (modelload.js). */
export function fitRole(state) {
  if (!state.roles.roles.includes(state.role)) state.role = state.roles.roles[0];
}
