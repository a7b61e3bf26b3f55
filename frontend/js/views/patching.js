// The "Patching" view: activation patching (POST /api/patching). The clean text is the page's,
// the corrupt one is typed here (the second text, shared with "Two texts": `textb=`); the corrupt
// run with one piece of the clean run written in, each head's output or the residual stream after
// a block at a token, and the share of the logit difference (token − foil) that piece restores,
// on a diverging scale centred on 0. The token and the foil are the server's defaults (the clean
// run's top guess; the corrupt run's best guess other than it) or picked from both runs' top guesses
// (`ptoken=`, `pfoil=`). The route runs the model as trained; a refusal (texts of different token
// counts: a 422 naming `corrupt`) is said in one line with nothing drawn under it.

import { answerIn, question } from "../answers.js";
import { byId, drawPlot, idOf, setHidden, setText } from "../dom.js";
import { asTrainedWords, colorBar, layerHeadFigure, layerTokenGrid, signedPeak } from "../draw/causal.js";
import { SIGNED_SCALE, baseLayout, fmtFixed, tokenAxis, tokenMargins } from "../draw/figures.js";
import { querySide } from "../stacks.js";
import { selectedPosition, textTokens } from "../state.js";
import { subject } from "../subject.js";
import { textOnlyNow } from "../textonly.js";
import { bindSecondText, showSecondText } from "./twotexts.js";

export const id = "patching";
export const label = "Patching";
/** Its route, which takes no image (textonly.js), and it reads the chosen token. */
export const route = "/api/patching";
export const readsToken = true;
/**
 * Its slice: what is patched (heads | residual), the token and the foil picked (token ids; null: the server's
 * default, the clean run's top guess and the corrupt run's best guess other than the token), and POST
 * /api/patching {key, response, error}.
 */
export const state = { patchWhat: "heads", patchToken: null, patchFoil: null, patching: null };
export const answers = ["patching"];
const PICKS = [
  ["patchToken", "ptoken", "token_id"],
  ["patchFoil", "pfoil", "foil_id"],
];
/** `patch=residual`: the residual stream (the heads unless given); `ptoken=`, `pfoil=` the ids picked. */
export const link = {
  read(params, out) {
    if (params.get("patch") === "residual") out.patchWhat = "residual";
    for (const [field, param] of PICKS) {
      const id = params.get(param) ?? "";
      if (/^\d+$/.test(id)) out[field] = Number(id);
    }
  },
  write(s, params) {
    if (s.patchWhat === "residual") params.set("patch", "residual");
    for (const [field, param] of PICKS) if (s[field] !== null) params.set(param, String(s[field]));
  },
};
/** Its own request (its `need`). */
export const needs = [];

const picked = (state) => PICKS.map(([field]) => state[field]);

/** The token and foil selects, put under the corrupt text's box. */
const PICK = `
  <label>token <select id="patch-token" data-testid="patch-token"></select></label>
  <label>foil <select id="patch-foil" data-testid="patch-foil"></select></label>`;

/** The view's markup, set into its panel when it is installed (the page holds only the empty panel). */
const PANEL = `
  <article class="card fig-card">
    <header class="card-head row"><h2>Which pieces carry the difference (activation patching)</h2>
      <label class="small">patch <select id="patch-what" data-testid="patch-what">
          <option value="heads">each head</option><option value="residual">the residual stream</option>
        </select></label></header>
    <p id="patch-note" class="effects-note small" data-testid="patch-note" role="status" hidden></p>
    <label class="small" for="patch-corrupt">Corrupt text (the clean one is the text above)</label>
    <textarea id="patch-corrupt" class="text-b" data-testid="patch-corrupt" rows="2"
      placeholder="The text above with one word changed, as many tokens"></textarea>
    <p id="patch-caption" class="muted small" data-testid="patch-caption" role="status"></p>
    <div id="patch-plot" class="plot plot-causal" data-testid="patch-plot" role="img"
      aria-label="Share of the logit difference restored by each patched piece" hidden></div>
  </article>`;

/** The corrupt text's box (the second text's handling), the heads | residual select, the token and the foil. */
export function install(app) {
  byId("view-patching").innerHTML = PANEL;
  bindSecondText(byId("patch-corrupt"), app);
  const pick = Object.assign(document.createElement("div"), { id: "patch-pick", className: "patch-pick small" });
  pick.hidden = true;
  pick.dataset.testid = "patch-pick";
  pick.innerHTML = PICK;
  byId("patch-corrupt").after(pick);
  const what = byId("patch-what");
  what.value = app.state.patchWhat;
  what.addEventListener("change", () => {
    app.state.patchWhat = what.value;
    app.update();
  });
  for (const [elId, field] of [
    ["patch-token", "patchToken"],
    ["patch-foil", "patchFoil"],
  ]) {
    byId(elId).addEventListener("change", (e) => {
      app.state[field] = e.target.value === "" ? null : Number(e.target.value);
      app.update();
    });
  }
}

/**
 * The options of the token's (`first` "clean") or the foil's (`first` "corrupt") select: the server's default
 * ("", named when it is the one used), then both runs' top guesses (`first`'s before), each saying where it ranks.
 */
export function guessOptions(r, first, chosen) {
  const [id, token, auto] =
    first === "clean"
      ? [r.token_id, r.token, "the clean run's top guess"]
      : [r.foil_id, r.foil, "the corrupt run's best guess but the token"];
  const guesses = new Map();
  const runs = first === "clean" ? ["clean", "corrupt"] : ["corrupt", "clean"];
  for (const run of runs)
    r[`${run}_top`].forEach((g, i) => {
      const seen = guesses.get(g.token_id) ?? { token: g.token, where: [] };
      seen.where.push(`${run} #${i + 1}`);
      guesses.set(g.token_id, seen);
    });
  if (!guesses.has(id)) guesses.set(id, { token, where: ["picked"] });
  return [
    { value: "", text: chosen === null ? `“${token}” (auto: ${auto})` : `auto: ${auto}` },
    ...[...guesses].map(([value, g]) => ({ value: String(value), text: `“${g.token}” (${g.where.join(", ")})` })),
  ];
}

/** The token and foil selects: both runs' top guesses from the last answer, the picks (or auto) chosen. */
function drawPicks(state, response) {
  setHidden(byId("patch-pick"), !response && picked(state).every((p) => p === null));
  for (const [elId, first, chosen] of [
    ["patch-token", "clean", state.patchToken],
    ["patch-foil", "corrupt", state.patchFoil],
  ]) {
    const select = byId(elId);
    if (response) {
      const options = guessOptions(response, first, chosen);
      const sig = JSON.stringify(options);
      if (select.dataset.options !== sig) {
        select.dataset.options = sig;
        select.replaceChildren(...options.map((o) => Object.assign(document.createElement("option"), o)));
      }
    }
    const value = chosen === null ? "" : String(chosen);
    if (select.value !== value) select.value = value;
  }
}

/** Layers × clean tokens: the share restored by the clean residual stream after each block at each token. */
export function residualFigure({ residual, tokens }) {
  const peak = signedPeak(residual, 1);
  const { trace, yaxis } = layerTokenGrid(residual, tokens, residual.map((_, l) => `block ${l}`));
  return {
    data: [
      {
        ...trace,
        zmin: -peak,
        zmax: peak,
        zmid: 0,
        colorscale: SIGNED_SCALE, // blue (low) to red (high)
        hovertemplate: "after %{customdata[0]}, at <b>%{customdata[1]}</b>: restores %{z:+.3f}<extra></extra>",
        colorbar: colorBar("restored"),
      },
    ],
    layout: baseLayout({
      margin: { l: 88, r: 8, t: tokenMargins(tokens).t, b: 10 },
      height: Math.max(180, 30 * residual.length + tokenMargins(tokens).t + 20),
      xaxis: { ...tokenAxis(tokens, { side: "top", title: "clean token", angle: -55 }), type: "linear" },
      yaxis: { type: "linear", ...yaxis },
    }),
  };
}

/** The caption: the token and foil, both differences, and what a cell is. */
export function patchingWords(r) {
  const where = `after “${r.tokens[r.position]}” (token ${r.position})`;
  const piece =
    r.what === "heads"
      ? "one head's output (its pattern applied to v, at every token)"
      : "the residual stream after one block at one token (a token after the chosen one restores nothing)";
  return (
    `logit(“${r.token}”) − logit(“${r.foil}”) ${where}: ${fmtFixed(r.clean_diff)} on the clean text, ` +
    `${fmtFixed(r.corrupt_diff)} on the corrupt one. Each cell is the corrupt run with ${piece} taken from the ` +
    `clean run: the share of the difference it restores, 1 (red) all of it, 0 nothing, below 0 (blue) the ` +
    `other way.`
  );
}

function setWords(caption, plot) {
  setText(byId("patch-caption"), caption);
  setHidden(byId("patch-plot"), !plot); // nothing stale under a refusal
}

/** The corrupt run patched from the clean one: its question, or null before both texts and the tokens are in. */
function patchingQuestion(state) {
  const tokens = textTokens(state);
  if (!state.textB.trim() || !tokens || !state.text.trim()) return null;
  const url = "/api/patching";
  // its subject is two texts: the clean one (the page's) and the corrupt one
  // an encoder–decoder: the two texts are sources, read with the page's stack and target
  const { stack, target } = subject(state, url);
  const body = { clean: state.text, corrupt: state.textB, what: state.patchWhat, stack, target };
  // with an image the chosen token counts the image's prompt: the text alone is read at its own last token; the
  // encoder stack's rows are the source's, and the difference is read at the last target token; no token chosen:
  // the server's default (the last token, an encoder's first mask token)
  if (!textOnlyNow(state, { route }) && querySide(state) !== "source" && state.position !== null)
    body.position = selectedPosition(state, tokens.length);
  for (const [field, , name] of PICKS) if (state[field] !== null) body[name] = state[field];
  return question("patching", url, body);
}

/** What the view asks for (the data step asks it, answers.js). */
export const need = (state) => [patchingQuestion(state)];

export function draw(state) {
  const what = byId("patch-what");
  if (what.value !== state.patchWhat) what.value = state.patchWhat;
  showSecondText(byId("patch-corrupt"), state);
  const note = asTrainedWords(state, "Patching shows");
  setText(byId("patch-note"), note ?? "");
  setHidden(byId("patch-note"), !note);
  if (!state.textB.trim()) {
    setHidden(byId("patch-pick"), true);
    setWords("Type a corrupt text: the clean one (the text above) with a word changed, in as many tokens.", false);
    return false;
  }
  const q = patchingQuestion(state);
  if (!q) return false;
  const { response, error } = answerIn(state, q);
  drawPicks(state, response);
  if (!response) {
    setWords(error ? `Could not patch: ${error}` : "patching…", false);
    return false;
  }
  setWords(patchingWords(response), true);
  drawPlot(
    byId("patch-plot"),
    idOf(response),
    () =>
      response.what === "heads"
        ? layerHeadFigure(response.heads, { label: "restored", hover: "restores", peak: signedPeak(response.heads, 1) })
        : residualFigure(response),
    "attnscope-patching",
  );
  return true;
}
