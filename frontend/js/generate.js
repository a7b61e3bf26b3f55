// Generation (issue 18): "Continue" streams POST /api/generate into the text box token by
// token, and a strip shows where each new token looked: one row per new token, one column per
// earlier token, coloured by the attention of the chosen head (or the mean of every head).
// A click on "Stop" aborts the request; the server stops at the next token.

import { errorText } from "./api.js";

/** Read an NDJSON body line by line; `onLine(obj)` for each. */
export async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (line) onLine(JSON.parse(line));
    }
  }
  if (buffer.trim()) onLine(JSON.parse(buffer));
}

/** A step's row to draw: the chosen head's, or the mean over every layer and head. */
export function stripRow(attention, layer, head, mode) {
  if (mode === "head") return attention[layer]?.[head] ?? attention[0][0];
  const n = attention[0][0].length;
  const out = new Float64Array(n);
  let count = 0;
  for (const heads of attention) {
    for (const row of heads) {
      for (let k = 0; k < n; k++) out[k] += row[k];
      count += 1;
    }
  }
  return Array.from(out, (v) => v / count);
}

/** Install the button, the strip and its controls; `ctx`: {state, els, changeText, refreshNow, update}. */
export function installGenerate(ctx) {
  const { state, els } = ctx;
  const box = document.createElement("div");
  box.className = "generate-box";
  box.dataset.testid = "generate";
  box.innerHTML = `
    <div class="generate-controls">
      <button type="button" class="btn" data-testid="generate-run">Continue</button>
      <label class="small">tokens <input type="number" min="1" max="256" value="20" data-testid="generate-count" /></label>
      <label class="small">strip <select data-testid="generate-mode">
        <option value="head">chosen head</option><option value="mean">mean of all heads</option></select></label>
      <span class="muted small" data-testid="generate-status" aria-live="polite"></span>
    </div>
    <canvas class="generate-strip" data-testid="generate-strip" hidden></canvas>`;
  els.textInput.closest("div").append(box);
  const button = box.querySelector("[data-testid=generate-run]");
  const count = box.querySelector("[data-testid=generate-count]");
  const mode = box.querySelector("[data-testid=generate-mode]");
  const status = box.querySelector("[data-testid=generate-status]");
  const strip = box.querySelector("[data-testid=generate-strip]");
  let controller = null;
  let steps = [];

  function drawStrip() {
    if (!steps.length) {
      strip.hidden = true;
      return;
    }
    strip.hidden = false;
    const keys = steps.at(-1).attention[0][0].length;
    const cell = Math.max(2, Math.min(10, Math.floor(560 / keys)));
    strip.width = keys * cell;
    strip.height = steps.length * cell;
    strip.style.width = `${strip.width}px`;
    const g = strip.getContext("2d");
    g.fillStyle = "#eceef2";
    g.fillRect(0, 0, strip.width, strip.height);
    steps.forEach((s, r) => {
      const row = stripRow(s.attention, state.layer, state.head, mode.value);
      row.forEach((w, k) => {
        const t = Math.sqrt(Math.min(1, Math.max(0, w)));
        g.fillStyle = `rgb(${Math.round(253 - 185 * t)}, ${Math.round(231 - 230 * t)}, ${Math.round(37 + 47 * t)})`;
        g.fillRect(k * cell, r * cell, cell, cell);
      });
    });
    strip.title = `Row n: where new token n looked (${mode.value === "head" ? `layer ${state.layer}, head ${state.head}` : "mean of all heads"}); columns: the tokens before it`;
  }

  async function start() {
    const n = Math.min(256, Math.max(1, Number.parseInt(count.value, 10) || 20));
    controller = new AbortController();
    steps = [];
    drawStrip();
    button.textContent = "Stop";
    button.dataset.running = "1";
    status.textContent = "generating…";
    let text = els.textInput.value;
    const body = { text, max_new_tokens: n, ablate: state.ablate };
    let reason = "stopped";
    try {
      const response = await fetch("/api/generate", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/x-ndjson" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) {
        const detail = await response.json().catch(() => null);
        throw new Error(detail?.detail?.[0]?.msg ?? `the server answered ${response.status}`);
      }
      await readLines(response, (line) => {
        if (line.done) {
          reason = line.reason;
          text = line.text;
          return;
        }
        steps.push(line);
        text += line.piece;
        els.textInput.value = text;
        status.textContent = `${steps.length} new token${steps.length === 1 ? "" : "s"} · “${line.token}” ${(100 * line.prob).toFixed(1)} %`;
        box.dataset.steps = String(steps.length);
        drawStrip();
      });
    } catch (err) {
      if (err.name !== "AbortError") {
        reason = "error";
        status.textContent = `Could not generate: ${errorText(err)}`;
      }
    } finally {
      controller = null;
      button.textContent = "Continue";
      delete button.dataset.running;
      els.textInput.value = text;
      const said = { length: "done", eos: "the model ended the text", context: "the text fills the model's context", stopped: "stopped" };
      if (reason !== "error") status.textContent = `${steps.length} new tokens · ${said[reason] ?? reason}`;
      box.dataset.reason = reason;
      ctx.changeText(text);
      ctx.refreshNow();
    }
  }

  button.addEventListener("click", () => {
    if (controller) controller.abort();
    else start();
  });
  mode.addEventListener("change", drawStrip);
  document.addEventListener("attnscope:render", () => {
    if (steps.length && mode.value === "head" && strip.dataset.head !== `${state.layer}.${state.head}`) {
      strip.dataset.head = `${state.layer}.${state.head}`;
      drawStrip();
    }
  });
}
