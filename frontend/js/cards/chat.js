// The conversation beside the text (docs/API.md "Conversations"): on a chat model (GET /api/model `chat`), turns
// of a system prompt, a user and an assistant, each with its role, added, removed and moved up or down. While it
// has turns, the subject sends them as `messages` instead of the text (subject.js) and the link keeps them
// (`chat=`). The field is `#chat-field`, built here; the state's `messages` is written here alone.

import { setHidden, setText } from "../dom.js";
import { chooseToken } from "../state.js";
import { ROLES, modelTakes } from "../subject.js";

const FIELD = `
  <div class="chat-head">
    <span class="field-label" id="chat-label">Conversation</span>
    <span class="muted small" data-testid="chat-note"></span>
    <button type="button" class="btn" data-act="start" data-testid="chat-start">Write a conversation</button>
    <button type="button" class="btn" data-act="system" data-testid="chat-system">+ system prompt</button>
    <button type="button" class="btn" data-act="stop" data-testid="chat-stop">Back to the text</button>
  </div>
  <ol class="chat-turns" data-testid="chat-turns" aria-labelledby="chat-label"></ol>
  <button type="button" class="btn" data-act="add" data-testid="chat-add">+ turn</button>`;

/** The role a new turn at the end takes: the assistant answers a user, a user follows anything else. */
export const nextRole = (messages) => (messages.at(-1)?.role === "user" ? "assistant" : "user");

/**
 * The conversation after `act` on turn `i` (a new array: the answers are keyed by what is sent): "add" a turn at
 * the end, "system" a system prompt first, "remove" turn i, "up" / "down" move it, "role" / "content" set its
 * role or content to `value`, "start" the text as its first user turn, "stop" no conversation.
 */
export function editTurns(messages, act, i = -1, value = null, text = "") {
  const out = messages.map((m) => ({ ...m }));
  const swap = (a, b) => ([out[a], out[b]] = [out[b], out[a]]);
  if (act === "start") return [{ role: "user", content: text }];
  if (act === "stop") return [];
  if (act === "add") out.push({ role: nextRole(out), content: "" });
  else if (act === "system") out.unshift({ role: "system", content: "" });
  else if (act === "remove") out.splice(i, 1);
  else if (act === "up" && i > 0) swap(i - 1, i);
  else if (act === "down" && i < out.length - 1) swap(i, i + 1);
  else if (act === "role" && ROLES.includes(value)) out[i].role = value;
  else if (act === "content") out[i].content = value;
  return out;
}

/** One turn's row: its number, the role select, the content and its buttons (the content is not redrawn). */
function turnRow(i) {
  const li = document.createElement("li");
  li.className = "chat-turn";
  li.dataset.turn = String(i);
  li.dataset.testid = "chat-turn";
  const role = document.createElement("select");
  role.dataset.act = "role";
  role.dataset.testid = "chat-role";
  role.setAttribute("aria-label", `Role of turn ${i + 1}`);
  for (const r of ROLES) role.append(new Option(r, r));
  const content = document.createElement("textarea");
  Object.assign(content, { rows: 1, spellcheck: false });
  content.dataset.act = "content";
  content.dataset.testid = "chat-content";
  content.setAttribute("aria-label", `Turn ${i + 1}`);
  const buttons = [
    ["up", "↑", "Move this turn up"],
    ["down", "↓", "Move this turn down"],
    ["remove", "✕", "Remove this turn"],
  ].map(([act, text, title]) => {
    const b = Object.assign(document.createElement("button"), { type: "button", className: "btn", textContent: text });
    Object.assign(b, { title });
    b.setAttribute("aria-label", `${title} (turn ${i + 1})`);
    b.dataset.act = act;
    b.dataset.testid = `chat-${act}`;
    return b;
  });
  li.append(role, content, ...buttons);
  return li;
}

/** The field, drawn from the state: hidden without a chat model; the turns as `state.messages` has them. */
function drawField(state, field) {
  const chat = modelTakes(state, "messages");
  setHidden(field, !chat);
  if (!chat) return;
  const turns = state.messages;
  const on = turns.length > 0;
  for (const [act, shown] of [
    ["start", !on],
    ["stop", on],
    ["add", on],
    ["system", on && turns[0].role !== "system"],
  ])
    setHidden(field.querySelector(`[data-act=${act}]`), !shown);
  setText(
    field.querySelector("[data-testid=chat-note]"),
    on ? "sent instead of the text, through the model's chat template" : "this model has a chat template",
  );
  const list = field.querySelector(".chat-turns");
  while (list.children.length < turns.length) list.append(turnRow(list.children.length));
  while (list.children.length > turns.length) list.lastElementChild.remove();
  turns.forEach((m, i) => {
    const row = list.children[i];
    const [role, content] = [row.querySelector("select"), row.querySelector("textarea")];
    if (role.value !== m.role) role.value = m.role;
    if (row.dataset.role !== m.role) row.dataset.role = m.role;
    if (content.value !== m.content && document.activeElement !== content) content.value = m.content;
    const [up, down] = [row.querySelector("[data-act=up]"), row.querySelector("[data-act=down]")];
    if (up.disabled !== (i === 0)) up.disabled = i === 0;
    if (down.disabled !== (i === turns.length - 1)) down.disabled = i === turns.length - 1;
  });
}

/** The field in `#chat-field`, wired once; `app`: {state, update, refreshNow, data}. Returns the card. */
export function installChat(app) {
  const field = document.getElementById("chat-field");
  if (!field) return { draw() {} };
  field.innerHTML = FIELD;
  const { state } = app;
  const change = (messages, typing) => {
    state.messages = messages;
    chooseToken(state, null); // a new prompt: the last token again
    app.update();
    if (typing) app.data.scheduleRefresh();
    else app.refreshNow();
  };
  const turnOf = (el) => Number(el.closest("[data-turn]")?.dataset.turn ?? -1);
  field.addEventListener("click", (ev) => {
    const act = ev.target.closest("button")?.dataset.act;
    if (act) change(editTurns(state.messages, act, turnOf(ev.target), null, state.text), false);
  });
  field.addEventListener("change", (ev) => {
    if (ev.target.dataset.act === "role") change(editTurns(state.messages, "role", turnOf(ev.target), ev.target.value));
  });
  field.addEventListener("input", (ev) => {
    if (ev.target.dataset.act !== "content") return;
    change(editTurns(state.messages, "content", turnOf(ev.target), ev.target.value), true);
  });
  return { draw: (s) => drawField(s, field) };
}
