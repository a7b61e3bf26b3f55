// The "Rollout" view: attention rollout (Abnar & Zuidema) for the chosen token, the server's
// numbers (POST /api/rollout): one row per attention layer, how much the token's representation
// after that layer draws on each input token, the layers' head-averaged attention multiplied
// through, with the residual (0.5·A + 0.5·I, the paper's) or without. It follows the text, the
// chosen token and the what-ifs; its answer is asked for while the view is shown (`need`).

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { colorBar, layerTokenGrid } from "../draw/causal.js";
import { WEIGHT_SCALE, baseLayout, tokenAxis } from "../draw/figures.js";
import { currentGrid, selectedPosition } from "../state.js";
import { blankSubject, subject } from "../subject.js";

export const id = "rollout";
export const label = "Rollout";
/** Its slice: with the residual (0.5·A + 0.5·I, the paper's choice), and POST /api/rollout {key, response, error}. */
export const state = { rolloutResidual: true, rollout: null };
/** What a new model makes stale. */
export const answers = ["rollout"];
/** `rollres=0`: without the residual. */
export const link = {
  read(params, out) {
    if (params.has("rollres")) out.rolloutResidual = params.get("rollres") !== "0";
  },
  write(s, params) {
    if (!s.rolloutResidual) params.set("rollres", "0");
  },
};
/** Its own request (POST /api/rollout): its `need`. */
export const needs = [];

/** The rollout of the chosen token under the subject (the text, image and what-ifs): its question, or null. */
function rolloutQuestion(state) {
  const T = currentGrid(state)?.tokens?.length ?? 0; // the current text's, never the last text's
  if (!T || blankSubject(state)) return null;
  const url = "/api/rollout";
  const body = { ...subject(state, url), position: selectedPosition(state, T), residual: state.rolloutResidual };
  return question("rollout", url, body);
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [rolloutQuestion(state)];

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row">
      <h2>Attention rollout for the chosen token</h2>
      <label class="small">
        <input type="checkbox" id="rollout-residual" data-testid="rollout-residual" checked /> with the residual
      </label>
    </header>
    <p id="rollout-caption" class="muted small" data-testid="rollout-caption"></p>
    <div id="rollout-plot" class="plot plot-rollout" data-testid="rollout-plot" role="img"
      aria-label="Attention rollout of the chosen token, layer by layer"></div>
  </article>`;

/** The residual switch; `app`: {state, update}. */
export function install(app) {
  byId("view-rollout").innerHTML = PANEL;
  const toggle = byId("rollout-residual");
  toggle.addEventListener("change", () => {
    app.state.rolloutResidual = toggle.checked;
    app.update();
  });
}

/** Layers × input tokens: the chosen token's rollout after each attention layer. */
export function rolloutFigure({ tokens, layers, rollout, position }) {
  const shown = tokens.slice(0, rollout[0].length);
  const { trace, yaxis } = layerTokenGrid(rollout, shown, layers.map((l) => `L${l}`));
  return {
    data: [
      {
        ...trace,
        colorscale: WEIGHT_SCALE,
        zmin: 0,
        zmax: 1,
        hovertemplate:
          `after %{customdata[0]}: “${tokens[position]}” draws %{z:.4f} on ` +
          `<b>%{customdata[1]}</b><extra></extra>`,
        colorbar: colorBar("share", 12),
      },
    ],
    layout: baseLayout({
      margin: { l: 70, r: 10, t: 70, b: 10 },
      xaxis: tokenAxis(shown, { side: "top", title: "input token", angle: -55 }),
      yaxis,
      uirevision: "rollout",
    }),
  };
}

/** The words under the figure: what the rows are, the residual, and what a hybrid's layers and a layer's note mean. */
export function rolloutWords({ tokens, position, residual, layers }, model) {
  const parts = [
    `How much “${tokens[position]}” (token ${position}) draws on each input token after each layer: the layers' ` +
      `attention, averaged over their heads, multiplied through from the first layer (Abnar & Zuidema).`,
    residual
      ? "With the residual: each layer's map is 0.5 · attention + 0.5 · identity, rows renormalised, because " +
        "the residual stream carries every token past the attention."
      : "Without the residual: the attention maps alone, so a token's own representation flows on only through " +
        "the weight it gives itself.",
  ];
  const noted = (model?.layers ?? []).filter((l) => l.note && layers.includes(l.index));
  if (noted.length)
    parts.push(
      `Layers ${noted.map((l) => l.index).join(", ")} do more than attend (${noted[0].note}): the rollout ` +
        `leaves that out.`,
    );
  if (model?.attention_layers && model.attention_layers.length < model.n_layer) {
    parts.push(
      `Only the layers with softmax attention (${layers.join(", ")}) are multiplied: the others mix tokens in ` +
        `ways no attention map holds.`,
    );
  }
  return parts.join(" ");
}

export function draw(state) {
  const toggle = byId("rollout-residual");
  if (toggle.checked !== state.rolloutResidual) toggle.checked = state.rolloutResidual;
  const q = rolloutQuestion(state);
  if (!q) return false;
  const { response, error } = answerIn(state, q);
  setText(
    byId("rollout-caption"),
    error ? `Could not compute the rollout: ${error}` : response ? rolloutWords(response, state.model) : "computing…",
  );
  if (!response) return false;
  drawPlot(byId("rollout-plot"), idOf(response), () => rolloutFigure(response), "attnscope-rollout");
  return true;
}
