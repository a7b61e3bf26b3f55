// Answers measured for particular inputs (the head effects, the switched-off heads' before →
// after, a generation, the predictions) remember those inputs. At render a card compares them
// with the inputs now and either follows (measures again by itself) or says in words what
// changed since, so that no card describes a text that is no longer in the box.

import { chosenPosition } from "./state.js";
import { imageOf, messagesOf, messagesParam, stackOf, targetOf } from "./subject.js";
import { offParam } from "./switchedoff.js";

/** Every input a measured answer can depend on, as it is now. */
export function inputsNow(state) {
  return {
    // the conversation, where one is sent, stands for the text
    text: messagesOf(state) ? messagesParam(state.messages) : state.text,
    image: imageOf(state)?.id ?? null,
    target: targetOf(state), // an encoder–decoder's: the decoder's text, and the stack looked at
    stack: stackOf(state),
    position: chosenPosition(state),
    ablate: offParam(state.ablate),
    causal: state.causal,
    scaled: state.scaled,
    temperature: state.temperature,
    effectsMode: state.effectsMode,
  };
}

const WORDS = {
  text: "the text",
  image: "the image",
  target: "the target",
  stack: "the stack",
  position: "the chosen token",
  ablate: "the switched-off heads",
  causal: "the causal mask switch",
  scaled: "the scaling switch",
  temperature: "the temperature",
  effectsMode: "zero or mean ablation",
};

/** The inputs named in `names`, as they are now: what an answer about to be measured is measured for. */
export function inputsFor(state, names) {
  const now = inputsNow(state);
  return Object.fromEntries(names.map((name) => [name, now[name]]));
}

/**
 * What changed since `inputs` were measured, in words ([] when the answer is current). A new
 * text is a new chosen token too (it goes back to the last one): only the text is named then.
 */
export function changedInputs(inputs, state) {
  const now = inputsNow(state);
  const changed = Object.keys(inputs).filter((name) => inputs[name] !== now[name]);
  const anew = ["text", "image", "target"].some((name) => changed.includes(name));
  return changed.filter((name) => name !== "position" || !anew).map((name) => WORDS[name]);
}

/** "Out of date: the text and the chosen token changed since `since`." */
export function outOfDateWords(changed, since) {
  const list = changed.length > 1 ? `${changed.slice(0, -1).join(", ")} and ${changed.at(-1)}` : changed[0];
  return `Out of date: ${list} changed since ${since}.`;
}

/** Whether a what-if switch is off: the head effects and generation run the model as trained regardless. */
export const whatIfOn = (state) => !state.causal || !state.scaled;
