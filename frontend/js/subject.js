// What every request looks at, built in one place: its *subject* (docs/API.md "One subject on every route"):
// the text, or the conversation (`messages`) on a chat model, the image when one is loaded, the attention
// `stack` and the decoder's `target` on an encoder–decoder, and the what-ifs the route takes. Every body the page
// sends starts from `subject(state, url)`, and every answer is keyed by its body (answers.js `questionKey`), so a
// part added here is both sent and keyed. Which parts each route takes is the server's to say, once, in its request
// schemas: the page reads it from the OpenAPI document at start (`loadRoutes`, `routesOf`); GET /api/model's
// `subject` says which parts the model takes.

import { questionKey } from "./answers.js";
import { getJSON, isBlank } from "./api.js";
import { STACK_NAMES, chosenStack, gridLayers, manyStacks } from "./stacks.js";

const WHAT_IFS = ["causal", "scale", "ablate"];

/**
 * Each route that reads a body, by its url: the parts of the subject its request schema takes, read from the
 * OpenAPI document `spec` (each POST's request schema's properties that are a `SubjectPart`). Patching's subject is
 * two texts, its own fields (`clean` / `clean_messages`, `corrupt` / `corrupt_messages`) and no part: its parts are
 * the stack, the target and `add_generation_prompt` both texts are read with; the view sends its texts itself.
 */
export function routesOf(spec) {
  const schemas = spec?.components?.schemas ?? {};
  const parts = schemas.SubjectPart?.enum ?? [];
  const out = {};
  for (const [url, operations] of Object.entries(spec?.paths ?? {})) {
    const ref = operations.post?.requestBody?.content?.["application/json"]?.schema?.$ref;
    if (!ref) continue;
    const properties = schemas[ref.split("/").pop()]?.properties ?? {};
    out[url] = parts.filter((part) => part in properties);
  }
  return out;
}

/** Read the routes' parts (`routesOf`) from /openapi.json into `state.routes`, once: the model's load waits for it
 * (modelload.js); the notebook widget is handed the kernel's table instead. */
export async function loadRoutes(state) {
  state.routes ??= routesOf(await getJSON("/openapi.json"));
}

/** Whether the model takes `part` of a subject: as GET /api/model `subject` lists them, else by its own flags. */
export function modelTakes(state, part) {
  const m = state.model;
  if (Array.isArray(m?.subject)) return m.subject.includes(part);
  if (part === "image") return Boolean(m?.vision);
  if (part === "messages") return Boolean(m?.chat);
  if (part === "target") return m?.architecture === "encoder-decoder";
  return part === "text";
}

/** Whether the route `url` takes `part` of a subject ("messages", "image", "stack", "target", "causal", ...): as its
 * request schema says (`state.routes`, `routesOf`); nothing before the document is read. */
export const routeTakes = (state, url, part) => (state.routes?.[url] ?? []).includes(part);

/** The recording sent in place of the text: the one picked, dropped or recorded, on a speech model; else null. */
export const audioOf = (state) => (state.audio && modelTakes(state, "audio") ? state.audio : null);

/** The image sent with the text: the one picked beside it, where the model takes one; else null. */
export const imageOf = (state) => (state.image && modelTakes(state, "image") ? state.image : null);

/** The conversation sent instead of the text: the turns of the editor on a chat model; else null. */
export const messagesOf = (state) => (state.messages?.length && modelTakes(state, "messages") ? state.messages : null);

/** The decoder's text sent as `target`: the target field's on an encoder–decoder, unless blank (the model writes). */
export const targetOf = (state) => (modelTakes(state, "target") && !isBlank(state.target) ? state.target : null);

/** The `stack` sent: the chosen one, on a model of several stacks (a model of one has no choice to send). */
export const stackOf = (state) => (manyStacks(state.model) ? chosenStack(state) : null);

/** Whether there is nothing to ask about: an empty text box, or a conversation whose turns are all empty. */
export function blankSubject(state) {
  if (modelTakes(state, "audio")) return !audioOf(state); // a speech model hears a recording, not a text
  const messages = messagesOf(state);
  return messages ? messages.every((m) => isBlank(m.content)) : isBlank(state.text);
}

/** The request's `scale`: the model's own divisor, or 1 as the what-if. */
export const scaleParam = (state) => (state.scaled ? "model" : "none");

/**
 * The subject part of a body to `url`: `text` (or `messages` with a conversation), `image` when one is loaded
 * and the route takes it, the `stack` and `target` of an encoder–decoder, and the what-ifs the route takes
 * (`causal`, `scale`, `ablate`).
 */
export function subject(state, url) {
  const messages = routeTakes(state, url, "messages") ? messagesOf(state) : null;
  const out = messages ? { messages: messages.map(({ role, content }) => ({ role, content })) } : { text: state.text };
  const image = imageOf(state);
  if (image && routeTakes(state, url, "image")) out.image = image.data;
  const audio = audioOf(state);
  if (audio && routeTakes(state, url, "audio")) {
    delete out.text; // the recording is the whole source
    out.audio = audio.data;
  }
  const [stack, target] = [stackOf(state), targetOf(state)];
  if (stack && routeTakes(state, url, "stack")) out.stack = stack;
  if (target !== null && routeTakes(state, url, "target")) out.target = target;
  if (routeTakes(state, url, "causal")) out.causal = state.causal;
  if (routeTakes(state, url, "scale")) out.scale = scaleParam(state);
  if (routeTakes(state, url, "ablate")) out.ablate = state.ablate;
  return out;
}

const ATTENTION = "/api/attention";

/**
 * What the grid's request asks about: its subject and the layers it computes (requests.js `gridRequest` spreads
 * it, and adds only how the answer comes: thumbnails, statistics, encoding).
 */
export const gridAsks = (state) => ({ ...subject(state, ATTENTION), ...gridLayers(state.model) });

/**
 * What the chosen head's request asks about: its subject, the layer and the head (requests.js `detailRequest`
 * spreads it, and adds only how the answer comes: fields, pooling, precision, the predictions' temperature).
 */
export const headAsks = (state) => ({ ...subject(state, ATTENTION), layers: [state.layer], heads: [state.head] });

/** A body to /api/attention with its image and recording named by their ids (each one taken has its own), not
 * their bytes: what its answer is keyed by. */
function byIds(state, body) {
  const out = { ...body };
  if (out.image) out.image = imageOf(state).id;
  if (out.audio) out.audio = audioOf(state).id;
  return out;
}

/** The key of the answer to an /api/attention body that spreads `asks` (`gridAsks`, `headAsks`): that part of the
 * body itself (answers.js `questionKey`), so whatever the request asks about is what its answer is keyed by. */
export const attentionKey = (state, asks) => questionKey(ATTENTION, byIds(state, asks));

/**
 * The key of what `/api/attention` answers about (the grid, the chosen head) as far as the tokens go: its subject,
 * the image and recording by their ids; without the what-ifs when `whatIfs` is false (what the tokens depend on).
 */
export function subjectKey(state, whatIfs = true) {
  const body = byIds(state, subject(state, ATTENTION));
  if (!whatIfs) for (const part of WHAT_IFS) delete body[part];
  return JSON.stringify(body);
}

/** The link's keys of the stack (`stack=`), the target (`target=`) and the recording's key (`audio=`, never the
 * recording: cards/audiopick.js): read as given, written while chosen. */
export const seq2seqLink = {
  read(params, out) {
    if (STACK_NAMES.includes(params.get("stack"))) out.stack = params.get("stack");
    if (params.has("target")) out.target = params.get("target");
    if (params.has("audio")) out.audioLink = params.get("audio"); // the recording's key, not the recording
  },
  write(s, params) {
    if (s.stack) params.set("stack", s.stack);
    if (s.target) params.set("target", s.target);
    const audio = s.audio?.key ?? s.audioLink; // a link opened but its recording not dropped yet: kept
    if (audio) params.set("audio", audio);
  },
};

/** The roles a turn of a conversation may have (docs/API.md "Conversations"). */
export const ROLES = ["system", "user", "assistant"];

/** A conversation in a link (`chat=`): its turns as JSON `[[role, content], ...]`. */
export const messagesParam = (messages) => JSON.stringify(messages.map((m) => [m.role, m.content]));

/** A link's `chat=` read back: its turns whose role is one of ROLES and content a string (others left out). */
export function parseMessages(param) {
  let turns;
  try {
    turns = JSON.parse(param);
  } catch {
    return [];
  }
  if (!Array.isArray(turns)) return [];
  return turns
    .filter((t) => Array.isArray(t) && ROLES.includes(t[0]) && typeof t[1] === "string")
    .map(([role, content]) => ({ role, content }));
}
