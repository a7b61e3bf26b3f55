// The image view's pure parts: which of the answer's rows is drawn (the chosen head, a layer's
// mean, every layer's mean: POST /api/attention `query_row`), the heat cells over the image (one
// per image token, its box from `image.boxes`, its opacity the token's weight over the heaviest
// image token's), the token strip with the image's run as one band, and the words under it, the
// mask's shape inside the image read from the answer's `mask`. Nothing here averages a weight.

import { fmtSig } from "./figures.js";

export const MODES = [
  { id: "head", option: "the chosen head", words: (l, h) => `head L${l} · H${h}` },
  { id: "layer", option: "the chosen layer (mean of its heads)", words: (l) => `layer ${l}, the mean of its heads` },
  { id: "all", option: "every layer (mean of every head)", words: () => "every layer: the mean of every head" },
];

/** The weights over every key that `mode` draws, as the answer holds them; null when the answer lacks them. */
export function rowOf(rows, mode, layer, head) {
  if (!rows) return null;
  if (mode === "all") return rows.mean;
  const l = rows.layers.find((x) => x.layer === layer);
  if (!l) return null;
  return mode === "layer" ? l.mean : (l.heads[head] ?? null);
}

/** The image tokens' positions, in token order (the order of `image.boxes`). */
export const imagePositions = (kinds) => kinds.flatMap((k, i) => (k === "image" ? [i] : []));

/**
 * One cell per image token: `{position, patch, box, weight, opacity, left, top, width, height}`
 * (the last four in % of the image), the opacity the weight over the heaviest image token's.
 */
export function overlayCells(response, weights) {
  const { width, height, boxes } = response.image;
  const positions = imagePositions(response.token_kinds);
  const top = Math.max(0, ...positions.map((p) => weights[p]));
  return positions.map((p, i) => {
    const [x0, y0, x1, y1] = boxes[i];
    return {
      position: p,
      patch: i,
      box: boxes[i],
      weight: weights[p],
      opacity: top > 0 ? weights[p] / top : 0,
      left: (100 * x0) / width,
      top: (100 * y0) / height,
      width: (100 * (x1 - x0)) / width,
      height: (100 * (y1 - y0)) / height,
    };
  });
}

/** A box's edges in whole pixels of the uploaded image, as a hover or a caption says them: "x 160–185, y 0–40". */
export const boxWords = ([x0, y0, x1, y1]) =>
  `x ${Math.round(x0)}–${Math.round(x1)}, y ${Math.round(y0)}–${Math.round(y1)}`;

/** What a hover over a cell says: the token, its patch and box, its weight. */
export const cellWords = (c, n) =>
  `token ${c.position} · image patch ${c.patch + 1} of ${n} (${boxWords(c.box)}): weight ${fmtSig(c.weight)}`;

/** Which part of the picture the model saw (the answer's `image.seen`), when its processor left some out. */
export function seenWords({ width, height, seen }) {
  if (!seen || (seen[0] <= 0 && seen[1] <= 0 && seen[2] >= width && seen[3] >= height)) return null;
  return (
    `The model saw only ${boxWords(seen)} of the ${width} × ${height} picture: its processor crops the picture, ` +
    "and the rest never reaches it."
  );
}

/**
 * The token strip as chips: each text or marker token its own chip, the image's run of tokens one
 * band (`{band: true, from, to, n}`) unless `expanded`.
 */
export function stripItems(tokens, kinds, expanded) {
  const items = [];
  for (let i = 0; i < tokens.length; i++) {
    if (kinds[i] !== "image" || expanded) {
      items.push({ position: i, token: tokens[i], kind: kinds[i] });
      continue;
    }
    const last = items.at(-1);
    if (last?.band && last.to === i - 1) last.to = i;
    else items.push({ band: true, from: i, to: i });
  }
  for (const it of items) if (it.band) it.n = it.to - it.from + 1;
  return items;
}

/**
 * How the answer's `mask` treats the image tokens: "none" (no mask: every cell 1), "both ways" (every image
 * token sees every one), "windowed" (later ones too, but a sliding window hides the far earlier ones) or "causal".
 */
export function imageMask(mask, kinds) {
  const img = imagePositions(kinds);
  if (!mask || !img.length) return null;
  if (mask.every((row) => row.every((m) => m === 1))) return "none";
  if (img.every((q) => img.every((k) => mask[q][k] === 1))) return "both ways";
  return img.some((q) => img.some((k) => k > q && mask[q][k] === 1)) ? "windowed" : "causal";
}

const MASK_WORDS = {
  none: () => "The mask is off (what-if): every token sees every token, the image's both ways.",
  "both ways": (l) =>
    `The mask in layer ${l} is causal but for the image: inside it the mask is bidirectional, each image token ` +
    "sees every image token, after it too.",
  windowed: (l) =>
    `The mask in layer ${l} is causal but for the image: inside it the mask is bidirectional, each image token ` +
    "sees the image tokens after it, and those before it within the layer's sliding window.",
  causal: (l) => `The mask in layer ${l} is causal inside the image too: an image token sees the ones before it.`,
};

/** The words under the image: whose weights, which row, how the opacity reads, what the mask is. */
export function imageWords({ response, mode, layer, head, query, weights }) {
  const kinds = response.token_kinds;
  const n = imagePositions(kinds).length;
  const name = kinds[query] === "image" ? `image token ${query}` : `token ${query} “${response.tokens[query]}”`;
  const which = MODES.find((m) => m.id === mode).words(layer, head);
  const top = Math.max(0, ...imagePositions(kinds).map((p) => weights[p]));
  const parts = [
    `Where ${name} looks in the image: its weights on the image's ${n} tokens, ${which}. Each cell is the ` +
      "region of the image a token carries; " +
      (top > 0
        ? `its opacity is the token's weight over the heaviest image token's (${fmtSig(top)}).`
        : "here every image token's weight is 0 (masked, e.g. outside a sliding window), so none is shaded."),
  ];
  const seen = seenWords(response.image);
  if (seen) parts.push(seen);
  const shape = imageMask(response.mask, kinds);
  if (shape) parts.push(MASK_WORDS[shape](layer));
  if (mode === "all") parts.push("The mean over every layer mixes layers whose masks may differ (sliding windows).");
  return parts.join(" ");
}
