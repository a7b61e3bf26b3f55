// Talking to the attnscope JSON API (docs/API.md). Same origin only.

import { decodeResponse } from "./wire.js";

/** An answer that was not 2xx; `message` is the server's `detail` made readable. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(formatDetail(detail) || `the server answered ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.detail = detail;
  }
}

/**
 * The server's `detail` as one line of text. It is usually a string; FastAPI's validation
 * errors are a list of `{loc, msg}` objects, shown as "text: String should have …".
 */
export function formatDetail(detail) {
  if (detail === undefined || detail === null) return "";
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item) => {
        if (typeof item === "string") return item;
        const loc = Array.isArray(item.loc) ? item.loc.filter((part) => part !== "body").join(".") : "";
        const msg = item.msg ?? JSON.stringify(item);
        return loc ? `${loc}: ${msg}` : msg;
      })
      .join("; ");
  }
  if (typeof detail === "object" && typeof detail.msg === "string") return detail.msg;
  return JSON.stringify(detail);
}

async function parse(response) {
  const type = response.headers.get("content-type") || "";
  const body = type.includes("json") ? await response.json().catch(() => null) : await response.text();
  if (!response.ok) {
    const detail = body && typeof body === "object" ? body.detail : body;
    throw new ApiError(response.status, detail || `${response.status} ${response.statusText}`);
  }
  return body;
}

export async function getJSON(url, signal) {
  return parse(await fetch(url, { headers: { Accept: "application/json" }, signal }));
}

export async function postJSON(url, body, signal) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  return decodeResponse(await parse(response));
}

/**
 * A channel that only ever delivers its newest answer. Each call aborts the one before it
 * and carries a sequence number; an answer arriving after a newer call started is dropped.
 * Resolves to `{ stale: true }` for dropped answers, `{ stale: false, value }` otherwise.
 */
export function latestOnly(url) {
  let seq = 0;
  let controller = null;
  return async function send(body) {
    const mine = ++seq;
    if (controller) controller.abort();
    controller = new AbortController();
    try {
      const value = await postJSON(url, body, controller.signal);
      return mine === seq ? { stale: false, value } : { stale: true };
    } catch (err) {
      if (mine !== seq || err.name === "AbortError") return { stale: true };
      throw err;
    }
  };
}

/**
 * The server's refusal of the text: the `{type, ctx}` of its 422 detail item about `text`
 * (ctx holds its numbers, e.g. the token `count` and the context `limit`); null for other errors.
 */
export function refusalOf(detail) {
  const item = Array.isArray(detail) ? detail[0] : null;
  if (!item || !Array.isArray(item.loc) || item.loc[1] !== "text") return null;
  return { type: item.type, ctx: item.ctx ?? {} };
}

/**
 * The token counter's words while the text has no tokens on screen. A refused text shows the
 * server's own numbers, the very ones the message (plainWords) says.
 */
export function countWords(refusal) {
  if (refusal?.type === "too_many_tokens") return `${refusal.ctx.count} tokens · at most ${refusal.ctx.limit}`;
  if (refusal?.type === "string_too_long") return `over ${refusal.ctx.max_length} characters`;
  return "no tokens";
}

/** The server's refusal of the text, in plain words; null for other errors. */
export function plainWords(detail) {
  const refusal = refusalOf(detail);
  if (!refusal) return null;
  const ctx = refusal.ctx;
  switch (refusal.type) {
    case "string_too_short":
    case "missing":
      return "Type some text to see its attention.";
    case "text_blank":
      return "The text is only spaces: type some words to see their attention.";
    case "string_too_long":
      return `That text is too long: the server reads at most ${ctx.max_length ?? "a limited number of"} characters.`;
    case "too_many_tokens":
      return (
        `That text is ${ctx.count} tokens; this model reads at most ${ctx.limit}. Shorten it to see its ` + `attention.`
      );
    case "text_no_tokens":
      return "That text has no tokens: type some words to see their attention.";
    default:
      return null;
  }
}

/** Readable text for any error thrown while talking to the server. */
export function errorText(err) {
  if (err instanceof ApiError) return plainWords(err.detail) ?? err.message;
  if (err instanceof TypeError) return "Cannot reach the attnscope server. Is it still running?";
  return String(err && err.message ? err.message : err);
}

/**
 * Whether a text is blank as the server counts it (Python's str.strip leaves nothing): nothing to
 * ask, so the page shows its empty state, not the server's refusal. JavaScript's \s differs from
 * Python's whitespace by U+FEFF (not whitespace to Python) and U+001C-U+001F, U+0085 (whitespace to Python).
 */
export const isBlank = (text) => /^(?:[^\S\ufeff]|[\x1c-\x1f\x85])*$/.test(text);
