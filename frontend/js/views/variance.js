// The "Variance" view: histograms of the chosen head's raw and scaled scores on shared bins, and
// the server's variances and their ratio in words.

import { ratioWords, scoresFormula, unscaled } from "../draw/captions.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { BLUE, MUTED, ORANGE, baseLayout, fmtSig, unmaskedValues } from "../draw/figures.js";
import { currentHead } from "../draw/pooled.js";
import { headDim } from "../state.js";

export const id = "variance";
export const label = "Variance";
export const needs = ["detail"];

/** Draw the view from the current chosen-head answer; false while there is none. */
export function draw(state) {
  const head = currentHead(state);
  if (!head) return false;
  const { detail, layer, d } = head;
  const s = d.stats;
  drawPlot(
    byId("variance-hist"),
    `${idOf(detail)}`,
    () => varianceFigure({ raw: d.attn_scores_raw, scaled: d.attn_scores, stats: s, layer, block: d.block }),
    "attnscope-variance",
  );
  // a long text's scores come max-pooled: the bars count blocks, the variances every pair
  const caption = byId("variance-caption");
  if (caption) {
    caption.dataset.exact ??= caption.textContent;
    setText(
      caption,
      d.block > 1
        ? `The largest unmasked score of each ${d.block}×${d.block} block of (query, key) pairs ` +
            `(${detail.tokens.length} tokens ` +
            `are too many pairs to send), on shared bins. Dashed lines: one standard deviation either side of ` +
            `the mean, over every pair.`
        : caption.dataset.exact,
    );
  }
  const ratio = ratioWords({ stats: s, layer, headDim: headDim(state), T: detail.tokens.length });
  setText(
    byId("variance-summary"),
    `var(q·kᵀ) = ${fmtSig(s.var_scores_raw)}, var(${scoresFormula(layer)}) = ${fmtSig(s.var_scores)}: ` +
      `${ratio.sentence}`,
  );
  return true;
}

/** Bins shared by the raw and scaled scores: `nbins` of them, symmetric about 0, over both's largest |value|. */
function sharedBins(r, s, nbins) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of r.concat(s)) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (!Number.isFinite(lo)) {
    lo = -1;
    hi = 1;
  }
  const m = Math.max(Math.abs(lo), Math.abs(hi), 1e-6);
  const size = (2 * m) / nbins;
  return { start: -m - size / 2, end: m + size / 2, size };
}

/** One histogram of scores `x` on the shared `bins`, named in the legend and the hover. */
const scoreHistogram = (x, name, color, bins) => ({
  type: "histogram",
  x,
  // a long formula (a softcap, √query_pre_attn_scalar) puts its variance on a second line:
  // a phone's legend is 390 px
  name: name.length > 48 ? name.replace(" (var ", "<br>(var ") : name,
  xbins: bins,
  autobinx: false,
  marker: { color, line: { color: "#ffffff", width: 0.5 } },
  opacity: 0.72,
  hovertemplate: `${name}<br>%{x}: %{y} scores<extra></extra>`,
});

/** Dashed lines at mean ± sd, across the whole plot's height. */
const sdLines = (mean, sd, color) =>
  [mean - sd, mean + sd].map((x) => ({
    type: "line",
    xref: "x",
    yref: "paper",
    x0: x,
    x1: x,
    y0: 0,
    y1: 1,
    line: { color, width: 1.5, dash: "dash" },
  }));

/**
 * Histograms of the chosen head's raw and scaled scores (unmasked entries), on shared bins,
 * with ±1 standard deviation marked for each: the server's means and variances (`stats`);
 * `layer` (divisor_rule, softcap) names the scaled scores.
 */
export function varianceFigure({ raw, scaled, stats, layer, nbins = 60, block = 1 }) {
  // a long text's scores come max-pooled: each value is the largest of a block×block of pairs
  const of = block === 1 ? "" : `largest in each ${block}×${block} block: `;
  const every = block === 1 ? "" : " over every pair";
  const r = unmaskedValues(raw);
  const s = unmaskedValues(scaled);
  const bins = sharedBins(r, s, nbins);
  const sdR = Math.sqrt(stats.var_scores_raw);
  const sdS = Math.sqrt(stats.var_scores);
  const meanR = stats.mean_scores_raw;
  const meanS = stats.mean_scores;
  return {
    data: [
      scoreHistogram(r, `${of}raw q·kᵀ (var ${fmtSig(stats.var_scores_raw)}${every})`, ORANGE, bins),
      scoreHistogram(
        s,
        of +
          (unscaled(layer)
            ? `${scoresFormula(layer)}, what-if: ${layer.softcap ? "only the softcap" : "the same scores"} (var ` +
              `${fmtSig(stats.var_scores)}${every})`
            : `scaled ${scoresFormula(layer)} (var ${fmtSig(stats.var_scores)}${every})`),
        BLUE,
        bins,
      ),
    ],
    layout: baseLayout({
      barmode: "overlay",
      margin: { l: 56, r: 16, t: 10, b: 46 },
      xaxis: {
        title: { text: "score", font: { size: 11, color: MUTED } },
        zeroline: true,
        zerolinecolor: "#c9ced8",
        gridcolor: "#f0f1f4",
      },
      yaxis: {
        title: {
          text: block === 1 ? "number of (query, key) pairs" : "number of blocks",
          font: { size: 11, color: MUTED },
        },
        gridcolor: "#eceef2",
      },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      shapes: [...sdLines(meanR, sdR, ORANGE), ...sdLines(meanS, sdS, BLUE)],
      uirevision: "variance",
    }),
  };
}
