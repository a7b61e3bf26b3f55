// The head effects card (issue 18): for the chosen position and the token the model puts first
// there, how much its log-probability drops when each head alone is switched off
// (POST /api/head-effects), as a layer × head heatmap beside the grid; a click opens that head.
// The answer lives in `state.effects` with the inputs it was measured for: after the text, the
// chosen token, the switched-off heads or the ablation changes, the card says it is out of
// date and offers to measure again (measuring every head is too slow to follow each keystroke).

import { errorText, postJSON } from "../api.js";
import { idOf, mount, onPlotClick, setHidden, setText } from "../dom.js";
import { changedInputs, inputsFor, outOfDateWords, whatIfOn } from "../measured.js";
import { fmt } from "./ablation.js";
import { SIGNED_SCALE } from "../draw/figures.js";
import { blankSubject, subject } from "../subject.js";

/** Plotly figure of `delta[layer][head]` (nats; negative = the head helped the prediction). */
export function effectsFigure(answer) {
  // one row per layer with heads, by the model's numbers (a hybrid's other layers are null: no row)
  const layers = answer.delta.flatMap((row, l) => (row ? [l] : []));
  const delta = layers.map((l) => answer.delta[l]);
  const peak = Math.max(1e-6, ...delta.flat().map(Math.abs));
  const L = delta.length;
  const H = delta[0].length;
  return {
    data: [
      {
        type: "heatmap",
        z: delta,
        x: Array.from({ length: H }, (_, h) => `H${h}`),
        y: layers.map((l) => `L${l}`),
        zmin: -peak,
        zmax: peak,
        colorscale: SIGNED_SCALE, // red: switching the head off raises log p
        colorbar: { title: { text: "Δ log p" }, thickness: 10 },
        hovertemplate: "%{y} · %{x}<br>switched off: Δ log p = %{z:.3f}<extra></extra>",
        xgap: 1,
        ygap: 1,
      },
    ],
    layout: {
      margin: { l: 36, r: 8, t: 8, b: 28 },
      height: Math.max(150, 26 * L + 40),
      yaxis: { autorange: "reversed", fixedrange: true },
      xaxis: { side: "bottom", fixedrange: true },
    },
  };
}

const ABOUT =
  "How much each head, switched off alone, changes the log-probability of the top guess at the chosen token. " +
  "Click a cell to open that head.";

/** The caption of a measured answer: the guess, its probability, and the head that matters most to it. */
function answerWords(answer) {
  const flat = answer.delta.flatMap((row, l) => (row ?? []).map((d, h) => ({ d, l, h })));
  const worst = flat.reduce((a, b) => (b.d < a.d ? b : a));
  return (
    `P(${answer.token}) after token ${answer.position}: ${fmt(answer.prob)}. ` +
    `Switching L${worst.l} · H${worst.h} off lowers its log-probability most (${worst.d.toFixed(2)}). Click a ` +
    `cell to open that head.`
  );
}

/**
 * Measure every head's effect at the chosen token into `state.effects` (the card and the
 * Attribution view draw it); `token_id` (optional): the token to measure, else the top guess.
 */
export async function measureEffects(app, token_id = null) {
  const { state } = app;
  if (blankSubject(state)) return;
  const measured = ["text", "target", "stack", "image", "position", "ablate", "effectsMode"];
  const record = { inputs: inputsFor(state, measured), pending: true };
  state.effects = record;
  app.update();
  const body = { ...subject(state, "/api/head-effects"), ablation: state.effectsMode };
  if (state.position !== null) body.position = state.position;
  if (token_id !== null) body.token_id = token_id;
  try {
    record.answer = await postJSON("/api/head-effects", body);
    record.inputs.position = record.answer.position; // the server's choice where none was made
  } catch (err) {
    record.error = errorText(err);
  }
  record.pending = false;
  if (state.effects === record) app.update();
}

/** The card as the state says: its button, its notes (out of date, the what-ifs), its caption and heatmap. */
function drawEffects({ state, root, plot, caption, run, mean, note }) {
  mean.checked = state.effectsMode === "mean";
  const r = state.effects;
  run.disabled = !!r?.pending;
  const changed = r && !r.pending ? changedInputs(r.inputs, state) : [];
  root.classList.toggle("stale", changed.length > 0);
  if (changed.length) root.dataset.stale = "1";
  else delete root.dataset.stale;
  setText(run, changed.length ? "Measure again" : "Measure");
  const notes = [];
  if (changed.length)
    notes.push(`${outOfDateWords(changed, "these effects were measured")} Measure again for the current ones.`);
  if (whatIfOn(state)) {
    notes.push(
      "Head effects are measured on the model as trained (causal mask on, its own scaling): the what-if " +
        "switches do not apply to them.",
    );
  }
  setText(note, notes.join(" "));
  setHidden(note, notes.length === 0);
  if (!r) return;
  if (r.pending) setText(caption, "Switching every head off in turn…");
  else if (r.error) setText(caption, `Could not measure: ${r.error}`);
  else {
    setText(caption, answerWords(r.answer));
    const sig = String(idOf(r.answer));
    if (plot.dataset.signature !== sig && window.Plotly) {
      plot.dataset.signature = sig;
      const fig = effectsFigure(r.answer);
      window.Plotly.react(plot, fig.data, fig.layout, { displayModeBar: false, responsive: true });
      plot.dataset.position = String(r.answer.position);
      plot.dataset.token = r.answer.token;
    }
  }
}

/** Install the card after the grid's; `app`: {state, els, update, selectHead}. Returns the card, `{draw(state)}`. */
export function installEffects(app) {
  const { state, els } = app;
  const { root, parts } = mount(
    "article",
    "card effects-card",
    "effects",
    `<header class="card-head row"><h2>Head effects</h2>
      <label class="small"><input type="checkbox" data-testid="effects-mean" /> mean-ablate</label>
      <button type="button" class="btn" data-testid="effects-run">Measure</button></header>
    <p class="muted small" data-testid="effects-caption">${ABOUT}</p>
    <p class="effects-note small" data-testid="effects-note" role="status" hidden></p>
    <div class="plot plot-effects" data-testid="effects-heatmap"></div>`,
  );
  els.headsGrid.closest("article").after(root);
  const card = {
    state,
    root,
    plot: parts["effects-heatmap"],
    caption: parts["effects-caption"],
    run: parts["effects-run"],
    mean: parts["effects-mean"],
    note: parts["effects-note"],
  };
  const measure = () => measureEffects(app);
  card.run.addEventListener("click", measure);
  card.mean.addEventListener("change", () => {
    state.effectsMode = card.mean.checked ? "mean" : "zero";
    measure();
  });
  onPlotClick(card.plot, (pt) => {
    const layer = Number.parseInt(String(pt.y).slice(1), 10);
    const head = Number.parseInt(String(pt.x).slice(1), 10);
    if (Number.isInteger(layer) && Number.isInteger(head)) app.selectHead(layer, head);
  });
  return { draw: () => drawEffects(card), answers: ["effects"] }; // a new model drops its answer (data.js)
}
