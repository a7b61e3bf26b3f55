// Captions that depend on the what-if switches: pure functions of the state, so that every
// combination of "causal mask" and "scaling" gets words that are true for it (tests check all).

/** The divisor in words: "√32" for the usual rule, else its value. */
export function divisorWords(divisor, headDim) {
  if (divisor === 1) return "1";
  return Math.abs(divisor - Math.sqrt(headDim)) < 1e-9 ? `√${headDim}` : divisor.toPrecision(4);
}

/** The four notes under the mask pipeline, for this state and divisor. */
export function pipelineNotes({ causal, divisor, headDim }) {
  const d = divisorWords(divisor, headDim);
  return [
    causal
      ? "q·kᵀ: each query dotted with the keys it may see; the scores of later keys are never used and are left blank."
      : "q·kᵀ: every query dotted with every key; with the mask off all of them are used.",
    divisor === 1
      ? "÷ 1 (what-if: no scaling): the scores go into softmax as they are, larger than the model was trained with, so softmax turns peaky."
      : `÷ ${d}: the same picture with numbers ${d} times smaller, so softmax stays soft.`,
    causal
      ? "masked_fill(−∞): scores of keys after the query are set to −∞ (hatched). A query cannot look ahead."
      : "No mask (what-if): no score is set to −∞, so every query also sees the keys after it.",
    causal
      ? "softmax: each row becomes weights in [0, 1]. e^−∞ = 0, so masked keys get exactly 0."
      : "softmax: each row becomes weights in [0, 1] over every key; none is forced to 0.",
  ];
}

/** The subtitle of the compare view's left panel. */
export function compareLeftCaption({ causal, scaled }) {
  if (causal && scaled) return "what the model computes";
  if (!scaled && !causal) return "what-if: no scaling and no mask, so this is the same as the right panel";
  if (!scaled) return "what-if: scaling is off, so this is the same as the right panel";
  return "what-if: the mask is off; scaled as the model was trained";
}
