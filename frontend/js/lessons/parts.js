// What the three lessons of the lessons page share: the error banner, asking the server,
// drawing a figure, the boxes of numbers, the range sliders and the message under a box that
// holds a bad value.

import { errorText, latestOnly } from "../api.js";
import { byId, drawPlot, setAttr, setHidden, setText } from "../dom.js";

// ---------------------------------------------------------------- the error banner

/**
 * The page's error banner, one message per lesson (and one for the charting library): `say(lesson, err)` shows
 * `err` under the lesson's name, or takes the lesson's message away (err null); its × empties it.
 */
export function createErrorBanner() {
  const errors = {}; // null once that lesson works again
  const show = () => {
    const messages = Object.values(errors).filter(Boolean);
    setHidden(byId("error-banner"), messages.length === 0);
    setText(byId("error-text"), messages.join(" · "));
  };
  byId("error-close").addEventListener("click", () => {
    for (const key of Object.keys(errors)) delete errors[key];
    show();
  });
  return {
    say(lesson, err) {
      errors[lesson] = err ? `${lesson}: ${errorText(err)}` : null;
      show();
    },
    /** A message of the page's own, e.g. that the charting library did not load. */
    note(key, message) {
      errors[key] = message;
      show();
    },
  };
}

// ---------------------------------------------------------------- asking the server

/**
 * A lesson's request to `url`: the returned function posts its body, and only the newest
 * answer counts. That answer goes to `onAnswer` and takes the lesson's message out of the
 * banner; an error goes to `onError`, by default to the banner under the lesson's name.
 */
export function lessonRequest(banner, lesson, url, onAnswer, onError = (err) => banner.say(lesson, err)) {
  const send = latestOnly(url);
  return async (body) => {
    try {
      const r = await send(body);
      if (r.stale) return;
      banner.say(lesson, null);
      onAnswer(r.value);
    } catch (err) {
      onError(err);
    }
  };
}

// ---------------------------------------------------------------- figures and numbers

/**
 * Draw `build()` into the element `id` unless it already shows `signature`; `name` is the file
 * name of its PNG download. Says so in the `banner` when Plotly did not load.
 */
export function plot(banner, id, signature, build, name) {
  if (!window.Plotly) {
    banner.note("plotly", "The charting library did not load from /vendor/plotly.min.js.");
    return;
  }
  drawPlot(byId(id), signature, build, name);
}

/** One labelled number; `key` marks the one the lesson is about. */
function numberBox(label, value, key) {
  const box = document.createElement("div");
  box.className = key ? "number key" : "number";
  const l = document.createElement("span");
  l.className = "label";
  l.textContent = label;
  const v = document.createElement("span");
  v.className = "value";
  v.textContent = value;
  box.append(l, v);
  return box;
}

/** Fill the element `id` with labelled numbers: rows of [label, value] or [label, value, true] for a key one. */
export function showNumbers(id, rows) {
  byId(id).replaceChildren(...rows.map(([label, value, key = false]) => numberBox(label, value, key)));
}

// ---------------------------------------------------------------- controls

/** Call `onChange(value)` with the slider's number each time it moves. */
export function onRange(id, onChange) {
  const input = byId(id);
  input.addEventListener("input", () => onChange(Number(input.value)));
}

/** Put the slider `id` at `value` and write `text` in its <output id="`id`-value">. */
export function showRange(id, value, text = String(value)) {
  const input = byId(id);
  if (input.value !== String(value)) input.value = String(value);
  setText(byId(`${id}-value`), text);
}

/**
 * The message under the box `inputId` (in the element `boxId`), or none; the box is marked invalid while there
 * is one.
 */
export function showFieldError(inputId, boxId, message) {
  const box = byId(boxId);
  setHidden(box, !message);
  setText(box, message || "");
  setAttr(byId(inputId), "aria-invalid", message ? "true" : "false");
}
