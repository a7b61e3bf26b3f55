// The answer a view asks for itself (rollout, two texts, q · k, lines, a selection), kept in one
// slot of the state as `{key, response, error}`: `key` says what it was asked with, so a view
// draws it only while it still matches. The layer's two rules: only the latest question of a
// slot counts (an answer that lands after a newer question was asked is dropped), and a question
// is asked once (while its slot holds its key, on its way, answered or refused, it is not sent
// again: a refusal stands until the question changes).

import { errorText, postJSON } from "./api.js";

/** POST `body` to `url` into `app.state[slot]`, tagged with `key`; the page redraws when it lands. */
export async function askInto(app, slot, key, url, body) {
  const state = app.state;
  if (state[slot]?.key === key) return; // asked already: the same question gets the same answer
  state[slot] = { key, response: null, error: null };
  try {
    const response = await postJSON(url, body);
    if (state[slot]?.key === key) state[slot] = { key, response, error: null };
  } catch (err) {
    if (state[slot]?.key === key) state[slot] = { key, response: null, error: errorText(err) };
  }
  app.update();
}

/**
 * What `state[slot]` holds for `key`: `{key, response, error}` while it answers that question (both null while it
 * is on its way), `{}` while it answers another or none; then `ask` (when given: the page can ask) is called,
 * e.g. `() => askInto(app, slot, key, url, body)`.
 */
export function answerFor(state, slot, key, ask = null) {
  if (state[slot]?.key === key) return state[slot];
  ask?.();
  return {};
}
