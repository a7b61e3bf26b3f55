// A hybrid's value-linear layers (GET /api/model `layers[i].implicit`) beside the softmax heads: the page asks
// POST /api/attention for them by number, and draws the chosen head's M (o_t = Σ_s M[t, s] v_s + skip·v_t, the
// layer's own output before its gate, norm and projection) under the grid, on the page's one diverging scale
// (red = positive), never the softmax colours: M is not a softmax, it can be negative and its rows need not
// sum to 1. A per-channel mixer (Mamba-1, a short convolution) is drawn as the mean over channels of |M|.

import { answerFor, askInto } from "../answers.js";
import { drawPlot, mount, setHidden, setText } from "../dom.js";
import { SIGNED_SCALE, signedRange } from "../draw/figures.js";
import { colorbarTitle, quirkWords } from "../draw/quirks.js";
import { scaleParam } from "../state.js";

/** The model's value-linear layers, as GET /api/model lists them. */
export const implicitLayers = (model) => (model?.layers ?? []).filter((l) => l.implicit);

/** The request for every implicit layer's M under the state's text and what-ifs. */
export function implicitRequest(state, numbers) {
  return {
    text: state.text,
    layers: numbers,
    include: ["pattern"],
    encoding: "json",
    causal: state.causal,
    ablate: state.ablate,
    scale: scaleParam(state),
    top_k: 0,
  };
}

/**
 * What the drawn matrix is, in words: the mixer's and the skip's sentences of the field table (GET /api/model
 * `fields`), and the reconstruction the server holds exact.
 */
export function implicitCaption(model, layer, head) {
  if (layer.per_channel)
    return (
      `Layer ${layer.layer}, ${layer.mixer}: one matrix per channel, each exact (o_t = Σ_s M[t,s] v_s + skip·v_t ` +
      "per channel); drawn: the mean over channels of |M[t,s]|, a size, not a reconstruction. Red = larger."
    );
  return (
    `Layer ${layer.layer}, head ${head}. ${quirkWords(model, "rows", { layer, head })}, exact: the layer's ` +
    "output before its gate, norm and projection. Red = positive, blue = negative, grey = 0; rows need not sum to 1."
  );
}

/** The heatmap of one implicit head's M on the diverging scale, centred on 0 (keys after the query left blank). */
export function implicitFigure(pattern, tokens, title) {
  const z = pattern.map((row, t) => row.map((v, s) => (s > t ? null : v)));
  const peak = signedRange(z);
  const labels = tokens.map((tok, i) => `${i}: ${tok}`);
  return {
    data: [
      {
        type: "heatmap",
        z,
        x: labels,
        y: labels,
        colorscale: SIGNED_SCALE,
        zmin: -peak,
        zmax: peak,
        zmid: 0,
        colorbar: { title: { text: title }, thickness: 12 },
        hovertemplate: "query %{y}<br>key %{x}<br>M = %{z:.5f}<extra></extra>",
      },
    ],
    layout: {
      margin: { l: 90, r: 20, t: 10, b: 90 },
      yaxis: { autorange: "reversed", tickfont: { size: 9 } },
      xaxis: { tickfont: { size: 9 }, side: "bottom" },
      height: 360,
    },
  };
}

const MARKUP =
  '<h3 class="implicit-title">Implicit attention: the linear layers</h3>' +
  '<label>Head <select data-testid="implicit-pick" aria-label="implicit head"></select></label>' +
  '<div class="implicit-plot" data-testid="implicit-plot" id="implicit-plot"></div>' +
  '<p class="implicit-caption" data-testid="implicit-caption"></p>';

/** The section under the grid, made once. */
function section(els, app) {
  const found = document.querySelector("[data-testid=implicit-heads]");
  if (found) return found.parts;
  const { root, parts } = mount("section", "implicit-heads", "implicit-heads", MARKUP);
  root.parts = parts;
  parts["implicit-pick"].addEventListener("change", (ev) => {
    app.state.implicitHead = ev.target.value;
    app.update();
  });
  els.headsGrid.after(root);
  return parts;
}

/**
 * Ask for and draw the chosen implicit head (nothing on a model without implicit layers). The picker lists every
 * implicit head from GET /api/model; only the chosen head's layer is asked for (a hybrid has dozens of them).
 */
export function drawImplicit(state, els, app) {
  const layers = implicitLayers(state.model);
  const root = document.querySelector("[data-testid=implicit-heads]");
  if (!layers.length || !app || !state.text) {
    setHidden(root, true);
    return;
  }
  const parts = section(els, app);
  setHidden(parts["implicit-plot"].parentElement, false);
  const choices = layers.flatMap((l) => Array.from({ length: l.heads }, (_, h) => [`${l.index}:${h}`, l, h]));
  const pick = parts["implicit-pick"];
  const values = choices.map(([v]) => v).join(",");
  if (pick.dataset.values !== values) {
    pick.replaceChildren(...choices.map(([v, l, h]) => new Option(`L${l.index} · ${l.type} · head ${h}`, v)));
    pick.dataset.values = values;
  }
  const [value, chosen, h] = choices.find(([v]) => v === state.implicitHead) ?? choices[0];
  pick.value = value;
  const body = implicitRequest(state, [chosen.index]);
  const key = JSON.stringify(body);
  const got = answerFor(state, "implicit", key, () => askInto(app, "implicit", key, "/api/attention", body));
  if (got.error) return setText(parts["implicit-caption"], got.error);
  if (!got.response) return setText(parts["implicit-caption"], "Computing the implicit attention…");
  const layer = got.response.layers.find((l) => l.layer === chosen.index);
  const head = layer.heads[h];
  const title = layer.per_channel ? "mean |M|" : (colorbarTitle(state.model, layer, h) ?? "M");
  const figure = () => implicitFigure(head.pattern, got.response.tokens, title);
  drawPlot(parts["implicit-plot"], `${key}|${value}`, figure, `attnscope-implicit-L${layer.layer}H${h}`);
  setText(parts["implicit-caption"], implicitCaption(state.model, layer, h));
}
