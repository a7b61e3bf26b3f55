// Words of the page: pure functions of what the server answered (a layer's `divisor`,
// `divisor_rule`, `softcap`, `window`, its `mask`, the statistics), so that every caption,
// legend and tooltip says what this model computed, in every what-if (tests check them).
//
// Nothing here computes a number the server sends: the words only read the answer.

/** A number as the page writes it: at most 4 significant digits, no trailing zeros. */
export const num = (v) => String(Number(Number(v).toPrecision(4)));

/**
 * The name of a divisor from its rule (the answer's `divisor_rule`, or the model's):
 * "sqrt(head_dim)" → "√d_k", "sqrt(query_pre_attn_scalar)" → "√query_pre_attn_scalar",
 * "sqrt(head_dim) * (layer + 1)" → "√d_k·(layer + 1)"; "1" and numbers stay as they are.
 */
export function divisorName(rule) {
  const r = String(rule ?? "").replace(/^per layer: /, "");
  return r
    .replace(/sqrt\(([^)]*)\)/g, "√$1")
    .replace(/head_dim/g, "d_k")
    .replace(/ \* /g, "·");
}

/**
 * A layer's divisor in words: its name and its value, e.g. "√d_k = √32 = 5.657",
 * "√query_pre_attn_scalar = 8", "1", "2 (the scale asked for)".
 * `layer` holds `divisor` and `divisor_rule`; `headDim` (the model's) spells √d_k out.
 */
export function divisorWords(layer, headDim = null) {
  const { divisor, divisor_rule: rule } = layer;
  if (rule === "1") return "1";
  if (rule === "scale") return `${num(divisor)} (the scale asked for)`;
  if (/\(set by the model\)$/.test(rule)) return `${num(divisor)} (set by the model)`;
  const name = divisorName(rule);
  if (rule === "sqrt(head_dim)" && headDim) return `${name} = √${headDim} = ${num(divisor)}`;
  return `${name} = ${num(divisor)}`;
}

/** Whether the layer's scores were divided by 1 as a what-if (scale "none"). */
export const unscaled = (layer) => layer.divisor_rule === "1";

/** The softcap as a formula on a score s: "tanh(s / 20)·20". */
export const softcapWords = (cap) => `tanh(s / ${num(cap)})·${num(cap)}`;

/** A layer's divisor by name alone: "√d_k", "√query_pre_attn_scalar", "1", or its value. */
export function divisorShort(layer) {
  if (unscaled(layer)) return "1";
  const rule = layer.divisor_rule;
  if (rule === "scale" || /\(set by the model\)$/.test(rule)) return num(layer.divisor);
  return divisorName(rule);
}

/**
 * What a layer does to q·kᵀ before the mask, as a short formula for legends and hover labels:
 * "q·kᵀ ÷ √d_k", "tanh(q·kᵀ ÷ √query_pre_attn_scalar / 20)·20", "q·kᵀ ÷ 1".
 */
export function scoresFormula(layer) {
  const plain = `q·kᵀ ÷ ${divisorShort(layer)}`;
  return layer.softcap ? `tanh(${plain} / ${num(layer.softcap)})·${num(layer.softcap)}` : plain;
}

/** What the unscaled softmax is taken of: q·kᵀ, softcapped where the layer has a softcap. */
export const unscaledFormula = (layer) =>
  layer.softcap ? `tanh(q·kᵀ / ${num(layer.softcap)})·${num(layer.softcap)}` : "q·kᵀ";

// ---------------------------------------------------------------- the mask

/**
 * Which kinds of masked cells a mask holds (rows are queries, columns keys; 1 = may attend):
 * `after` keys after the query, `before` keys before it (outside a sliding window). Works on
 * a thumbnail mask too, whose block (i, j) covers the same block of queries and keys.
 */
export function maskKinds(mask) {
  let after = false;
  let before = false;
  for (let i = 0; i < mask.length; i++) {
    const row = mask[i];
    for (let j = 0; j < row.length; j++) {
      if (row[j]) continue;
      if (j > i) after = true;
      else if (j < i) before = true;
    }
  }
  return { after, before, any: after || before };
}

/**
 * Why query i may not see key j, in words (null when it may). With `block` > 1, (i, j) is a
 * thumbnail cell covering `block` queries and keys; it is masked only when all of them are.
 */
export function maskedWhy({ mask, i, j, window = null, chunk = null, block = 1 }) {
  if (mask[i][j]) return null;
  const one = block === 1;
  // the first query sees a later key: no causal mask, so a masked cell is outside an encoder's local band
  if (mask.length > 1 && mask[0][1]) {
    return one
      ? "masked: too far from the query for this local layer, which sees its neighbours on both sides"
      : "masked: every key here too far from every query for this local layer's band";
  }
  if (j > i) return one ? "masked: this key comes after the query" : "masked: every key here comes after every query";
  if (window) {
    return one
      ? `masked: outside the sliding window of ${window} tokens (${window} or more before the query)`
      : `masked: outside the sliding window of ${window} tokens (every key here ${window} or more before every query)`;
  }
  if (chunk) {
    return one
      ? `masked: in an earlier chunk than the query (chunked attention: chunks of ${chunk} tokens)`
      : `masked: every key here in an earlier chunk than every query (chunks of ${chunk} tokens)`;
  }
  return "masked";
}

/** Which earlier keys a layer masks, in words: outside its sliding window, or in an earlier chunk; null for neither. */
export function earlierMasked({ window = null, chunk = null }) {
  if (window) return `outside the sliding window of ${window} tokens`;
  if (chunk) return `in an earlier chunk (chunked attention: chunks of ${chunk} tokens)`;
  return null;
}

/** What hatching means under this mask, or null when nothing is masked (e.g. causal off). */
export function hatchMeaning(kinds, window, chunk = null) {
  if (!kinds.any) return null;
  const parts = [];
  if (kinds.after) parts.push("a later token");
  const earlier = earlierMasked({ window, chunk });
  if (kinds.before) parts.push(earlier ? `a token ${earlier}` : "an earlier token");
  return `hatched = masked (${parts.join(", or ")}), not a zero weight.`;
}

// ---------------------------------------------------------------- the views

/**
 * The notes under the mask pipeline: one per step, the softcap step where the layer has one. `image` (with an
 * image in the prompt, from the answer's mask: imageband.js): `{open}` whether an image token sees the image tokens
 * after it, `{words}` what the mask does inside the image. `encoder`: the stack's own mask sees every key (an
 * encoder's, cross-attention's) but for a local layer's band; `cross`: its queries the target's, its keys the source's.
 */
export function pipelineNotes({ causal, layer, kinds, headDim = null, image = null, encoder = false, cross = false }) {
  const d = divisorWords(layer, headDim);
  const notes = [
    cross
      ? "q·kᵀ: each target token's query dotted with every source token's key: cross-attention reads the whole " +
        "source."
      : encoder && !kinds.any
      ? "q·kᵀ: every query dotted with every key: an encoder lets each token see the whole text, the later tokens too."
      : kinds.any
      ? "q·kᵀ: each query dotted with the keys it may see; " +
        "the scores of masked keys are never used and are left blank."
      : causal
        ? "q·kᵀ: each query dotted with every key it may see; no key is masked in this text."
        : "q·kᵀ: every query dotted with every key; with the mask off all of them are used.",
    unscaled(layer)
      ? "÷ 1 (what-if: no scaling): the scores go into softmax as they are, larger than the model was trained " +
        "with, so softmax turns peaky."
      : `÷ ${d}: the same picture with numbers ${num(layer.divisor)} times smaller, so softmax stays soft.`,
  ];
  if (layer.softcap) {
    notes.push(
      `softcap ${softcapWords(layer.softcap)}: every score is bent into (−${num(layer.softcap)}, ` +
        `${num(layer.softcap)}); ` +
        "small scores barely move, large ones flatten, so no single key can take over the softmax.",
    );
  }
  let masking;
  if (cross && !kinds.any) {
    masking = "masked_fill(−∞): cross-attention masks nothing, so no score is set to −∞: every target token sees " +
      "every source token.";
  } else if (encoder) {
    masking = kinds.any
      ? "masked_fill(−∞): keys outside this local layer's band, the nearest tokens on both sides, are set to −∞ " +
        "(hatched): an encoder's local layer looks both ways, but not far."
      : "masked_fill(−∞): an encoder masks nothing, so no score is set to −∞: every query sees every key.";
  } else if (kinds.any) {
    const which = [];
    if (kinds.after) which.push("keys after the query");
    const earlier = earlierMasked(layer);
    if (kinds.before) which.push(earlier ? `keys ${earlier}` : "earlier keys");
    const back = layer.window
      ? ` or further back than ${layer.window - 1} tokens`
      : layer.chunk
        ? " or before the start of its chunk"
        : "";
    masking =
      `masked_fill(−∞): scores of ${which.join(" and of ")} are set to −∞ (hatched). ` +
      `A query cannot look ahead${image?.open ? " (but inside the image)" : ""}${
      kinds.before ? back : ""
    }.`;
  } else if (causal) {
    masking = "masked_fill(−∞): nothing to mask in this text, so no score is set to −∞.";
  } else {
    masking = "No mask (what-if): no score is set to −∞, so every query also sees the keys after it.";
  }
  notes.push(image?.words ? `${masking} ${image.words}` : masking);
  notes.push(
    kinds.any
      ? "softmax: each row becomes weights in [0, 1]. e^−∞ = 0, so masked keys get exactly 0."
      : "softmax: each row becomes weights in [0, 1] over every key; none is forced to 0.",
  );
  return notes;
}

/** The subtitle of the compare view's left panel. */
export function scalingLeftCaption({ causal, scaled }) {
  if (causal && scaled) return "what the model computes";
  if (!scaled && !causal) return "what-if: no scaling and no mask, so this is the same as the right panel";
  if (!scaled) return "what-if: scaling is off, so this is the same as the right panel";
  return "what-if: the mask is off; scaled as the model was trained";
}

/** The caption over the entropy lines; `quirks`: what the layer's quirks say the entropy is of (quirks.js). */
export function entropyCaption(layer, quirks = "") {
  if (unscaled(layer))
    return `Entropy of each query's weights. Scaling is off (what-if): both softmaxes see the same scores.${quirks}`;
  return (
    `Entropy of each query's weights. Without the division by ${divisorShort(layer)} the scores are ` +
    `larger, softmax turns peaky and entropy falls.${quirks}`
  );
}

/** The note beside the variance ratio, and the same in a sentence for the variance tab. */
export function ratioWords({ stats, layer, headDim, T }) {
  if (stats.variance_ratio === null || stats.variance_ratio === undefined) {
    const why =
      T === 1 ? "a one-token text has one score, and one number has variance 0" : "the scores softmax sees do not vary";
    return { note: `undefined: ${why}, so raw / scaled is 0 / 0`, sentence: `the ratio is undefined (0 / 0): ${why}.` };
  }
  const r = stats.variance_ratio.toFixed(2);
  if (unscaled(layer)) return { note: "no scaling (what-if): ratio 1", sentence: `the ratio is ${r} (no scaling).` };
  if (layer.softcap) {
    const why =
      `the softcap ${softcapWords(layer.softcap)} bends the scores after the division by ` + `${divisorShort(layer)}`;
    return {
      note: `not the divisor squared: ${why}`,
      sentence: `the ratio is ${r}, not the divisor squared, because ${why}.`,
    };
  }
  const rule = layer.divisor_rule;
  const sqrt = /^sqrt\(([^)]*)\)$/.exec(rule);
  if (rule === "sqrt(head_dim)") {
    return {
      note: `the divisor squared: d_k = ${headDim}`,
      sentence: `the ratio is ${r}, which is d_k = ${headDim}, because dividing by √d_k divides the variance by d_k.`,
    };
  }
  if (sqrt) {
    return {
      note: `the divisor squared: ${sqrt[1]}`,
      sentence:
        `the ratio is ${r}, which is ${sqrt[1]}, because dividing by √${sqrt[1]} divides the variance ` +
        `by ${sqrt[1]}.`,
    };
  }
  const d = num(layer.divisor);
  return {
    note: `the divisor squared: ${d}²`,
    sentence:
      `the ratio is ${r}, the divisor squared (${d}²), ` + `because dividing by ${d} divides the variance by ${d}².`,
  };
}
