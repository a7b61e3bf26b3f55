// The "q · k" view, BertViz's neuron view on the real model: for the chosen head, one query and
// one key, the vectors q and k and their product element by element, whose sum is the raw score,
// then the score softmax saw and the weight, every number the server's (POST /api/neuron). The
// lessons page makes the point on random vectors; here it is the model's own.

import { askInto } from "../answers.js";
import { byId, drawPlot, setText } from "../dom.js";
import { BLUE, MUTED, ORANGE, baseLayout } from "../draw/figures.js";
import { currentGrid, scaleParam, selectedPosition } from "../state.js";
import { textOnlyNow } from "../textonly.js";
import { offParam } from "../switchedoff.js";

export const id = "qk";
export const was = ["neuron"]; // the id of old links
export const label = "q · k";
/** Its slice: the key position (null: the one the query weighs most), and POST /api/neuron {key, response, error}. */
export const state = { neuronKey: null, neuron: null };
export const answers = ["neuron"];
/** Its own request (POST /api/neuron), asked for by draw when the view is shown. */
export const needs = ["grid"];

const neuronKey = (state, query, key) =>
  JSON.stringify([
    state.model?.name,
    state.text,
    state.layer,
    state.head,
    query,
    key,
    state.causal,
    scaleParam(state),
    offParam(state.ablate),
  ]);

/** The chosen key inside a text of `T` tokens: past its end, the last token (as the query is); null: the heaviest. */
export const chosenKey = (state, T) => (state.neuronKey === null ? null : Math.min(state.neuronKey, T - 1));

/** The key picker: a token, or "the heaviest" (the server's choice). */
export function install(app) {
  byId("qk-key").addEventListener("change", (ev) => {
    app.state.neuronKey = ev.target.value === "" ? null : Number(ev.target.value);
    app.update();
  });
}

/** Ask for q, k and q ⊙ k of the chosen head, `query` and `keyPos` (null: the heaviest); `key` names the answer. */
function ask(app, state, query, keyPos, key) {
  const pair = { ...(query === null ? {} : { query }), ...(keyPos === null ? {} : { key: keyPos }) };
  const body = {
    text: state.text,
    layer: state.layer,
    head: state.head,
    ...pair,
    causal: state.causal,
    scale: scaleParam(state),
    ablate: state.ablate,
  };
  askInto(app, "neuron", key, "/api/neuron", body);
}

/** q, k and q ⊙ k as three rows of bars over the head's dimensions. */
export function neuronFigure({ q, k, q_times_k: product }) {
  const dims = q.map((_, i) => i);
  const rows = [
    ["q (the query)", q, BLUE],
    ["k (the key)", k, ORANGE],
    ["q ⊙ k (their sum is q·k)", product, MUTED],
  ];
  const data = rows.map(([name, values, color], r) => ({
    type: "bar",
    x: dims,
    y: values,
    name,
    marker: { color },
    xaxis: "x",
    yaxis: r === 0 ? "y" : `y${r + 1}`,
    hovertemplate: `${name.split(" (")[0]}[%{x}] = %{y:.4f}<extra></extra>`,
  }));
  const layout = baseLayout({
    margin: { l: 50, r: 10, t: 30, b: 30 },
    showlegend: false,
    // under the last row
    xaxis: { title: { text: "dimension of the head", font: { size: 11 } }, anchor: "y3", fixedrange: true },
    annotations: rows.map(([name], r) => ({
      text: name,
      xref: "paper",
      yref: "paper",
      x: 0,
      xanchor: "left",
      y: 1 - r / 3,
      yanchor: "bottom",
      showarrow: false,
      font: { size: 12 },
    })),
  });
  rows.forEach((_, r) => {
    layout[r === 0 ? "yaxis" : `yaxis${r + 1}`] = {
      domain: [1 - (r + 1) / 3 + 0.06, 1 - r / 3 - 0.04],
      zeroline: true,
      fixedrange: true,
    };
  });
  return { data, layout };
}

/** The sum and what follows it, in words, the server's numbers. */
export function neuronWords(n) {
  const pair = `“${n.tokens[n.query]}” (token ${n.query}) → “${n.tokens[n.key]}” (token ${n.key})`;
  if (n.attn_scores_raw === null)
    return `${pair}: the mask hides this key from this query, so no score is used; its weight is 0.`;
  const capped = n.softcap ? `, then the softcap ${n.softcap}·tanh(s / ${n.softcap}),` : "";
  return (
    `${pair}: the sum of q ⊙ k is q·k = ${n.attn_scores_raw.toFixed(4)}; ÷ ${n.divisor.toFixed(4)}${capped} ` +
    `gives the score softmax sees, ` +
    `${n.attn_scores.toFixed(4)}; the weight is ${n.weight.toFixed(4)}. Each bar of the last row adds to the ` +
    `score, or takes from it where q and k differ in sign.`
  );
}

function fillKeys(tokens, chosen) {
  const select = byId("qk-key");
  const sig = tokens.join("\u0000");
  if (select.dataset.signature !== sig) {
    select.dataset.signature = sig;
    const heaviest = document.createElement("option");
    heaviest.value = "";
    heaviest.textContent = "the one it weighs most";
    select.replaceChildren(
      heaviest,
      ...tokens.map((t, i) => {
        const o = document.createElement("option");
        o.value = String(i);
        o.textContent = `${i} ${t}`;
        return o;
      }),
    );
  }
  const value = chosen === null ? "" : String(chosen);
  if (select.value !== value) select.value = value;
}

export function draw(state, els, app = null) {
  const tokens = currentGrid(state)?.tokens; // the current text's, never the last text's
  if (!tokens?.length) return false;
  // with an image the grid's tokens are the image's prompt's: the text alone is read at its last token, its key
  // the one it weighs most (the server's defaults)
  const alone = textOnlyNow(state, id);
  const keyPos = alone ? null : chosenKey(state, tokens.length);
  fillKeys(alone ? [] : tokens, keyPos);
  const query = alone ? null : selectedPosition(state, tokens.length);
  const key = neuronKey(state, query, keyPos);
  if (state.neuron?.key !== key) {
    if (app) ask(app, state, query, keyPos, key);
    return false;
  }
  const { response, error } = state.neuron;
  setText(
    byId("qk-caption"),
    error ? `Could not compute: ${error}` : response ? neuronWords(response) : "computing…",
  );
  const plot = byId("qk-plot");
  if (!response) {
    if (error && plot.dataset.signature) {
      window.Plotly?.purge(plot); // no bars left standing under an error: they would be another text's
      delete plot.dataset.signature;
    }
    return false;
  }
  drawPlot(plot, key, () => neuronFigure(response), "attnscope-q-k");
  return true;
}
