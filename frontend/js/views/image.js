// The "Image" view (an image-text model: GET /api/model `vision`): where the chosen query token
// looks in the image, drawn on the image itself. Its own POST /api/attention carries the text and
// the image (cards/imagepick.js) and `query_row`: the server sends the query's row of every head in
// every layer, each layer's mean and the mean over all of them, so the chosen head, a layer's mean
// or every layer's is drawn without a number computed here. Hover a region for its weight and
// token; click one to make that image token the query. The prompt's tokens sit under the image,
// the image's run of tokens one band that expands. It follows the text, the layer and head and the
// what-ifs (the route takes them).

import { answerIn, question, questionKey } from "../answers.js";
import { byId, idOf, setHidden, setText } from "../dom.js";
import { MODES, cellWords, imageWords, overlayCells, rowOf, stripItems } from "../draw/imagemap.js";
import { installImagePick } from "../cards/imagepick.js";
import { currentDetail, currentGrid } from "../state.js";
import { blankSubject, imageOf, subject, subjectKey } from "../subject.js";

export const id = "image";
export const label = "Image";
/** Its tab shows once /api/model says `vision` (cards/imagepick.js). */
export const hidden = true;
/**
 * Its slice: the image (never in the link), a refusal of the last one picked, the query token chosen in this
 * view ({tokens, position}: a token of the image's prompt; null: the page's chosen token, else the last), what is
 * drawn, whether the image's band is expanded, and the answer (answers.js: it keeps the last prompt's answer as
 * `previous`, whose tokens say where the query may be while the next one is asked).
 */
export const state = {
  image: null,
  imageRefusal: null,
  imageQuery: null,
  imageMode: "head",
  imageExpanded: false,
  imageAnswer: null,
};
export const answers = ["imageAnswer"];
/** `imgmode=layer|all` (the image itself is not in the link: the field says so). */
export const link = {
  read(params, out) {
    if (MODES.some((m) => m.id === params.get("imgmode"))) out.imageMode = params.get("imgmode");
  },
  write(s, params) {
    if (s.imageMode !== "head") params.set("imgmode", s.imageMode);
  },
};
export const needs = [];

const PANEL = `
  <article class="card fig-card">
    <header class="card-head row"><h2>Where a token looks in the image</h2>
      <label class="small">weights of <select id="image-mode" data-testid="image-mode"></select></label>
    </header>
    <p id="image-caption" class="muted small" data-testid="image-caption"></p>
    <p id="image-error" class="image-refusal small" data-testid="image-error" role="alert" hidden></p>
    <div id="image-stage" class="image-stage" data-testid="image-stage" hidden>
      <img id="image-shown" alt="The image, its regions shaded by the query token's weight on them" />
      <div id="image-cells" class="image-cells" data-testid="image-cells"></div>
    </div>
    <p id="image-hover" class="small image-hover" data-testid="image-hover" aria-live="polite"></p>
    <span class="field-label">Query token of the prompt (the chat template's, the image's and the text's)</span>
    <div id="image-tokens" class="image-tokens" data-testid="image-tokens" role="group"></div>
  </article>`;

const URL = "/api/attention";

/** The prompt's body, without the query: the subject (text, image, what-ifs) and the chosen layer. */
const promptBody = (s) => ({ ...subject(s, URL), layers: [s.layer], heads: [], include: [], top_k: 0 });

/** An answer held for this prompt (the slot's current one or the one before it), or null. */
function promptAnswer(s) {
  const key = questionKey(URL, promptBody(s));
  const held = s.imageAnswer;
  for (const got of [held, held?.previous]) {
    if (!got?.response) continue;
    const { query_row, ...prompt } = got.body;
    if (questionKey(URL, prompt) === key) return got.response;
  }
  return null;
}

/**
 * The query token of the image's prompt: the one chosen in this view, else the page's chosen token (a position of
 * this prompt once the page's answers carry the image, else the token with its characters of the text), else the
 * last; null before the prompt's tokens are known.
 */
function queryOf(s) {
  const known = promptAnswer(s);
  if (!known) return null;
  const T = known.tokens.length;
  const { offsets, token_kinds: kinds } = known;
  if (s.imageQuery?.tokens === subjectKey(s, false)) return Math.min(s.imageQuery.position, T - 1);
  const page = currentGrid(s) ?? currentDetail(s);
  // the page's answers are this prompt's (they carry the image: token_kinds): its chosen token is a position here
  if (page?.token_kinds && s.position !== null) return Math.min(s.position, T - 1);
  const span = page?.offsets?.[s.position ?? -1];
  const same = span ? offsets.findIndex((o, i) => kinds[i] === "text" && o[0] === span[0] && o[1] === span[1]) : -1;
  return same >= 0 ? same : T - 1;
}

/** The prompt's answer with the row of the query (without one while the prompt's length is not known): or null. */
function imageQuestion(s) {
  if (!imageOf(s) || blankSubject(s)) return null;
  const query = queryOf(s);
  return question("imageAnswer", URL, { ...promptBody(s), ...(query === null ? {} : { query_row: query }) });
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (s) => [imageQuestion(s)];

export function install(app) {
  byId("view-image").innerHTML = PANEL;
  const select = app.selectPosition; // a token chosen on the page is the query here too
  if (select)
    app.selectPosition = (p) => {
      app.state.imageQuery = null;
      select(p);
    };
  app.els.cards.push(installImagePick(app));
  const mode = byId("image-mode");
  for (const m of MODES) mode.append(new Option(m.option, m.id));
  mode.addEventListener("change", () => {
    app.state.imageMode = mode.value;
    app.update();
  });
  const cells = byId("image-cells");
  const cellAt = (e) => e.target.closest?.(".image-cell");
  cells.addEventListener("mouseover", (e) => {
    const c = cellAt(e);
    if (c) setText(byId("image-hover"), c.dataset.words);
  });
  cells.addEventListener("click", (e) => {
    const c = cellAt(e);
    if (c) choose(app, Number(c.dataset.position));
  });
  byId("image-tokens").addEventListener("click", (e) => {
    const chip = e.target.closest?.("button");
    if (!chip) return;
    if (chip.dataset.band !== undefined) {
      toggleBand(app.state);
      app.update();
    } else choose(app, Number(chip.dataset.position));
  });
}

/** Fold or expand the image's band of tokens, in the token strip and on every view's axes (controls.js too). */
export function toggleBand(state) {
  state.imageExpanded = !state.imageExpanded;
}

function choose(app, position) {
  app.state.imageQuery = { tokens: subjectKey(app.state, false), position };
  app.update();
}

/** The view's line when nothing can be drawn; the stage and strip emptied so nothing stale stays. */
function empty(words, error = null) {
  setText(byId("image-caption"), words);
  setText(byId("image-error"), error ?? "");
  setHidden(byId("image-error"), !error);
  setHidden(byId("image-stage"), true);
  byId("image-cells").replaceChildren();
  byId("image-tokens").replaceChildren();
  setText(byId("image-hover"), "");
  return false;
}

export function draw(s) {
  const mode = byId("image-mode");
  if (mode.value !== s.imageMode) mode.value = s.imageMode;
  if (!s.model?.vision)
    return empty(`${s.model?.name ?? "This model"} reads text only: open an image-text model.`);
  if (!s.image) return empty("Drop, paste or pick an image beside the text to see where each token looks in it.");
  if (blankSubject(s)) return empty("Type a text to go with the image.");
  const got = answerIn(s, imageQuestion(s));
  if (got.error) return empty("", `Could not compute the image's attention: ${got.error}`);
  if (!got.response?.query_row) return empty("computing…");
  return drawAnswer(s, got.response, got.body.query_row, idOf(got.response));
}

function drawAnswer(s, response, query, key) {
  const weights = rowOf(response.query_row, s.imageMode, s.layer, s.head);
  if (!weights) return empty(`Layer ${s.layer} has no attention heads to draw.`);
  setHidden(byId("image-error"), true);
  const words = imageWords({ response, mode: s.imageMode, layer: s.layer, head: s.head, query, weights });
  setText(byId("image-caption"), words);
  const stage = byId("image-stage");
  setHidden(stage, false);
  const shown = byId("image-shown");
  if (shown.getAttribute("src") !== s.image.data) shown.src = s.image.data;
  const signature = JSON.stringify([key, s.imageMode, s.head]);
  if (stage.dataset.signature !== signature) {
    stage.dataset.signature = signature;
    stage.drawnFrom = response; // the answer its cells show (read by the tests)
    const cells = overlayCells(response, weights);
    byId("image-cells").replaceChildren(...cells.map((c) => cellElement(c, cells.length, query)));
    setText(byId("image-hover"), "Hover a region for its weight and token; click one to make it the query.");
  }
  drawStrip(s, response, query);
  return true;
}

function cellElement(c, n, query) {
  const el = document.createElement("div");
  el.className = `image-cell${c.position === query ? " query" : ""}`;
  Object.assign(el.style, { left: `${c.left}%`, top: `${c.top}%`, width: `${c.width}%`, height: `${c.height}%` });
  el.style.setProperty("--weight", String(c.opacity));
  Object.assign(el.dataset, { position: c.position, weight: c.weight, words: cellWords(c, n), testid: "image-cell" });
  el.title = el.dataset.words;
  return el;
}

function drawStrip(s, response, query) {
  const strip = byId("image-tokens");
  const signature = JSON.stringify([response.tokens.length, s.image.id, query, s.imageExpanded]);
  if (strip.dataset.signature === signature) return;
  strip.dataset.signature = signature;
  const chips = stripItems(response.tokens, response.token_kinds, s.imageExpanded).map((it) => {
    const b = document.createElement("button");
    b.type = "button";
    if (it.band) {
      const on = query >= it.from && query <= it.to;
      b.className = `chip image-band${on ? " selected" : ""}`;
      b.dataset.band = "";
      b.dataset.testid = "image-band";
      b.textContent = `▦ image · ${it.n} tokens (${it.from}–${it.to})`;
      b.title = "The image's run of tokens: click to show each one";
      return b;
    }
    b.className = `chip kind-${it.kind}${it.position === query ? " selected" : ""}`;
    b.dataset.position = it.position;
    b.textContent = it.token;
    b.title = `token ${it.position} (${it.kind})`;
    return b;
  });
  if (s.imageExpanded) {
    const fold = document.createElement("button");
    Object.assign(fold, { type: "button", className: "chip image-band", textContent: "▦ fold the image's tokens" });
    fold.dataset.band = "";
    chips.push(fold);
  }
  strip.replaceChildren(...chips);
}
