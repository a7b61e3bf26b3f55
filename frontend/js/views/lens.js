// The "Lens" view: the logit lens (POST /api/lens). A layer × token table: each cell the top guess
// after that block at that token, the model's final norm and unembedding applied to the residual
// stream there, shaded by its probability (the answer's); the last row is the model's own
// prediction; a cell's title holds the top k. It follows the text and marks the chosen token; the
// route runs the model as trained, so with a what-if on the view says so. Where the server loaded a
// Jacobian lens (/api/model `jlens`) a switch reads through it, or shows both lenses one above the
// other; "each head's write" adds a layer × head table of what every head's write says at the
// chosen token (the answer's `heads`), read by the same lens.

import { answerIn, question } from "../answers.js";
import { headWritesTable, HEADS_ABOUT, JACOBIAN_ABOUT } from "../draw/lensheads.js";
import { byId, idOf, setHidden, setText } from "../dom.js";
import { asTrainedWords } from "../draw/causal.js";
import { shortToken } from "../draw/figures.js";
import { selectedPosition, textTokens } from "../state.js";
import { blankSubject, subject } from "../subject.js";

export const id = "lens";
export const label = "Lens";
/**
 * Its slice: guesses per cell in the hover, which lens ("logit", "jacobian" or "both"), whether each head's write
 * is read too, and the POST /api/lens answers {key, response, error}: `lens` (the logit lens), `lensJacobian`.
 */
export const state = {
  lensTopK: 5,
  lensKind: "logit",
  lensHeads: false,
  lensShade: "own", // the heads' cells shaded by their own top guess, or ("final") by the model's guess
  lens: null,
  lensJacobian: null,
};
export const answers = ["lens", "lensJacobian"];
const TOP_K = [3, 5, 10, 20];
const KINDS = { logit: "logit lens", jacobian: "Jacobian lens", both: "both lenses" };
/** `lensk=`: the guesses per cell (5 unless given); `lensj=jacobian|both`; `lensheads=1`; `lensshade=final`. */
export const link = {
  read(params, out) {
    const k = Number(params.get("lensk"));
    if (TOP_K.includes(k)) out.lensTopK = k;
    const kind = params.get("lensj");
    if (kind === "jacobian" || kind === "both") out.lensKind = kind;
    if (params.get("lensheads") === "1") out.lensHeads = true;
    if (params.get("lensshade") === "final") out.lensShade = "final";
  },
  write(s, params) {
    if (s.lensTopK !== 5) params.set("lensk", String(s.lensTopK));
    if (s.lensKind !== "logit") params.set("lensj", s.lensKind);
    if (s.lensHeads) params.set("lensheads", "1");
    if (s.lensShade !== "own") params.set("lensshade", s.lensShade);
  },
};
/** Its own requests (its `need`), one per lens drawn. */
export const needs = [];

/** The lenses drawn: the logit lens alone unless the server loaded a Jacobian lens. */
const kindsOf = (state) => {
  if (!state.model?.jlens || state.lensKind === "logit") return ["logit"];
  return state.lensKind === "both" ? ["logit", "jacobian"] : ["jacobian"];
};
const SLOT = { logit: "lens", jacobian: "lensJacobian" };

/** A control in the view's header, made here (the header holds the top-k select in index.html). */
function control(html, testid) {
  const label = document.createElement("label");
  label.className = "small";
  label.innerHTML = html;
  label.dataset.testid = testid;
  byId("lens-k").closest("header").append(label);
  return label;
}

/** The top-k select, the lens switch (shown where a Jacobian lens is loaded) and the heads' box. */
export function install(app) {
  const select = byId("lens-k");
  select.replaceChildren(...TOP_K.map((k) => new Option(`top ${k}`, String(k))));
  select.value = String(app.state.lensTopK);
  select.addEventListener("change", () => {
    app.state.lensTopK = Number(select.value);
    app.update();
  });
  const kind = control('read by <select id="lens-kind" data-testid="lens-kind"></select>', "lens-kind-label");
  kind.hidden = true;
  const pick = kind.querySelector("select");
  pick.replaceChildren(...Object.entries(KINDS).map(([value, text]) => new Option(text, value)));
  pick.value = app.state.lensKind;
  pick.addEventListener("change", () => {
    app.state.lensKind = pick.value;
    app.update();
  });
  const checkbox = '<input type="checkbox" id="lens-heads" data-testid="lens-heads"> each head\'s write';
  const heads = control(checkbox, "lens-heads-label");
  const box = heads.querySelector("input");
  box.checked = app.state.lensHeads;
  box.addEventListener("change", () => {
    app.state.lensHeads = box.checked;
    app.update();
  });
  const shade = control('shade <select id="lens-shade" data-testid="lens-shade"></select>', "lens-shade-label");
  const shadeSelect = shade.querySelector("select");
  const shades = [new Option("by each write's top guess", "own"), new Option("by the model's guess", "final")];
  shadeSelect.replaceChildren(...shades);
  shadeSelect.value = app.state.lensShade;
  shadeSelect.addEventListener("change", () => {
    app.state.lensShade = shadeSelect.value;
    app.update();
  });
}

/** A residual's row label: "embeddings", "after block 2", the last one the model's own prediction. */
export function rowLabel(after, last) {
  if (after === "embed") return "embeddings";
  return last ? `block ${after}: the output` : `after block ${after}`;
}

/** "␣window 0.765" lines: a cell's top k, for its title. */
const topWords = (top) => top.map((p) => `${p.token} ${p.prob.toFixed(3)}`).join("\n");

/** One cell: the top guess, its background as dark as its probability, the top k in its title. */
function cell(top, position, after) {
  const td = document.createElement("td");
  const best = top[0];
  td.textContent = shortToken(best.token, 10);
  td.style.setProperty("--p", String(best.prob));
  td.dataset.prob = String(best.prob);
  td.dataset.position = String(position);
  td.title = `after ${after === "embed" ? "the embeddings" : `block ${after}`}, token ${position}:\n${topWords(top)}`;
  return td;
}

/** The table of a lens answer: a header of the tokens, then one row per residual. */
export function lensTable({ tokens, residuals }) {
  const table = document.createElement("table");
  table.className = "lens-table";
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  tokens.forEach((t, i) => {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = shortToken(t, 10);
    th.title = `${i} ${t}`;
    th.dataset.position = String(i);
    head.append(th);
  });
  const body = table.createTBody();
  residuals.forEach((r, n) => {
    const row = body.insertRow();
    if (n === residuals.length - 1) row.className = "lens-output";
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = rowLabel(r.after, n === residuals.length - 1);
    row.append(th, ...r.top.map((top, i) => cell(top, i, r.after)));
  });
  return table;
}

/** Mark the chosen token's column, and scroll it into each table's view when it moved. */
function markChosen(box, position) {
  if (box.dataset.chosen === String(position)) return;
  box.dataset.chosen = String(position);
  for (const el of box.querySelectorAll(".chosen")) el.classList.remove("chosen");
  for (const el of box.querySelectorAll(`[data-position="${position}"]`)) el.classList.add("chosen");
  for (const scroller of box.querySelectorAll(".lens-scroll")) {
    const cell = scroller.querySelector(`[data-position="${position}"]`);
    if (cell) scroller.scrollLeft = Math.max(0, cell.offsetLeft - scroller.clientWidth / 2);
  }
}

const ABOUT =
  "What the model would predict if it stopped early: its final norm and unembedding applied to the residual " +
  "stream after the embeddings and after each block (the logit lens). Each cell is the top guess for the " +
  "token after the one above it, darker the more probable; hover a cell for the top guesses. The last row " +
  "is the model's own prediction.";
const ENCODER_ABOUT =
  "What the model would guess if it stopped early: its masked-LM head applied to the output of the embeddings " +
  "and of each layer. Each cell is the top guess for the token at that position (an encoder guesses every " +
  "position, a [MASK] included), darker the more probable; the last row is the model's own guesses.";

/** The controls as the state has them. */
function syncControls(state) {
  const select = byId("lens-k");
  if (select.value !== String(state.lensTopK)) select.value = String(state.lensTopK);
  setHidden(byId("lens-kind").closest("label"), !state.model?.jlens);
  if (byId("lens-kind").value !== state.lensKind) byId("lens-kind").value = state.lensKind;
  byId("lens-heads").checked = state.lensHeads;
  setHidden(byId("lens-shade").closest("label"), !state.lensHeads);
  if (byId("lens-shade").value !== state.lensShade) byId("lens-shade").value = state.lensShade;
}

/** Each lens drawn, with its question for the current text (none for an empty one). */
function questionsOf(state) {
  if (blankSubject(state)) return [];
  const url = "/api/lens";
  return kindsOf(state).map((kind) => {
    const body = { ...subject(state, url), top_k: state.lensTopK, lens: kind };
    if (state.lensHeads) body.heads = true;
    return { kind, q: question(SLOT[kind], url, body) };
  });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => questionsOf(state).map((l) => l.q);

/** One lens's part of the box: a heading where both are shown, its table, and its heads' table. */
function part(got, both, position, shade) {
  const div = document.createElement("div");
  div.className = "lens-part";
  div.dataset.lens = got.kind;
  if (both) div.append(Object.assign(document.createElement("h3"), { textContent: KINDS[got.kind] }));
  const scroller = document.createElement("div"); // each lens table scrolls on its own, its row labels in view
  scroller.className = "lens-scroll";
  scroller.append(lensTable(got.response));
  div.append(scroller);
  if (got.response.heads) div.append(headWritesTable(got.response, position, shade));
  return div;
}

export function draw(state) {
  syncControls(state);
  const note = asTrainedWords(state, "The lens shows");
  setText(byId("lens-note"), note ?? "");
  setHidden(byId("lens-note"), !note);
  const box = byId("lens-box");
  if (blankSubject(state)) {
    setHidden(box, true);
    setText(byId("lens-caption"), "Type a text to see what the model would guess after each block.");
    return false;
  }
  const got = questionsOf(state).map(({ kind, q }) => ({ kind, ...answerIn(state, q) }));
  const names = got.map((g) => (g.kind === "logit" ? "logit" : "Jacobian")).join(" and ");
  setText(byId("lens-k").closest("header").querySelector("h2"), `The guess after each block (${names} lens)`);
  const error = got.find((g) => g.error)?.error;
  const ready = got.every((g) => g.response);
  const logit = state.model?.architecture === "encoder" ? ENCODER_ABOUT : ABOUT;
  const about = [got.some((g) => g.kind === "logit") ? logit : "", got.some((g) => g.kind === "jacobian") ?
    JACOBIAN_ABOUT(state.model.jlens) : "", state.lensHeads ? HEADS_ABOUT : ""].filter(Boolean).join(" ");
  setText(byId("lens-caption"), error ? `Could not compute the lens: ${error}` : ready ? about : "computing…");
  setHidden(box, !ready || Boolean(error)); // nothing stale under a refusal
  if (!ready || error) return false;
  const tokens = textTokens(state) ?? got[0].response.tokens;
  const position = selectedPosition(state, tokens.length);
  const sig = [...got.map((g) => idOf(g.response)), state.lensHeads ? `${position} ${state.lensShade}` : ""].join(" ");
  if (box.dataset.signature !== sig) {
    box.dataset.signature = sig;
    delete box.dataset.chosen;
    box.replaceChildren(...got.map((g) => part(g, got.length > 1, position, state.lensShade)));
  }
  markChosen(box, position);
  return true;
}
