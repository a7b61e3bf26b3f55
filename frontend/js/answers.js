// The answers the page asks for besides the grid and the chosen head (rollout, two texts, q · k, lines, a
// selection, the lens, ...), each kept in one slot of the state as `{key, body, response, error, previous}`. A
// question is its url and its body: its key is the two serialised with sorted object keys (`questionKey`), never
// a key built by hand, so whatever a request sends is what its answer is keyed by. The layer's two rules: only
// the latest question of a slot counts (an answer that lands after a newer question was asked is dropped), and a
// question is asked once (while its slot holds its key, on its way, answered or refused, it is not sent again:
// a refusal stands until the question changes). A view says what it needs (`need(state)`: questions made by
// `question`); the data step (data.js `askNeeded`) asks them, and the view's `draw` reads `answerIn`.

import { errorText, postJSON } from "./api.js";

const POLL_MS = 1000; // an answer `{status: "loading"}` (a 202: the second model loading) is asked again this often
const WAIT_MS = 20 * 60 * 1000; // and no longer than this

/** A plain object's own keys sorted, at every depth: the same body always serialises to the same string. */
const sorted = (_, value) =>
  value && typeof value === "object" && !Array.isArray(value)
    ? Object.fromEntries(Object.keys(value).sort().map((k) => [k, value[k]]))
    : value;

/** The key of a question: its url and its body, serialised with sorted keys. */
export const questionKey = (url, body) => `${url} ${JSON.stringify(body, sorted)}`;

/** A question for `slot`: `{slot, url, body, key}` (what a view's `need` lists, and what its draw reads). */
export const question = (slot, url, body) => ({ slot, url, body, key: questionKey(url, body) });

/** The last answer a slot held (`{body, response}`), kept while it asks the next question (a view may draw it). */
const previousOf = (held) => (held?.response ? { body: held.body, response: held.response } : held?.previous ?? null);

/**
 * POST `body` to `url` into `app.state[slot]`, keyed by the question itself; the page redraws when it lands. An
 * answer saying it is still loading is asked again every second while the question holds (`loading: true`).
 */
export async function ask(app, slot, url, body) {
  const state = app.state;
  const key = questionKey(url, body);
  if (state[slot]?.key === key) return; // asked already: the same question gets the same answer
  const held = { key, body, response: null, error: null, loading: false, previous: previousOf(state[slot]) };
  state[slot] = held;
  try {
    for (let waited = 0; state[slot] === held; waited += POLL_MS) {
      const response = await postJSON(url, body);
      if (state[slot] !== held) break; // a newer question was asked meanwhile: this answer is dropped
      if (response?.status !== "loading") {
        state[slot] = { ...held, response, loading: false };
        break;
      }
      if (waited > WAIT_MS) throw new Error(`still loading after ${WAIT_MS / 60000} minutes`);
      held.loading = true;
      app.update();
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  } catch (err) {
    if (state[slot] === held) state[slot] = { ...held, error: errorText(err), loading: false };
  }
  app.update();
}

/** Ask every question of `questions` (a view's `need`), each into its slot. */
export function askAll(app, questions) {
  for (const q of questions) if (q) ask(app, q.slot, q.url, q.body);
}

/**
 * What the state holds for question `q`: `{key, body, response, error, loading, previous}` while its slot answers
 * it (response and error null while it is on its way), `{}` while the slot answers another question or none (or
 * `q` is null).
 */
export const answerIn = (state, q) => (q && state[q.slot]?.key === q.key ? state[q.slot] : {});
