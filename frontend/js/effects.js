// Head effects (issue 18): for the chosen position and the token the model puts first there,
// how much its log-probability drops when each head alone is switched off
// (POST /api/head-effects), as a layer × head heatmap beside the grid; a click opens that head.

import { errorText, isBlank, postJSON } from "./api.js";

/** Plotly figure of `delta[layer][head]` (nats; negative = the head helped the prediction). */
export function effectsFigure(answer) {
  const delta = answer.delta;
  const peak = Math.max(1e-6, ...delta.flat().map(Math.abs));
  const L = delta.length;
  const H = delta[0].length;
  return {
    data: [
      {
        type: "heatmap",
        z: delta,
        x: Array.from({ length: H }, (_, h) => `H${h}`),
        y: Array.from({ length: L }, (_, l) => `L${l}`),
        zmin: -peak,
        zmax: peak,
        colorscale: "RdBu",
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

/** Install the card; `ctx`: {state, els, selectHead}. */
export function installEffects(ctx) {
  const { state, els } = ctx;
  const card = document.createElement("article");
  card.className = "card effects-card";
  card.dataset.testid = "effects";
  card.innerHTML = `
    <header class="card-head row"><h2>Head effects</h2>
      <label class="small"><input type="checkbox" data-testid="effects-mean" /> mean-ablate</label>
      <button type="button" class="btn" data-testid="effects-run">Measure</button></header>
    <p class="muted small" data-testid="effects-caption">How much each head, switched off alone, changes the
      log-probability of the top guess at the chosen token. Click a cell to open that head.</p>
    <div class="plot plot-effects" data-testid="effects-heatmap"></div>`;
  els.headsGrid.closest("article").after(card);
  const plot = card.querySelector("[data-testid=effects-heatmap]");
  const caption = card.querySelector("[data-testid=effects-caption]");
  const run = card.querySelector("[data-testid=effects-run]");
  const mean = card.querySelector("[data-testid=effects-mean]");
  let ticket = 0;

  async function measure() {
    if (isBlank(state.text)) return;
    const mine = ++ticket;
    run.disabled = true;
    caption.textContent = "Switching every head off in turn…";
    const body = { text: state.text, ablate: state.ablate, ablation: mean.checked ? "mean" : "zero" };
    if (state.position !== null) body.position = state.position;
    try {
      const answer = await postJSON("/api/head-effects", body);
      if (mine !== ticket) return;
      const fig = effectsFigure(answer);
      await window.Plotly.react(plot, fig.data, fig.layout, { displayModeBar: false, responsive: true });
      const flat = answer.delta.flatMap((row, l) => row.map((d, h) => ({ d, l, h })));
      const worst = flat.reduce((a, b) => (b.d < a.d ? b : a));
      caption.textContent =
        `P(${answer.token}) after token ${answer.position}: ${(100 * answer.prob).toFixed(1)} %. ` +
        `Switching L${worst.l} · H${worst.h} off lowers its log-probability most (${worst.d.toFixed(2)}). Click a cell to open that head.`;
      plot.dataset.position = String(answer.position);
      plot.dataset.token = answer.token;
    } catch (err) {
      if (mine === ticket) caption.textContent = `Could not measure: ${errorText(err)}`;
    } finally {
      if (mine === ticket) run.disabled = false;
    }
  }

  run.addEventListener("click", measure);
  mean.addEventListener("change", measure);
  let bound = false;
  const bind = () => {
    if (bound || !plot.on) return;
    bound = true;
    plot.on("plotly_click", (ev) => {
      const pt = ev?.points?.[0];
      if (!pt) return;
      const layer = Number.parseInt(String(pt.y).slice(1), 10);
      const head = Number.parseInt(String(pt.x).slice(1), 10);
      if (Number.isInteger(layer) && Number.isInteger(head)) ctx.selectHead(layer, head);
    });
  };
  const observer = new MutationObserver(bind);
  observer.observe(plot, { childList: true });
  return measure;
}
