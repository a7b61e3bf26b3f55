// The layer ribbon over the grid: every layer of the model in its own order, each named by what it is (GET
// /api/model `layers`, in the words of its `layer_kinds`): softmax attention over every earlier token, a sliding
// window, chunks, no rotary positions; or no softmax attention at all (linear attention, a convolution, a
// state-space model), so that nobody takes a hybrid's missing rows for a bug. Hidden where every layer is full
// softmax attention.

import { setHidden } from "../dom.js";

/** One chip per layer: `{index, type, text, title, attends}`; an empty list where every layer is full attention. */
export function ribbonChips(model) {
  const layers = model?.layers ?? [];
  if (layers.every((l) => l.type === "full" && !l.note)) return [];
  const words = (type) => model.layer_kinds?.[type] ?? type; // what each type is, in the server's words
  return layers.map((l) => {
    const size = l.window ? ` ${l.window}` : l.chunk ? ` ${l.chunk}` : "";
    const attends = (model.attention_layers ?? []).includes(l.index);
    const title = `Layer ${l.index}: ${words(l.type)}${l.window ? ` of ${l.window} tokens` : ""}${
      l.chunk ? ` (chunks of ${l.chunk} tokens)` : ""
    }${l.note ? `. ${l.note}` : ""}${l.mixer ? `. Beside it: ${words(l.mixer)}` : ""}`;
    const implicit = !!l.implicit;
    const text = `L${l.index} ${l.type}${size}${l.mixer ? ` + ${l.mixer}` : ""}`; // a mixer beside attention
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
