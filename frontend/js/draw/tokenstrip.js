// The token strip under the text box: one chip per token (its text and id, a hover with its
// characters), the chosen one pressed, and the counter beside it (`renderTokens`). A long
// text's strip is virtualised: every chip's place is worked out once per answer (chips are
// monospace text, measured on a canvas), and only the chips of the lines in view, plus a few
// lines either side, are in the DOM. Scrolling swaps them; the strip keeps its height, its wrap
// and its look.

import { countWords } from "../api.js";
import { blankSubject, messagesOf } from "../subject.js";
import { idOf, setAttr, setText } from "../dom.js";
import { currentDetail, currentGrid, selectedPosition } from "../state.js";
import { bandLabel, imageRun } from "./imageband.js";
import { tokenBands } from "./quirkbands.js";
import { querySide } from "../stacks.js";

/** Past this many tokens the strip is virtualised. */
export const VIRTUAL_FROM = 400;
const GAP = 4; // .tokens gap, px
const PAD = 2; // .tokens padding, px
const OVERSCAN = 3; // lines drawn above and below the visible ones

/** One chip: its position, token and id, `title` its hover text. */
export function makeChip(i, token, id, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "chip";
  b.dataset.index = String(i);
  b.title = title;
  b.setAttribute("aria-label", `token ${i}: ${token}, id ${id}`);
  const t = document.createElement("span");
  t.className = "chip-text";
  t.textContent = token;
  const n = document.createElement("span");
  n.className = "chip-id";
  n.textContent = String(id);
  b.append(t, n);
  return b;
}

/**
 * The chip of the image's run of tokens (`run`: imageband.js): folded, it stands for them all; expanded, it heads them.
 * A click on it folds or expands the run (controls.js).
 */
function bandChip(run, folded) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "chip image-band";
  b.dataset.band = "";
  b.dataset.testid = "token-image-band";
  b.setAttribute("aria-expanded", folded ? "false" : "true");
  b.textContent = `${folded ? "▦" : "▾"} ${bandLabel(run)} (${run.from}–${run.to})`;
  b.title = folded
    ? "The image's run of tokens: click to show each one"
    : "Click to fold the image's tokens into one band";
  return b;
}

/**
 * The strip's chips, the image's run folded into its band unless `folded` is false. Chips that
 * stay the same from the first on (same position, token, id and hover) are kept: a keystroke at
 * the end of a long text builds one or two chips, not all of them.
 */
function syncChips(strip, tokens, ids, title, run, folded) {
  const want = [];
  tokens.forEach((token, i) => {
    if (run && i === run.from)
      want.push({ key: `band|${run.from}|${run.to}|${folded}`, make: () => bandChip(run, folded) });
    if (folded && i >= run.from && i <= run.to) return;
    const hover = title(i);
    want.push({ key: `${i}|${ids[i]}|${token}|${hover}`, make: () => makeChip(i, token, ids[i], hover) });
  });
  const kids = strip.children;
  let kept = 0;
  while (kept < want.length && kept < kids.length && kids[kept].chipKey === want[kept].key) kept++;
  while (kids.length > kept) kids[kids.length - 1].remove();
  const frag = document.createDocumentFragment();
  for (const w of want.slice(kept)) {
    const chip = w.make();
    chip.chipKey = w.key;
    frag.append(chip);
  }
  strip.append(frag);
}

/** Font, padding and height of a chip, measured once from a real one. */
function chipMetrics(strip) {
  const probe = makeChip(0, "ab", 12, "");
  probe.style.position = "absolute";
  probe.style.visibility = "hidden";
  strip.append(probe);
  const text = getComputedStyle(probe.querySelector(".chip-text"));
  const id = getComputedStyle(probe.querySelector(".chip-id"));
  const ctx = document.createElement("canvas").getContext("2d");
  const width = (font, s) => {
    ctx.font = font;
    return ctx.measureText(s).width;
  };
  const textFont = `${text.fontSize} ${text.fontFamily}`;
  const idFont = `${id.fontSize} ${id.fontFamily}`;
  const inner = probe.getBoundingClientRect().width - width(textFont, "ab") - width(idFont, "12");
  const height = probe.getBoundingClientRect().height;
  probe.remove();
  return { ctx, textFont, idFont, inner, height, width };
}

/** Each chip's left and line, wrapped as flex-wrap would at `width` px. */
function layoutChips(tokens, ids, metrics, width) {
  const T = tokens.length;
  const left = new Float32Array(T);
  const line = new Int32Array(T);
  const lineStart = [0];
  const { ctx, textFont, idFont, inner } = metrics;
  ctx.font = idFont;
  const idWidths = ids.map((id) => ctx.measureText(String(id)).width);
  ctx.font = textFont;
  let x = 0;
  let n = 0;
  for (let i = 0; i < T; i++) {
    const w = Math.ceil(ctx.measureText(tokens[i]).width + idWidths[i] + inner);
    if (x > 0 && x + w > width) {
      n += 1;
      x = 0;
      lineStart.push(i);
    }
    left[i] = x;
    line[i] = n;
    x += w + GAP;
  }
  return { left, line, lineStart, lines: n + 1 };
}

/**
 * Draw `tokens` into `strip` virtualised. `title(i)` gives a chip's hover text, `selected` the
 * chosen position. Returns nothing; call `refreshStrip(strip)` on scroll and after a selection.
 */
export function renderVirtualStrip(strip, { key, tokens, ids, title, selected, reveal = false }) {
  let v = strip.virtual;
  const width = strip.clientWidth - 2 * PAD;
  if (!v || v.key !== key || v.width !== width) {
    const metrics = v?.metrics ?? chipMetrics(strip);
    const lay = layoutChips(tokens, ids, metrics, width);
    const sizer = document.createElement("div");
    sizer.className = "tokens-sizer";
    sizer.style.height = `${lay.lines * (metrics.height + GAP)}px`;
    strip.classList.add("virtual");
    strip.replaceChildren(sizer);
    v = { key, width, metrics, lay, tokens, ids, title, sizer, drawn: null, selected: -1 };
    strip.virtual = v;
    if (!strip.dataset.scrollBound) {
      strip.addEventListener("scroll", () => refreshStrip(strip), { passive: true });
      strip.dataset.scrollBound = "1";
    }
  }
  v.title = title;
  if (v.selected !== selected) {
    v.selected = selected;
    v.drawn = null;
    if (reveal) scrollToChip(strip, selected);
  }
  refreshStrip(strip);
}

/** The chips of the lines in view (and a few around them), nothing else. */
export function refreshStrip(strip) {
  const v = strip.virtual;
  if (!v || !strip.classList.contains("virtual")) return;
  const step = v.metrics.height + GAP;
  const first = Math.max(0, Math.floor(strip.scrollTop / step) - OVERSCAN);
  const last = Math.min(v.lay.lines - 1, Math.ceil((strip.scrollTop + strip.clientHeight) / step) + OVERSCAN);
  const a = v.lay.lineStart[first];
  const b = last + 1 < v.lay.lines ? v.lay.lineStart[last + 1] : v.tokens.length;
  if (v.drawn && v.drawn[0] === a && v.drawn[1] === b) return;
  v.drawn = [a, b];
  const frag = document.createDocumentFragment();
  for (let i = a; i < b; i++) {
    const chip = makeChip(i, v.tokens[i], v.ids[i], v.title(i));
    chip.style.left = `${v.lay.left[i]}px`;
    chip.style.top = `${v.lay.line[i] * step}px`;
    const on = i === v.selected;
    if (on) chip.classList.add("selected");
    chip.setAttribute("aria-pressed", on ? "true" : "false");
    frag.append(chip);
  }
  v.sizer.replaceChildren(frag);
}

/** Scroll the strip so that chip `i` is in view (after a choice made elsewhere, e.g. a heatmap row). */
export function scrollToChip(strip, i) {
  const v = strip.virtual;
  if (!v || i < 0 || i >= v.tokens.length) return;
  const step = v.metrics.height + GAP;
  const top = v.lay.line[i] * step;
  if (top < strip.scrollTop || top + step > strip.scrollTop + strip.clientHeight) {
    strip.scrollTop = Math.max(0, top - strip.clientHeight / 2);
  }
}

/** Back to a plain strip (a short text): the next render builds one chip per token. */
export function leaveVirtual(strip) {
  if (!strip.virtual) return;
  strip.virtual = null;
  strip.classList.remove("virtual");
}

/**
 * An encoder's masked-LM guesses at position `i`, for its chip's hover: " · guesses at this position: cat 31% · dog
 * 12% · …" from the chosen head's answer (its `predictions` hold every position); "" on a decoder or before it is in.
 */
export function guessWords(state, i) {
  const rows = state.model?.architecture === "encoder" ? currentDetail(state)?.predictions?.[i] : null;
  if (!rows?.length) return "";
  const top = rows.slice(0, 3).map((p) => `${p.token} ${(100 * p.prob).toFixed(p.prob < 0.1 ? 1 : 0)}%`);
  return ` · guesses at this position: ${top.join(" · ")}`;
}

/** The chips of the current answer's tokens (or none), the chosen one pressed, and the counter. */
export function renderTokens(state, els) {
  const response = currentGrid(state) ?? currentDetail(state);
  if (!response) {
    // a text the server refused, no answer yet after an error, or no text: no chips of an older
    // text; the counter says the server's own count of a refused text (the message's number)
    if (!state.error && !blankSubject(state)) return;
    if (els.tokens.dataset.signature !== "none") {
      els.tokens.dataset.signature = "none";
      leaveVirtual(els.tokens);
      els.tokens.replaceChildren();
    }
    setText(els.tokenCount, countWords(state.refusal));
    return;
  }
  const { tokens, token_ids: tokenIds, offsets } = response;
  // an encoder's chips carry the guesses at each position: drawn again once the chosen head's answer holds them
  const guesses = state.model?.architecture === "encoder" ? currentDetail(state) : null;
  const sig = `${idOf(response)}${guesses ? `|${idOf(guesses)}` : ""}`;
  // offsets count characters (code points), as Python does; JS strings count UTF-16 units
  let chars = null;
  // the bands that name messages (quirkbands.js): each chip of a message underlined in its role's colour
  const named = tokenBands(state.model, response).filter((b) => !b.folds);
  const bandAt = (i) => named.find((b) => i >= b.from && i <= b.to);
  const title = (i) => {
    // a conversation's offsets count the characters of the template's text, which the page does not hold; a
    // target's tokens (an encoder–decoder's decoder side) are not the text box's
    if (messagesOf(state)) return `position ${i} · id ${tokenIds[i]}`;
    if (querySide(state) === "target") return `target position ${i} · id ${tokenIds[i]}`;
    chars ??= codePoints(state.text);
    const [start, end] = offsets?.[i] ?? [null, null];
    const source = start === null ? "" : chars.slice(start, end).join("");
    const band = bandAt(i);
    return (
      (band ? `${band.title} · ` : "") +
      `position ${i} · id ${tokenIds[i]} · characters ${start}–${end}: ${JSON.stringify(source)}` +
      guessWords(state, i)
    );
  };
  const run = imageRun(response.token_kinds);
  const folded = !!run && !state.imageExpanded;
  const count =
    `${tokens.length} token${tokens.length === 1 ? "" : "s"}` + (run ? `, ${run.n} of them the image's` : "");
  // the image's band is a chip of the DOM strip: a strip too long for it shows every token (virtualised)
  if (tokens.length - (folded ? run.to - run.from : 0) > VIRTUAL_FROM) {
    // a long text: only the chips in view are in the DOM
    const selected = selectedPosition(state, tokens.length);
    renderVirtualStrip(els.tokens, {
      key: sig,
      tokens,
      ids: tokenIds,
      title,
      selected,
      reveal: state.position !== null,
    });
    els.tokens.dataset.signature = sig;
    setText(els.tokenCount, count);
    return;
  }
  if (els.tokens.virtual) {
    leaveVirtual(els.tokens);
    els.tokens.dataset.signature = "";
  }
  if (els.tokens.dataset.signature !== `${sig}|${folded}`) {
    els.tokens.dataset.signature = `${sig}|${folded}`;
    syncChips(els.tokens, tokens, tokenIds, title, run, folded);
    els.tokenCount.textContent = count;
  }
  const p = selectedPosition(state, tokens.length);
  for (const chip of els.tokens.children) {
    const band = chip.dataset.band !== undefined;
    const on = band ? folded && p >= run.from && p <= run.to : Number(chip.dataset.index) === p;
    chip.classList.toggle("selected", on);
    setAttr(chip, "aria-pressed", on ? "true" : "false");
    const role = band ? null : bandAt(Number(chip.dataset.index));
    if ((chip.dataset.role ?? "") !== (role?.label ?? "")) {
      chip.dataset.role = role?.label ?? "";
      chip.style.boxShadow = role ? `inset 0 -3px 0 ${role.color}` : "";
    }
  }
}

/** A string as its characters (code points): offsets from the API index this, not UTF-16 units. */
export const codePoints = (text) => Array.from(text);
