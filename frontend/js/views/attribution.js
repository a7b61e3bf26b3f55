// The "Attribution" view: direct logit attribution (POST /api/attribution) of the chosen token's
// top guess: a layer × head map of what each head writes into that logit, a table of the MLPs,
// the embeddings and the rest, and beside the map the head effects (POST /api/head-effects, the
// head effects card's own request and figure) so a head's direct write and its total effect are
// read together. The route runs the model as trained, the split's frozen norm said in words. On an
// encoder–decoder the answer's `cross_heads` are drawn beside the self heads, on one colour range.

import { answerIn, question } from "../answers.js";
import { effectsFigure, measureEffects } from "../cards/effects.js";
import { byId, drawPlot, idOf, onPlotClick, setHidden, setText } from "../dom.js";
import { asTrainedWords, layerHeadFigure, signedPeak } from "../draw/causal.js";
import { fmtFixed } from "../draw/figures.js";
import { changedInputs } from "../measured.js";
import { chooseStack, chosenStack, manyStacks, querySide } from "../stacks.js";
import { selectedPosition, textTokens } from "../state.js";
import { blankSubject, subject } from "../subject.js";

export const id = "attribution";
export const label = "Attribution";
/** Its slice: POST /api/attribution {key, response, error} (the head effects live in `effects`). */
export const state = { attribution: null };
export const answers = ["attribution"];
export const link = { read() {}, write() {} };
/** Its own request (its `need`; the tokens: any answer for the text). */
export const needs = [];

/** The split of the chosen token's top guess: its question, or null before the text's tokens are known. */
function attributionQuestion(state) {
  const tokens = textTokens(state);
  if (!tokens || blankSubject(state)) return null;
  const url = "/api/attribution";
  // an encoder–decoder's logit is the decoder's: on the encoder stack (source rows) the last target token's;
  // no token chosen: the server's default (the last token, an encoder's first mask token)
  const none = querySide(state) === "source" || state.position === null;
  const position = none ? null : selectedPosition(state, tokens.length);
  return question("attribution", url, { ...subject(state, url), position });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [attributionQuestion(state)];

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head"><h2>What each part writes into the chosen token's guess</h2></header>
    <p id="attribution-note" class="effects-note small" data-testid="attribution-note" role="status" hidden></p>
    <p id="attribution-caption" class="muted small" data-testid="attribution-caption"></p>
    <div id="attribution-body" class="causal-pair" hidden>
      <div><h3 class="small">Direct write into the logit</h3>
        <div id="attribution-heads" class="plot plot-causal" data-testid="attribution-heads" role="img"
          aria-label="Each head's direct write into the logit, layer by head"></div>
        <div id="attribution-cross-box" hidden><h3 class="small">Cross heads (the decoder reading the source)</h3>
          <div id="attribution-cross" class="plot plot-causal" data-testid="attribution-cross" role="img"
            aria-label="Each cross-attention head's direct write into the logit, layer by head"></div></div>
        <table id="attribution-parts" class="causal-parts small" data-testid="attribution-parts"></table></div>
      <div><h3 class="small">Head effects
          <button type="button" id="attribution-measure" class="btn" data-testid="attribution-measure"
            >Measure</button></h3>
        <p id="attribution-effects-caption" class="muted small" data-testid="attribution-effects-caption"></p>
        <div id="attribution-effects" class="plot plot-causal" data-testid="attribution-effects" role="img"
          aria-label="Each head's effect when switched off alone" hidden></div></div>
    </div>
  </article>`;

/** The head effects' Measure button; a click on either map opens that head. */
export function install(app) {
  byId("view-attribution").innerHTML = PANEL;
  byId("attribution-measure").addEventListener("click", () => {
    const answer = app.state.attribution?.response;
    if (answer) measureEffects(app, answer.token_id);
  });
  // a map of an encoder–decoder's split opens its head in its own stack (the self heads: the decoder's)
  const open = (stack) => (pt) => {
    const [layer, head] = [Number.parseInt(String(pt.y).slice(1), 10), Number.parseInt(String(pt.x).slice(1), 10)];
    if (!Number.isInteger(layer) || !Number.isInteger(head)) return;
    if (stack && manyStacks(app.state.model) && chosenStack(app.state) !== stack && app.data) {
      chooseStack(app.state, stack); // as the picker does, the chosen token kept: decoder and cross read the target
      app.data.fitToModel();
      app.refreshNow();
    }
    app.selectHead(layer, head);
  };
  onPlotClick(byId("attribution-heads"), open("decoder"));
  onPlotClick(byId("attribution-cross"), open("cross"));
  onPlotClick(byId("attribution-effects"), open(null));
}

const signed = (v) => `${v >= 0 ? "+" : ""}${fmtFixed(v)}`;

/** The parts beside the heads: the embeddings, each mixer layer's write (a hybrid's), each MLP, the rest,
 * and the logit they add up to with the heads. */
export function partsRows({ embed, mlps, mixers, rest, logit }) {
  const mixerRows = (mixers ?? []).flatMap((m, l) => (m === null ? [] : [[`mixer ${l}`, signed(m)]]));
  return [
    ["embeddings", signed(embed)],
    ...mixerRows,
    ...mlps.map((m, l) => [`MLP ${l}`, signed(m)]),
    ["rest (biases, the norm's offset)", signed(rest)],
    ["logit (heads + all of the above)", fmtFixed(logit)],
  ];
}

function drawParts(table, answer) {
  const sig = String(idOf(answer));
  if (table.dataset.signature === sig) return;
  table.dataset.signature = sig;
  const rows = partsRows(answer).map(([name, value]) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = name;
    const td = document.createElement("td");
    td.textContent = value;
    tr.append(th, td);
    return tr;
  });
  table.replaceChildren(...rows);
}

/** The caption: the token, the logit, what the parts are, what is frozen, a final softcap. */
export function attributionWords({ token, logit, position, frozen, final_softcap, unsplit, cross_heads }, tokens) {
  const parts = [
    `What each part of the model writes directly into the logit of “${token}” (${fmtFixed(logit)}), the top ` +
      `guess after “${tokens[position]}” (token ${position}): each head through its slice of the output ` +
      `projection, each MLP, the embeddings and the rest, dotted with the token's unembedding row. With the ` +
      `heads they add up to the logit. Red: the part raises it, blue: it lowers it. Frozen: ${frozen}.`,
  ];
  if (unsplit) parts.push(`A hybrid: ${unsplit} (its row “mixer” in the table).`);
  if (cross_heads)
    parts.push(
      "An encoder–decoder: the first map is the decoder's self heads, the second its cross heads; the encoder's " +
        "whole work enters the decoder only through the cross heads, so it lies inside their parts.",
    );
  if (final_softcap !== null && final_softcap !== undefined)
    parts.push(
      `The model caps its logits (final softcap ${final_softcap}): it shows ${final_softcap}·tanh(logit / ` +
        `${final_softcap}); the split is of the logit before the cap.`,
    );
  return parts.join(" ");
}

/** The head effects beside the map: drawn when measured for this text, token and position, else the button. */
function drawEffects(state, answer, key) {
  const r = state.effects;
  const fresh =
    r?.answer && !r.pending && !changedInputs(r.inputs, state).length && r.answer.position === answer.position &&
    r.answer.token_id === answer.token_id;
  const button = byId("attribution-measure");
  button.disabled = Boolean(r?.pending);
  setText(button, fresh ? "Measure again" : "Measure");
  const plot = byId("attribution-effects");
  setHidden(plot, !fresh);
  let words = `Measure how much log p(${answer.token}) changes when each head alone is switched off: its total effect.`;
  if (r?.pending) words = "Switching every head off in turn…";
  else if (r?.error) words = `Could not measure: ${r.error}`;
  else if (fresh) {
    words =
      `Each head switched off alone (${state.effectsMode} ablation): the change in log p(${answer.token}). Red: ` +
      `switching it off raises it (the head hurt), blue: lowers it (the head helped).`;
    if (state.ablate.length) words += " Measured with the switched-off heads off, unlike the direct write.";
    drawPlot(plot, `${key}|${r.answer.position}|${r.answer.token_id}|${r.inputs.effectsMode}`, () =>
      effectsFigure(r.answer),
    );
  }
  setText(byId("attribution-effects-caption"), words);
}

export function draw(state) {
  const note = asTrainedWords(state, "The direct write shows");
  setText(byId("attribution-note"), note ?? "");
  setHidden(byId("attribution-note"), !note);
  const body = byId("attribution-body");
  const q = attributionQuestion(state);
  if (!q) {
    setHidden(body, true);
    return false;
  }
  const { response, error } = answerIn(state, q);
  const tokens = response?.target_tokens ?? textTokens(state); // the logit's position is a target token's
  const caption = error ? `Could not split the logit: ${error}` : response ? attributionWords(response, tokens) : "";
  setText(byId("attribution-caption"), caption || "computing…");
  setHidden(body, !response); // nothing stale under a refusal
  if (!response) return false;
  const key = idOf(response); // the answer's own id: what its plots are drawn from
  const cross = response.cross_heads ?? null;
  const peak = signedPeak([...response.heads, ...(cross ?? [])]); // one colour range for both maps
  drawPlot(
    byId("attribution-heads"),
    key,
    () => layerHeadFigure(response.heads, { label: "logit", hover: "direct write", peak }),
    "attnscope-attribution",
  );
  setHidden(byId("attribution-cross-box"), !cross);
  if (cross)
    drawPlot(
      byId("attribution-cross"),
      key,
      () => layerHeadFigure(cross, { label: "logit", hover: "cross write", peak }),
      "attnscope-attribution-cross",
    );
  drawParts(byId("attribution-parts"), response);
  drawEffects(state, response, key);
  return true;
}
