// The "Two models" view: the served model and a second one of GET /api/models (a quantized file
// and its original, a fine-tune and its base) on the same text, head by head. A layers × heads map
// of the server's Jensen–Shannon divergence (POST /api/compare-models), max |difference| and
// agreement in the hover; the chosen head's two patterns and their difference (the answer's
// `difference`, b − a) on a diverging scale. The second model lives in the link (`modelb=`).
// The route runs both models as trained: the what-ifs are said not to apply, never mixed in.

import { question, questionKey } from "../answers.js";
import { getJSON } from "../api.js";
import { fillModelOptions, pickerOptions } from "../cards/modelpicker.js";
import { byId, drawPlot, idOf, onPlotClick, setText } from "../dom.js";
import { ACCENT, WEIGHT_SCALE, baseLayout } from "../draw/figures.js";
import { headHeatmapFigure } from "../draw/heatmap.js";
import { signedModel } from "../draw/quirks.js";
import { paramLink } from "../state.js";
import { blankSubject, subject } from "../subject.js";
import { differenceFigure } from "./twotexts.js";

export const id = "twomodels";
export const was = ["models"]; // the id of old links
export const label = "Two models";
/** Its route (it takes no image: textonly.js). */
export const route = "/api/compare-models";
/**
 * Its slice: the second model's name, POST /api/compare-models {key, response, error, loading}, and the models
 * its picker lists (GET /api/models, asked once when the view is installed).
 */
export const state = { modelB: "", models: null, modelListing: null };
export const answers = ["models"];
/** `modelb=`: the second model. */
export const link = paramLink("modelb", "modelB");
/** Its own request (its `need`; a 202 while the second model loads is asked again every second, answers.js). */
export const needs = [];
/** Said instead of the what-if notes: the route compares the two models as trained. */
export const whatIfNote =
  "Two models compares both models as trained (causal mask on, trained scaling, every head on): the what-if " +
  "switches do not change these numbers.";

const URL = "/api/compare-models";

/** The map's body: the subject and the second model (any head's answer holds the same map). */
const mapBody = (state) => ({ ...subject(state, URL), model_b: state.modelB });

/** The comparison at the chosen head: its question, or null without a second model or a text. */
function modelsQuestion(state) {
  if (!state.modelB || blankSubject(state)) return null;
  return question("models", URL, { ...mapBody(state), layer: state.layer, head: state.head });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [modelsQuestion(state)];

/** The map of the slot's last answer when it is the same comparison at another head (drawn meanwhile), or null. */
function previousMap(state, held) {
  const prev = held.previous;
  if (!prev || held.error) return null; // nothing stale stays drawn under a refusal
  const { layer, head, ...map } = prev.body;
  return questionKey(URL, map) === questionKey(URL, mapBody(state)) ? prev.response : null;
}

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row">
      <h2>Which heads changed between two models</h2>
      <div class="control">
        <label for="model-b">Second model</label>
        <select id="model-b" data-testid="model-b"></select>
      </div>
    </header>
    <p id="twomodels-caption" class="muted small" data-testid="twomodels-caption" aria-live="polite"></p>
    <div id="twomodels-map" class="plot plot-twomodels-map" data-testid="twomodels-map" role="img"
      aria-label="Divergence of every head between the two models" hidden></div>
    <div id="twomodels-plots" class="pair-plots" data-testid="twomodels-plots" hidden>
      <div id="twomodels-a" class="plot plot-text" data-testid="twomodels-a" role="img"
        aria-label="The chosen head in the served model"></div>
      <div id="twomodels-b" class="plot plot-text" data-testid="twomodels-b" role="img"
        aria-label="The chosen head in the second model"></div>
      <div id="twomodels-diff" class="plot plot-text" data-testid="twomodels-diff" role="img"
        aria-label="The second model's weights minus the served model's"></div>
    </div>
  </article>`;

/** The second model's picker (the names the model picker lists) and a click on the map choosing a head. */
export function install(app) {
  byId("view-twomodels").innerHTML = PANEL;
  const select = byId("model-b");
  select.addEventListener("change", () => {
    app.state.modelB = select.value;
    app.update();
  });
  onPlotClick(byId("twomodels-map"), (pt) => {
    const layer = Number.parseInt(String(pt.y).replace(/\D/g, ""), 10); // "L3": the layer's number
    const head = Number.parseInt(String(pt.x).replace(/\D/g, ""), 10);
    if (Number.isInteger(layer) && Number.isInteger(head)) app.selectHead(layer, head);
  });
  getJSON("/api/models")
    .then((answer) => (app.state.modelListing = answer))
    .catch(() => (app.state.modelListing = { models: [] }))
    .finally(() => app.update());
}

/** Layers × heads: the divergence of each head (rows of a layer without softmax attention left out). */
export function divergenceFigure({ divergence, max_abs, argmax_agreement }, selected, cellPx = 100) {
  const layers = divergence.flatMap((row, l) => (row ? [l] : []));
  const nHead = divergence[layers[0]].length;
  const z = layers.map((l) => divergence[l]);
  let top = 1e-6; // the colour's top: the largest divergence here, so the heads that changed stand out
  for (const row of z) for (const v of row) top = Math.max(top, v);
  const row = layers.indexOf(selected.layer);
  const [x0, x1, y0, y1] = [selected.head - 0.5, selected.head + 0.5, row - 0.5, row + 0.5];
  const box = row >= 0 && { type: "rect", x0, x1, y0, y1 };
  const few = layers.length * nHead <= 120 && cellPx >= 48; // numbers in the cells where they fit
  return {
    data: [
      {
        type: "heatmap",
        z,
        x: Array.from({ length: nHead }, (_, h) => `H${h}`),
        y: layers.map((l) => `L${l}`),
        customdata: layers.map((l) => max_abs[l].map((m, h) => [m, argmax_agreement[l][h]])),
        colorscale: WEIGHT_SCALE,
        zmin: 0,
        zmax: top,
        xgap: 3,
        ygap: 3,
        ...(few ? { texttemplate: "%{z:.3f}", textfont: { size: 11 } } : {}),
        hovertemplate:
          "%{y} · %{x}<br>divergence %{z:.4f} bits (Jensen–Shannon, mean over queries)<br>max |difference| " +
          "%{customdata[0]:.4f}<br>agreement %{customdata[1]:.1%} of queries (same heaviest key)" +
          "<extra>click to compare</extra>",
        colorbar: { title: { text: "bits", side: "right", font: { size: 11 } }, thickness: 12, outlinewidth: 0 },
      },
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 30, b: 10 },
      xaxis: { side: "top", showgrid: false, zeroline: false, ticks: "", fixedrange: true },
      yaxis: { autorange: "reversed", dtick: 1, showgrid: false, zeroline: false, ticks: "", fixedrange: true },
      shapes: box
        ? [
            { ...box, line: { color: "#ffffff", width: 4 } },
            { ...box, line: { color: ACCENT, width: 2 } },
          ]
        : [],
      uirevision: "models",
    }),
  };
}

/** The map's height for `rows` layers: ROW_PX each, never under 220 px. */
const ROW_PX = 26;
const mapHeight = (rows) => Math.max(220, 60 + rows * ROW_PX);

/** The picker's options, as the model picker lists them but the served model, with a first "choose" one. */
function fillPicker(state) {
  const select = byId("model-b");
  const options = [{ name: "", title: "" }, ...pickerOptions(state.modelListing, true)];
  if (state.modelB && !options.some((o) => o.name === state.modelB)) options.push({ name: state.modelB, title: "" });
  fillModelOptions(select, options, "choose the second model…");
  if (select.value !== state.modelB) select.value = state.modelB;
}

const TITLE_BAND = 22; // the heatmaps' titles get a band of their own above the key axis's title
function titled(fig) {
  fig.layout.margin = { ...fig.layout.margin, t: fig.layout.margin.t + TITLE_BAND };
  return fig;
}

/** The words over the map: what is compared, and the chosen head's numbers, the server's. */
function modelsWords(r, state) {
  const { layer, head } = state;
  const what = [
    !state.causal && "mask off",
    !state.scaled && "scaling off",
    state.ablate.length && "switched-off heads",
  ].filter(Boolean);
  const asTrained = what.length
    ? `The what-ifs on the page (${what.join(", ")}) are not applied here: both models as trained. `
    : "";
  const d = r.divergence[layer]?.[head];
  const chosen =
    d === undefined || d === null
      ? ""
      : ` Layer ${layer}, head ${head}: divergence ${d.toFixed(4)} bits, max |difference| ` +
        `${r.max_abs[layer][head].toFixed(4)}, the same heaviest key for ` +
        `${(100 * r.argmax_agreement[layer][head]).toFixed(1)}% of queries; below, its pattern in each model and ` +
        `${r.model_b}'s minus ${r.model_a}'s, red where ${r.model_b} attends more.`;
  return (
    `${asTrained}${r.model_a} (served) against ${r.model_b} on the same ${r.tokens.length} tokens: each head's ` +
    `Jensen–Shannon divergence in bits (0: the same weights; the colour's top is the largest here); click a ` +
    `head to compare its patterns.${chosen}`
  );
}

export function draw(state) {
  fillPicker(state);
  const caption = byId("twomodels-caption");
  const q = modelsQuestion(state);
  const asked = Boolean(q);
  const current = q && state.models?.key === q.key ? state.models : null;
  const shown = current?.response ?? (current && previousMap(state, current)); // the map: the same for every head
  byId("twomodels-map").hidden = !shown;
  byId("twomodels-plots").hidden = !current?.response;
  if (!asked) {
    setText(
      caption,
      state.modelB
        ? "Type a text to compare the two models on it."
        : "Choose a second model of this machine to see which heads attend differently on this text.",
    );
    return false;
  }
  const { response: r, error, loading } = current ?? {};
  let words = r ? modelsWords(r, state) : error ? `Could not compare: ${error}` : "comparing…";
  if (loading) words = `loading ${state.modelB}… (asked again every second)`;
  setText(caption, words);
  const mapSig = `${idOf(shown)}|${state.layer}|${state.head}|${shown === r}`;
  if (shown) {
    const map = byId("twomodels-map");
    const height = `${mapHeight(shown.divergence.filter((row) => row).length)}px`;
    if (map.style.height !== height) map.style.height = height; // a labelled row per layer
    const cellPx = map.clientWidth / shown.divergence.find((row) => row).length;
    drawPlot(map, mapSig, () => divergenceFigure(shown, state, cellPx), "attnscope-twomodels-map");
  }
  if (!r) return false;
  drawParts(r, state, current.key);
  return true;
}

/** The chosen head: its pattern in each model and their difference (`difference`, B − A); `key`: its question's. */
function drawParts(r, state, key) {
  const head = { layer: state.layer, head: state.head, signed: signedModel(state.model) };
  const one = (pattern, title) =>
    titled(headHeatmapFigure({ tokens: r.tokens, pattern, mask: r.mask, ...head, title }));
  drawPlot(byId("twomodels-a"), `${key}|a`, () => one(r.a, `A: ${r.model_a} (served)`), "attnscope-model-a");
  drawPlot(byId("twomodels-b"), `${key}|b`, () => one(r.b, `B: ${r.model_b}`), "attnscope-model-b");
  const range = Math.max(r.max_abs[state.layer][state.head], 1e-6);
  const diff = { tokens: r.tokens, difference: r.difference, mask: r.mask, range, ...head };
  const figure = () => titled(differenceFigure({ ...diff, what: "B − A", title: "B − A" }));
  drawPlot(byId("twomodels-diff"), `${key}|d`, figure, "attnscope-twomodels-diff");
}
