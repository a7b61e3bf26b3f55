// The "Mask pipeline" view: one head step by step, q·kᵀ → ÷ divisor → (softcap) → masked → softmax,
// each panel drawn from the server's own numbers, with the notes that say what each step did.

import { divisorWords, maskKinds, pipelineNotes, softcapWords, unscaled } from "../draw/captions.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { maskStepsFigure } from "../pipeline/steps.js";
import { blockSpan, currentHead, spanWords } from "../draw/pooled.js";
import { headDim } from "../state.js";
import { imageMaskWords, imageRun } from "../draw/imageband.js";
import { imageMask } from "../draw/imagemap.js";
import { quirkWords } from "../draw/quirks.js";
import { tokenBands, withBands } from "../draw/quirkbands.js";
import { keyTokens, seesAll, stackAxes, stackSides } from "../stacks.js";

export const id = "pipeline";
export const label = "Mask pipeline";
export const needs = ["detail"];

/**
 * What the mask does inside the image (null without one, or when the mask is max-pooled): read from the answer's
 * exact mask, for the pipeline's notes.
 */
function imageNotes(detail, d, layer) {
  const kinds = detail.token_kinds;
  if (!imageRun(kinds) || d.block > 1) return null;
  const shape = imageMask(d.mask, kinds);
  return { open: shape === "both ways" || shape === "windowed", words: imageMaskWords(d.mask, kinds, layer) };
}

/** Draw the view from the current chosen-head answer; false while there is none. */
export function draw(state) {
  const head = currentHead(state);
  if (!head) return false;
  // the server's own numbers and words: its q·kᵀ, its scores before and after the softcap
  // (masked entries null), the layer's divisor, softcap, window and mask
  const { detail, layer, d } = head;
  const T = detail.tokens.length;
  // a head of two softmaxes (a quirk's weights parts): the steps are its first softmax's (the head view draws both)
  const first = firstPart(state.model, d);
  const pattern = first ?? d.pattern;
  // a long text's matrices are max-pooled: the rows and columns are blocks of tokens; the keys: a cross stack's
  // are the source's tokens (stacks.js), the queries the target's
  const keys = keyTokens(state, detail);
  const pooled = d.block > 1;
  const span = (n, words, prefix) => (_, c) => `${prefix} ${spanWords(words, ...blockSpan(n, d.block, c))}`;
  const cells = pooled
    ? {
        rows: Array.from(d.pattern, span(T, detail.tokens, "queries")),
        cols: Array.from(d.pattern[0], span(keys.length, keys, "keys")), // a typed row maps to no words
      }
    : null;
  // the stack's own mask: every key seen (an encoder's, cross-attention), but for a local layer's band
  const visible = seesAll(state, detail);
  const kinds = maskKinds(d.mask);
  const columns = window.matchMedia(NARROW).matches ? 2 : null;
  // the answer's bands along each step's tokens (quirkbands.js); a pooled picture's cells are blocks: none
  const bands = cells ? [] : tokenBands(state.model, detail);
  drawPlot(
    byId("mask-steps"),
    `${idOf(detail)}|${columns}`,
    () =>
      withSteps(bands, detail.tokens, maskStepsFigure({
        tokens: detail.tokens,
        keys,
        axes: stackAxes(state, detail),
        visible,
        raw: d.attn_scores_raw,
        uncapped: d.attn_scores_uncapped,
        scores: d.attn_scores,
        mask: d.mask,
        pattern,
        layer,
        kinds,
        causal: detail.causal || visible,
        cells,
        columns,
      })),
    "attnscope-mask-steps",
  );
  const image = imageNotes(detail, d, layer.layer);
  const sides = stackSides(state, detail);
  const cross = !!sides && sides.query !== sides.key; // cross-attention: target queries, source keys
  const notes = pipelineNotes({
    ...{ causal: detail.causal, layer, kinds, headDim: headDim(state), image },
    ...{ encoder: visible, cross },
  });
  const list = byId("pipeline-notes");
  if (list.children.length !== notes.length) {
    list.replaceChildren(...notes.map(() => document.createElement("li")));
    list.style.setProperty("--steps", String(notes.length));
  }
  [...list.children].forEach((li, i) => setText(li, notes[i]));
  if (cells) {
    // row sums need every cell of a row; these cells are block maxima
    setText(
      byId("row-sums"),
      `${T} tokens, drawn as ${d.pattern.length}×${d.pattern[0].length} cells: each is the largest value of a ` +
        `${d.block}×${d.block} block of queries and keys, so a row of this picture is not a row of the softmax, ` +
        `and its cells do not sum to 1 (every softmax row does).`,
    );
  } else {
    const sums = pattern.map((row) => row.reduce((a, v) => a + v, 0));
    const lo = Math.min(...sums);
    const hi = Math.max(...sums);
    setText(byId("row-sums"), rowSumWords(state.model, lo, hi, layer, d));
  }
  const words = unscaled(layer) ? "1 (what-if: no scaling)" : divisorWords(layer, headDim(state));
  setText(
    byId("pipeline-divisor"),
    layer.softcap ? `${words}, then the softcap ${softcapWords(layer.softcap)}` : words,
  );
  return true;
}

/**
 * What the Σ row column says: rows sum to 1, or what the layer's quirks say they sum to (`sums`), then what else
 * its quirks say of these steps (`steps`). `d`: the head's fields.
 */
export function rowSumWords(model, lo, hi, layer, d) {
  const range = `the smallest row sum is ${lo.toFixed(6)}, the largest ${hi.toFixed(6)}`;
  const sums = quirkWords(model, "sums", { layer, fields: d });
  const head = sums ? `${sums}: ${range}.` : `After softmax every row sums to 1: ${range}.`;
  return head + quirkWords(model, "steps", { layer, fields: d });
}

/** The steps' figure with the answer's bands along every step's keys and queries (the row sums' panel aside). */
function withSteps(bands, tokens, fig) {
  const pairs = fig.data.filter((t) => t.coloraxis).map((t) => [t.xaxis, t.yaxis]);
  return withBands(fig, { tokens, bands, expanded: true, pairs });
}

/** The first of a head's weights parts (a head of two softmaxes), null for a head of one. */
function firstPart(model, d) {
  const f = (model?.fields ?? []).find((x) => x.sits === "parts" && x.kind === "parts" && d[x.name]);
  return f ? d[f.name][0] : null;
}

/** Below this width the steps stand in two rows (style.css gives the plot the height for them). */
const NARROW = "(max-width: 600px)";
