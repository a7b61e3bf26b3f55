// The "Two texts" view: the chosen head on the text and on a second one side by side, and where
// the two have as many tokens (one word changed: "The doctor said she" / "The doctor said he"),
// their difference cell by cell on a diverging scale. Every number is the server's
// (POST /api/compare-texts); the second text lives in the link (`textb=`).

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { SIGNED_SCALE, baseLayout, maskNull, tokenAxis, tokenMargins } from "../draw/figures.js";
import { heatmapTitle } from "../draw/headframe.js";
import { headHeatmapFigure } from "../draw/heatmap.js";
import { signedModel } from "../draw/quirks.js";
import { paramLink } from "../state.js";
import { subject } from "../subject.js";

export const id = "twotexts";
export const was = ["texts"]; // the id of old links
export const label = "Two texts";
/** Its route (it takes no image: textonly.js). */
export const route = "/api/compare-texts";
/** Its slice: the second text, and POST /api/compare-texts {key, response, error}. */
export const state = { textB: "", texts: null };
export const answers = ["texts"];
/** `textb=`: the second text. */
export const link = paramLink("textb", "textB");
/** Its own request (POST /api/compare-texts: its `need`). */
export const needs = [];

const DEBOUNCE_MS = 300;

/** The chosen head on both texts: its question, or null while either text is empty. */
function textsQuestion(state) {
  if (!state.text.trim() || !state.textB.trim()) return null;
  const url = "/api/compare-texts";
  return question("texts", url, { ...subject(state, url), text_b: state.textB, layer: state.layer, head: state.head });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [textsQuestion(state)];

/** A box that writes `state.textB` (and so the link): this view's, and Patching's corrupt text. */
export function bindSecondText(box, app) {
  let timer = null; // the second text is debounced: a redraw DEBOUNCE_MS after its last key
  box.value = app.state.textB;
  box.addEventListener("input", () => {
    app.state.textB = box.value;
    clearTimeout(timer);
    timer = setTimeout(() => app.update(), DEBOUNCE_MS);
  });
}

/** Show `state.textB` in `box` (a link or the other view changed it), unless someone is typing there. */
export function showSecondText(box, state) {
  if (box.value !== state.textB && document.activeElement !== box) box.value = state.textB;
}

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head"><h2>The chosen head on two texts</h2></header>
    <label class="small" for="text-b">Second text</label>
    <textarea id="text-b" class="text-b" data-testid="text-b" rows="2"
      placeholder="The first text with one word changed, e.g. “she” → “he”"></textarea>
    <p id="twotexts-caption" class="muted small" data-testid="twotexts-caption"></p>
    <div id="twotexts-plots" class="pair-plots" data-testid="twotexts-plots" hidden>
      <div id="twotexts-a" class="plot plot-text" data-testid="twotexts-a" role="img"
        aria-label="The chosen head on the first text"></div>
      <div id="twotexts-b" class="plot plot-text" data-testid="twotexts-b" role="img"
        aria-label="The chosen head on the second text"></div>
      <div id="twotexts-diff" class="plot plot-text" data-testid="twotexts-diff" role="img"
        aria-label="Second text's weights minus the first's" hidden></div>
    </div>
  </article>`;

/** The second text's box. */
export function install(app) {
  byId("view-twotexts").innerHTML = PANEL;
  bindSecondText(byId("text-b"), app);
}

/** A heatmap with its title in a band of its own above the key axis's title (at 390 px they overlapped). */
const TITLE_BAND = 22;
function titled(fig) {
  fig.layout.margin = { ...fig.layout.margin, t: fig.layout.margin.t + TITLE_BAND };
  return fig;
}

/**
 * The difference, second text minus first (`what` names it otherwise: two models' "B − A"), on a
 * diverging scale centred on 0 (the server's range), with an optional `title`.
 */
export function differenceFigure({ tokens, difference, mask, range, layer, head, what = "second − first", title }) {
  const labels = tokens.map((t, i) => `${i} ${t}`);
  return {
    data: [
      {
        type: "heatmap",
        z: maskNull(difference, mask),
        customdata: labels.map((q) => labels.map((k) => [q, k])),
        colorscale: SIGNED_SCALE, // blue (low) to red (high): red where the second text attends more
        zmin: -range,
        zmax: range,
        zmid: 0,
        hoverongaps: false,
        xgap: tokens.length <= 24 ? 1 : 0,
        ygap: tokens.length <= 24 ? 1 : 0,
        hovertemplate:
          `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${what} %{z:+.4f}<extra>L${layer} ` +
          `· H${head}</extra>`,
        colorbar: {
          title: { text: what, side: "right", font: { size: 11 } },
          thickness: 12,
          outlinewidth: 0,
        },
      },
    ],
    layout: baseLayout({
      margin: { ...tokenMargins(tokens), r: 10, b: 10 },
      xaxis: tokenAxis(tokens, { side: "top", title: "key", angle: -55 }),
      yaxis: tokenAxis(tokens, { reversed: true, title: "query" }),
      title: heatmapTitle(title),
      uirevision: `${tokens.length}`,
    }),
  };
}

export function draw(state) {
  const plots = byId("twotexts-plots");
  const q = textsQuestion(state);
  const { response, error } = answerIn(state, q);
  plots.hidden = !response; // no empty frames while there is nothing to draw
  showSecondText(byId("text-b"), state);
  if (!q) {
    setText(
      byId("twotexts-caption"),
      "Type a second text to see the chosen head on both, for instance the first with one word changed.",
    );
    return false;
  }
  if (error) setText(byId("twotexts-caption"), `Could not compare: ${error}`);
  if (!response) return false;
  const key = idOf(response);
  const [a, b] = response.texts;
  // a model whose maps are signed (a quirk says so): the diverging scale
  const head = { layer: response.layer, head: response.head, signed: signedModel(state.model) };
  // the difference's box first: shown or not, it decides the width of the other two
  const diffBox = byId("twotexts-diff");
  const reflowed = diffBox.hidden !== (response.difference === null);
  diffBox.hidden = response.difference === null;
  const [boxA, boxB] = [byId("twotexts-a"), byId("twotexts-b")];
  for (const [box, t, which, title] of [
    [boxA, a, "a", "first text"],
    [boxB, b, "b", "second text"],
  ]) {
    const { tokens, pattern, mask } = t;
    drawPlot(box, `${key}|${which}`, () => titled(headHeatmapFigure({ tokens, pattern, mask, ...head, title })),
      `attnscope-text-${which}`);
  }
  if (reflowed && window.Plotly) for (const box of [boxA, boxB]) window.Plotly.Plots.resize(box);
  if (response.difference !== null) {
    const range = Math.max(response.max_abs_difference, 1e-6);
    drawPlot(
      diffBox,
      `${key}|d`,
      () => differenceFigure({ tokens: b.tokens, difference: response.difference, mask: b.mask, range, ...head }),
      "attnscope-text-diff",
    );
  }
  setText(
    byId("twotexts-caption"),
    response.difference === null
      ? `Layer ${response.layer}, head ${response.head} on both texts. No difference is drawn: ` +
          `${response.why_no_difference}.`
      : `Layer ${response.layer}, head ${response.head} on both texts, and the second's weights minus the ` +
          `first's, cell by cell: red where the second text's query attends more, blue where less (the largest ` +
          `change ${response.max_abs_difference.toFixed(4)}).`,
  );
  return true;
}
