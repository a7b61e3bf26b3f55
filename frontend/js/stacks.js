// The attention stacks of a model (docs/API.md "Encoders and encoder–decoders"): GET /api/model `stacks` lists
// them, each `{name, n_layer, n_head, query, key}` with whose tokens its queries and keys are ("source": the
// encoder's, the text; "target": the decoder's). A decoder has one stack, an encoder one, an encoder–decoder three
// (`encoder`, `decoder`, `cross`). The chosen one (`state.stack`, null: the model's default) is a part of every
// request's subject (subject.js); these functions read the model and the answers, and compute no number.

/** The picker's words for each stack, in its order. */
export const STACK_LABELS = { encoder: "Encoder", decoder: "Decoder", cross: "Cross" };

/** What a stack's side is, in words: the source is the text the encoder reads, the target what the decoder writes. */
const SIDE_WORDS = { source: "source (the encoder's text)", target: "target (the decoder's text)" };

/** The model's stacks (GET /api/model `stacks`), [] before it is known. */
export const stacksOf = (model) => model?.stacks ?? [];

/** Whether the model has more than one stack to choose from (an encoder–decoder): the picker is shown. */
export const manyStacks = (model) => stacksOf(model).length > 1;

/** The stack a request looks at by default: the decoder where there is one, else the first (an encoder's). */
const defaultStack = (model) => {
  const names = stacksOf(model).map((s) => s.name);
  return names.includes("decoder") ? "decoder" : (names[0] ?? null);
};

/** The chosen stack's name: `state.stack` where the model has it, else the model's default (null before it). */
export function chosenStack(state) {
  const names = stacksOf(state.model).map((s) => s.name);
  return names.includes(state.stack) ? state.stack : defaultStack(state.model);
}

/** The chosen stack's description (`{name, n_layer, n_head, query, key}`), or null before the model is known. */
export const stackInfo = (state) => stacksOf(state.model).find((s) => s.name === chosenStack(state)) ?? null;

/**
 * Words for a stack whose rows are one part of a softmax it shares with another stack (`merged_softmax`: a
 * decoder that attends to its own tokens and the source's in one softmax), or "" for a stack of its own.
 */
export function sharedSoftmaxWords(state) {
  const s = stackInfo(state);
  if (!s?.merged_softmax) return "";
  const others = stacksOf(state.model).filter((o) => o.merged_softmax && o.name !== s.name);
  const names = others.map((o) => `the ${STACK_LABELS[o.name] ?? o.name} stack`).join(" and ");
  return (
    `One softmax with ${names}: each ${s.query} token's row here is one block of a row over the target and the ` +
    "source together, so its weights here and there add up to 1 together, not each."
  );
}

/** The stack an answer is of, by its `stack` (else the chosen one): its description, or null. */
const answerStack = (state, response) =>
  stacksOf(state.model).find((s) => s.name === (response?.stack ?? chosenStack(state))) ?? null;

/**
 * The model as the chosen stack shows it: its layers and heads are the stack's own (an encoder–decoder's encoder
 * may have more layers than its decoder). The model itself where it has one stack.
 */
export function stackModel(state) {
  const m = state.model;
  const s = stackInfo(state);
  if (!manyStacks(m) || !s) return m;
  const layers = Array.from({ length: s.n_layer }, (_, i) => i);
  return { ...m, n_layer: s.n_layer, n_head: s.n_head, attention_layers: layers };
}

/**
 * The tokens on the key axis of an answer: its `source_tokens` or `target_tokens` as its stack's keys are the
 * source's or the target's (the cross stack: the source), else its `tokens` (the query side, as every answer has).
 */
export function keyTokens(state, response) {
  const s = answerStack(state, response);
  return (s && response?.[`${s.key}_tokens`]) || response.tokens;
}

/**
 * Whose tokens the queries and the keys of an answer's stack are: `{query, key}`, each "source" or "target"; null for
 * a model of one stack (its queries and keys are one text's).
 */
export function stackSides(state, response = null) {
  const s = answerStack(state, response);
  return manyStacks(state.model) && s ? { query: s.query, key: s.key } : null;
}

/**
 * The axes' names of an answer's maps: `{query, key}` in words ("query: target (the decoder's text)"), or null for
 * a model of one stack (its maps keep their plain names).
 */
export function stackAxes(state, response = null) {
  const sides = stackSides(state, response);
  return sides && { query: `query: ${SIDE_WORDS[sides.query]}`, key: `key: ${SIDE_WORDS[sides.key]}` };
}

/**
 * Whether an answer's stack sees every key but for a local layer's band: its keys are the source's (an encoder's
 * self-attention, cross-attention), whose mask hides nothing; a decoder's keys are its own text's, a triangle.
 */
export const seesAll = (state, response = null) => answerStack(state, response)?.key === "source";

/** What the chosen stack is, in one sentence for the captions ("" for a model of one stack). */
export function stackWords(state, response = null) {
  const s = answerStack(state, response);
  if (!manyStacks(state.model) || !s) return "";
  const what = {
    encoder: "The encoder's self-attention: source × source, every token sees every other (no triangle).",
    decoder: "The decoder's self-attention: target × target, each target token sees itself and those before it.",
    cross:
      "Cross-attention: each target token (a row, the decoder's query) looks at the source's tokens (the " +
      "columns, the encoder's keys and values).",
  };
  return ` ${what[s.name]}`;
}

/** The side whose tokens the chosen stack's queries are ("source" or "target"), or null for a model of one stack. */
export const querySide = (state) => (manyStacks(state.model) ? (stackInfo(state)?.query ?? null) : null);

/** A link's stack (`stack=`), read as given: fitted to the model once it is known (`fitStack`). */
export const STACK_NAMES = Object.keys(STACK_LABELS);

/**
 * The chosen stack fitted to the model: a stack the model lacks is dropped (the default is shown), and the note
 * that says so is returned (null when the stack holds).
 */
export function fitStack(state) {
  if (state.stack === null || !state.model) return null;
  if (stacksOf(state.model).some((s) => s.name === state.stack)) return null;
  const names = stacksOf(state.model).map((s) => s.name);
  const asked = state.stack;
  chooseStack(state, null);
  return `This link names the ${asked} stack; ${state.model.name} has ${names.join(" and ")} attention only.`;
}

/**
 * The model's layers with softmax attention, by their numbers (a hybrid's others have no heads); every layer
 * before /api/model said.
 */
export const attentionLayers = (model) =>
  model?.attention_layers ?? Array.from({ length: model?.n_layer ?? 4 }, (_, i) => i);

/** A hybrid's grid names every attention and value-linear layer (a mixer beside attention: `mixers`); else {}. */
export function gridLayers(model) {
  const all = model?.layers ?? [];
  const implicit = all.filter((l) => l.implicit).map((l) => l.index);
  const beside = all.filter((l) => l.mixer && !l.implicit).map((l) => l.index);
  if (!implicit.length && !beside.length) return {};
  const layers = [...attentionLayers(model), ...implicit].sort((a, b) => a - b);
  return beside.length ? { layers, mixers: beside } : { layers };
}

/** Choose the attention stack looked at (null: the model's default). */
export function chooseStack(state, name) {
  state.stack = name;
}
