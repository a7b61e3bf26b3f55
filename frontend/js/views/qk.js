// The "q · k" view, BertViz's neuron view on the real model: for the chosen head, one query and
// one key, the vectors q and k and their product element by element, whose sum is the raw score,
// then the score softmax saw and the weight, every number the server's (POST /api/neuron). The
// lessons page makes the point on random vectors; here it is the model's own.

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { BLUE, MUTED, ORANGE, baseLayout } from "../draw/figures.js";
import { currentGrid, selectedPosition } from "../state.js";
import { subject } from "../subject.js";
import { textOnlyNow } from "../textonly.js";

export const id = "qk";
export const was = ["neuron"]; // the id of old links
export const label = "q · k";
/** Its route, which takes no image (textonly.js), and it reads the chosen token. */
export const route = "/api/neuron";
export const readsToken = true;
/** Its slice: the key position (null: the one the query weighs most), and POST /api/neuron {key, response, error}. */
export const state = { neuronKey: null, neuron: null };
export const answers = ["neuron"];
/** The grid (its tokens), and its own request (POST /api/neuron: its `need`). */
export const needs = ["grid"];

/** The chosen key inside a text of `T` tokens: past its end, the last token (as the query is); null: the heaviest. */
export const chosenKey = (state, T) => (state.neuronKey === null ? null : Math.min(state.neuronKey, T - 1));

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row">
      <h2>q · k, element by element</h2>
      <label class="small">key <select id="qk-key" data-testid="qk-key"></select></label>
    </header>
    <p class="muted small">The chosen head, the chosen token as the query (click a token above to change it),
      and one key: the score is the sum of these products.</p>
    <p id="qk-caption" class="summary" data-testid="qk-caption"></p>
    <div id="qk-plot" class="plot plot-qk" data-testid="qk-plot" role="img"
      aria-label="q, k and their product, dimension by dimension"></div>
  </article>`;

/** The key picker: a token, or "the heaviest" (the server's choice). */
export function install(app) {
  byId("view-qk").innerHTML = PANEL;
  byId("qk-key").addEventListener("change", (ev) => {
    app.state.neuronKey = ev.target.value === "" ? null : Number(ev.target.value);
    app.update();
  });
}

/**
 * Where the view reads the head: `{tokens, alone, query, keyPos}` (query and key null: the server's defaults, the last
 * token and the key it weighs most), or null before the grid's tokens are in. With an image the grid's tokens are
 * the image's prompt's: the text alone is read at its last token.
 */
function pairOf(state) {
  const tokens = currentGrid(state)?.tokens; // the current text's, never the last text's
  if (!tokens?.length) return null;
  const alone = textOnlyNow(state, { route });
  return {
    tokens,
    alone,
    query: alone ? null : selectedPosition(state, tokens.length),
    keyPos: alone ? null : chosenKey(state, tokens.length),
  };
}

/** q, k and q ⊙ k of the chosen head at the pair: its question, or null. */
function neuronQuestion(state) {
  const pair = pairOf(state);
  if (!pair) return null;
  const url = "/api/neuron";
  const body = { ...subject(state, url), layer: state.layer, head: state.head };
  if (pair.query !== null) body.query = pair.query;
  if (pair.keyPos !== null) body.key = pair.keyPos;
  return question("neuron", url, body);
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [neuronQuestion(state)];

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

export function draw(state) {
  const pair = pairOf(state);
  if (!pair) return false;
  fillKeys(pair.alone ? [] : pair.tokens, pair.keyPos);
  const { response, error } = answerIn(state, neuronQuestion(state));
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
  drawPlot(plot, idOf(response), () => neuronFigure(response), "attnscope-q-k");
  return true;
}
