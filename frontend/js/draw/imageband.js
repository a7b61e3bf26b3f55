// The image's run of tokens (an answer's `token_kinds`): where it is, its words, and what the mask does
// inside it. The band it makes on a token map's axes is drawn by quirkbands.js (from the field table's
// `token_kinds` row, as every band), its chip in the token strip by tokenstrip.js.

import { imageMask, imagePositions } from "./imagemap.js";

/**
 * The image's run: `{from, to, n}`, from its first image token to its last (the markers between them too: Pixtral's
 * row breaks, Idefics3's tile tags), `n` the image tokens in it; null without image tokens.
 */
export function imageRun(kinds) {
  const img = kinds ? imagePositions(kinds) : [];
  if (!img.length) return null;
  return { from: img[0], to: img.at(-1), n: img.length };
}

/** The band's words: "image · 256 tokens". */
export const bandLabel = (run) => `image · ${run.n} token${run.n === 1 ? "" : "s"}`;

const MASK_WORDS = {
  none: () => "",
  "both ways": (l) =>
    `Inside the image the mask of layer ${l} is not causal: each image token also sees the image tokens after it.`,
  windowed: (l) =>
    `Inside the image the mask of layer ${l} is not causal: each image token also sees the image tokens after it, ` +
    "and the earlier ones within the sliding window.",
  causal: (l) => `The mask of layer ${l} is causal inside the image too: an image token sees the ones before it.`,
};

/** What the answer's T×T `mask` of `layer` does inside the image, in words ("" without an image or a mask). */
export function imageMaskWords(mask, kinds, layer) {
  const shape = kinds ? imageMask(mask, kinds) : null;
  return shape ? MASK_WORDS[shape](layer) : "";
}
