// A hybrid's value-linear layers (GET /api/model `layers[i].implicit`) beside the softmax heads: the page asks
// POST /api/attention for them by number, and draws the chosen head's M (o_t = Σ_s M[t, s] v_s + skip·v_t, the
// layer's own output, where the server's field table says) under the grid, on the page's one diverging scale
// (red = positive), never the softmax colours: M is not a softmax, it can be negative and its rows need not
// sum to 1. A per-channel mixer (`per_channel`: one M a channel) is drawn as the mean over channels of |M|.

import { answerIn, question } from "../answers.js";
import { drawPlot, mount, setHidden, setText } from "../dom.js";
import { SIGNED_SCALE, signedRange } from "../draw/figures.js";
import { scaleLUT, weightColor } from "../draw/gridcanvas.js";
import { colorbarTitle, quirkWords } from "../draw/quirks.js";
import { blankSubject, subject } from "../subject.js";

/** The model's value-linear layers, as GET /api/model lists them (and a mixer beside a layer's attention). */
export const implicitLayers = (model) => (model?.layers ?? []).filter((l) => l.implicit || l.mixer);

/** Every implicit head as `[value, layer, head]` (value "layer:head"), from GET /api/model. */
const implicitHeads = (model) =>
  implicitLayers(model).flatMap((l) =>
    Array.from({ length: l.mixer_heads ?? l.heads }, (_, h) => [`${l.index}:${h}`, l, h]),
  );

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
  const named = chosen[1].implicit ? { layers: [chosen[1].index] } : { layers: [], mixers: [chosen[1].index] };
  const body = { ...subject(state, url), ...named, include: ["pattern"], encoding: "json", top_k: 0 };
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
    `Layer ${layer.layer}, head ${head}. ${quirkWords(model, "rows", { layer, head })}${skip}` +
    `${quirkWords(model, "output", { layer, head })}. Red = positive, blue = negative, grey = 0; rows need not sum ` +
    "to 1."
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

/**
 * What the grid's implicit rows are, in words ("" without them): the mixer per layer, how a cell is pooled, the
 * scale, and what their statistics are.
 */
export function implicitGridWords(grid) {
  const rows = grid.layers.filter((l) => l.implicit);
  if (!rows.length) return "";
  const names = rows.map((l) => `L${l.layer} ${l.mixer}`).join(", ");
  const block = grid.thumbnail.block;
  const cell = block === 1 ? "each cell is M[t, s]" : `each cell the entry of largest |M| in its ${block}² block`;
  const channel = rows.some((l) => l.per_channel) ? " A per-channel mixer's head: mean over channels of |M|." : "";
  return (
    ` Implicit rows (${names}) are value-linear mixers, not softmax: ${cell}, sign kept, on the diverging scale ` +
    "(red +, blue −), " +
    `each layer's heads sharing its own ±largest |M|.${channel} Their entropy and top weight are of |M| normalised ` +
    "per row; the scores' statistics are n/a. A click opens the head under the grid."
  );
}

/** A legend of the diverging scale the implicit rows are drawn on: "− ▭ + M". */
export function signedLegend() {
  const legend = document.createElement("div");
  legend.className = "weight-legend muted small";
  legend.dataset.testid = "grid-signed-legend";
  const bar = document.createElement("canvas");
  bar.width = 96;
  bar.height = 8;
  const g = bar.getContext("2d");
  const lut = scaleLUT("RdBu");
  for (let x = 0; x < bar.width; x++) {
    g.fillStyle = weightColor(lut, x / (bar.width - 1));
    g.fillRect(x, 0, 1, bar.height);
  }
  legend.append("−|M| max ", bar, " +|M| max: implicit M (each layer its own scale)");
  return legend;
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
    chooseImplicit(app.state, ev.target.value);
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
    pick.replaceChildren(...heads.map(([v, l, h]) => new Option(`L${l.index} · ${l.mixer ?? l.type} · head ${h}`, v)));
    pick.dataset.values = values;
  }
  const [value, chosen, h] = chosenImplicit(state);
  pick.value = value;
  const { response, error } = answerIn(state, q);
  if (error) return setText(part("implicit-caption"), `Could not compute the implicit attention: ${error}`);
  if (!response) return setText(part("implicit-caption"), "Computing the implicit attention…");
  const layer = response.layers.find((l) => l.layer === chosen.index && l.implicit);
  const title = layer.per_channel ? "mean |M|" : (colorbarTitle(state.model, layer, h) ?? "M");
  const figure = () => implicitFigure(layer.heads[h].pattern, response.tokens, title);
  drawPlot(part("implicit-plot"), `${q.key}|${value}`, figure, `attnscope-implicit-L${layer.layer}H${h}`);
  setText(part("implicit-caption"), implicitCaption(state.model, layer, h));
}

/** Choose the implicit head drawn under the grid, "layer:head". */
export function chooseImplicit(state, head) {
  state.implicitHead = head;
}
