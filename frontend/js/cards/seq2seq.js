// A notebook widget's encoder–decoder cards (attnscope.show(text, target=..., stack=...)): the page's own stack
// picker (stacks.js) and target field (target.js) in the widget's elements. Their choices go to the kernel as the
// widget's traitlets `stack` and `target` (with the head fitted to the stack), and "Write it" asks the kernel, which
// writes the target and puts it in `target` (app/notebook/widget.py `write_target`).

import { fitToModel } from "../modelload.js";
import { installStacks } from "./stacks.js";
import { installTarget } from "./target.js";

/** The kernel's "Write it": it writes the target and answers {"type": "written", "target"} (or "error"). */
function writtenByKernel(model) {
  return new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (msg?.type !== "written") return;
      model.off("msg:custom", onMessage);
      if (msg.error) reject(new Error(msg.error));
      else resolve(msg.target);
    };
    model.on("msg:custom", onMessage);
    model.send({ type: "write" });
  });
}

/**
 * An encoder–decoder's stack picker and target field: the page's own cards (cards/stacks.js, cards/target.js) in the
 * widget's elements, their choices sent to the kernel (the stack with the head fitted to it, the target as typed).
 * Returns the cards and the cleanup.
 */
export function installSeq2seq({ model, el, state, update, push }, debounceMs) {
  let typing = null;
  const send = () => {
    clearTimeout(typing);
    push({ stack: state.stack ?? "", target: state.target, layer: state.layer, head: state.head });
  };
  const app = {
    state,
    update,
    refreshNow: send,
    write: () => writtenByKernel(model),
    data: {
      fitToModel: () => fitToModel(state),
      scheduleRefresh() {
        clearTimeout(typing);
        typing = setTimeout(send, debounceMs);
      },
    },
  };
  const cards = [
    installStacks(app, el.querySelector(".stack-field")),
    installTarget(app, el.querySelector(".target-field")),
  ];
  return { cards, stop: () => clearTimeout(typing) };
}
