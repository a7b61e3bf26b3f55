// A hybrid's value-linear layers (GET /api/model `layers[i].implicit`) beside the softmax heads: the page asks
// POST /api/attention for them by number, and draws the chosen head's M (o_t = Σ_s M[t, s] v_s + skip·v_t, the
// layer's own output before its gate, norm and projection) under the grid, on the page's one diverging scale
// (red = positive), never the softmax colours: M is not a softmax, it can be negative and its rows need not
// sum to 1. A per-channel mixer (Mamba-1, a short convolution) is drawn as the mean over channels of |M|.

import { answerIn, question } from "../answers.js";
import { drawPlot, mount, setHidden, setText } from "../dom.js";
import { SIGNED_SCALE, signedRange } from "../draw/figures.js";
import { colorbarTitle, quirkWords } from "../draw/quirks.js";
import { blankSubject, subject } from "../subject.js";

/** The model's value-linear layers, as GET /api/model lists them. */
export const implicitLayers = (model) => (model?.layers ?? []).filter((l) => l.implicit);

/** Every implicit head as `[value, layer, head]` (value "layer:head"), from GET /api/model. */
const implicitHeads = (model) =>
  implicitLayers(model).flatMap((l) => Array.from({ length: l.heads }, (_, h) => [`${l.index}:${h}`, l, h]));

/** The chosen implicit head, `[value, layer, head]` (the first where none is chosen), or null. */
export function chosenImplicit(state) {
  const heads = implicitHeads(state.model);
  return heads.find(([v]) => v === state.implicitHead) ?? heads[0] ?? null;
}

/**
 * The chosen implicit head's layer asked of POST /api/attention (only that layer: a hybrid has dozens), under
 * the subject and its what-ifs: its question, or null on a model without implicit layers or an empty box.
 */
export function implicitQuestion(state) {
  const chosen = chosenImplicit(state);
  if (!chosen || blankSubject(state)) return null;
  const url = "/api/attention";
  const body = { ...subject(state, url), layers: [chosen[1].index], include: ["pattern"], encoding: "json", top_k: 0 };
  return question("implicit", url, body);
}

/**
 * What the drawn matrix is, in words: the mixer's sentence of the field table (GET /api/model `fields`), the
 * layer's skip, and the reconstruction the server holds exact.
 */
export function implicitCaption(model, layer, head) {
  if (layer.per_channel)
    return (
      `Layer ${layer.layer}, ${layer.mixer}: one matrix per channel, each exact (o_t = Σ_s M[t,s] v_s + skip·v_t ` +
      "per channel); drawn: the mean over channels of |M[t,s]|, a size, not a reconstruction. Red = larger."
    );
  const skip = layer.skip ? ` + skip·v_t (skip ${layer.skip[head]})` : "";
  return (
    `Layer ${layer.layer}, head ${head}. ${quirkWords(model, "rows", { layer, head })}${skip}, exact: the layer's ` +
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

/** The section under the grid, made once, its picker wired (`app`: {els, state, update}). */
export function installImplicit(app) {
  const { root, parts } = mount("section", "implicit-heads", "implicit-heads", MARKUP);
  root.hidden = true;
  parts["implicit-pick"].addEventListener("change", (ev) => {
    app.state.implicitHead = ev.target.value;
    app.update();
  });
  app.els.headsGrid.after(root);
}

/** Draw the chosen implicit head (the section hidden on a model without implicit layers). */
export function drawImplicit(state) {
  const root = document.querySelector("[data-testid=implicit-heads]");
  const q = implicitQuestion(state);
  setHidden(root, !q);
  if (!root || !q) return;
  const part = (id) => root.querySelector(`[data-testid=${id}]`);
  const pick = part("implicit-pick");
  const heads = implicitHeads(state.model);
  const values = heads.map(([v]) => v).join(",");
  if (pick.dataset.values !== values) {
    pick.replaceChildren(...heads.map(([v, l, h]) => new Option(`L${l.index} · ${l.type} · head ${h}`, v)));
    pick.dataset.values = values;
  }
  const [value, chosen, h] = chosenImplicit(state);
  pick.value = value;
  const { response, error } = answerIn(state, q);
  if (error) return setText(part("implicit-caption"), `Could not compute the implicit attention: ${error}`);
  if (!response) return setText(part("implicit-caption"), "Computing the implicit attention…");
  const layer = response.layers.find((l) => l.layer === chosen.index);
  const title = layer.per_channel ? "mean |M|" : (colorbarTitle(state.model, layer, h) ?? "M");
  const figure = () => implicitFigure(layer.heads[h].pattern, response.tokens, title);
  drawPlot(part("implicit-plot"), `${q.key}|${value}`, figure, `attnscope-implicit-L${layer.layer}H${h}`);
  setText(part("implicit-caption"), implicitCaption(state.model, layer, h));
}
