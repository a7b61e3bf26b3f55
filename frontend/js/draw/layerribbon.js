// The layer ribbon over the grid: every layer of the model in its own order, each named by what it
// is (GET /api/model `layers`): softmax attention over every earlier token, a sliding window,
// chunks, no rotary positions; or no softmax attention at all (linear attention, a convolution,
// a state-space model), so that nobody takes a hybrid's missing rows for a bug. Hidden where
// every layer is full softmax attention.

import { setHidden } from "../dom.js";

/** What each type of layer is, in a few words (the chip's tooltip). */
export const LAYER_WORDS = {
  full: "softmax attention over every earlier token",
  sliding: "softmax attention over a sliding window",
  chunked: "softmax attention inside its chunk of tokens",
  nope: "softmax attention over every earlier token, without rotary positions (NoPE)",
  linear: "linear attention: no softmax, no attention map, so no heads to draw",
  conv: "a short convolution: no attention map, so no heads to draw",
  ssm: "a state-space model (Mamba): no attention map, so no heads to draw",
  gated_deltanet: "Gated DeltaNet, linear in its values: its implicit attention M is drawn in the grid and under it",
  kimi_delta: "Kimi Delta Attention, linear in its values: its implicit attention M is drawn in the grid and under it",
  mamba2: "Mamba-2, linear in its values: its implicit attention M is drawn in the grid and under it",
  lightning: "lightning attention, linear in its values: its implicit attention M is drawn in the grid and under it",
  mamba1: "Mamba-1, linear in its values: the mean over channels of its |M| is drawn in the grid and under it",
  short_conv: "a short convolution, linear in its values: its mean over channels of |M| drawn in the grid and under it",
};

/** One chip per layer: `{index, type, text, title, attends}`; an empty list where every layer is full attention. */
export function ribbonChips(model) {
  const layers = model?.layers ?? [];
  if (layers.every((l) => l.type === "full" && !l.note)) return [];
  return layers.map((l) => {
    const size = l.window ? ` ${l.window}` : l.chunk ? ` ${l.chunk}` : "";
    const attends = (model.attention_layers ?? []).includes(l.index);
    const title = `Layer ${l.index}: ${LAYER_WORDS[l.type] ?? l.type}${l.window ? ` of ${l.window} tokens` : ""}${
      l.chunk ? ` (chunks of ${l.chunk} tokens)` : ""
    }${l.note ? `. ${l.note}` : ""}${l.mixer ? `. Beside it: ${LAYER_WORDS[l.mixer] ?? l.mixer}` : ""}`;
    const implicit = !!l.implicit;
    const text = `L${l.index} ${l.type}${size}${l.mixer ? ` + ${l.mixer}` : ""}`; // Falcon-H1: attention + mamba2
    return { index: l.index, type: l.type, text, title, attends, implicit };
  });
}

/** Draw the ribbon into `el` (once per model). */
export function renderLayerRibbon(el, model) {
  if (!el) return;
  const chips = ribbonChips(model);
  const sig = JSON.stringify(chips);
  if (el.dataset.signature === sig) return;
  el.dataset.signature = sig;
  setHidden(el, chips.length === 0);
  el.replaceChildren(
    ...chips.map((c) => {
      const span = document.createElement("span");
      const kind = c.attends ? "" : c.implicit ? " layer-implicit" : " layer-no-heads";
      span.className = `layer-chip layer-${c.type}${kind}`;
      span.textContent = c.text;
      span.title = c.title;
      span.dataset.layer = String(c.index);
      span.dataset.type = c.type;
      return span;
    }),
  );
}
