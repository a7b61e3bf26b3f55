// The "Scaled vs unscaled" view: the chosen head's pattern with and without the division of its
// scores, the entropy of each row in both, and the head's statistics as a table.

import {
  entropyCaption,
  scalingLeftCaption,
  divisorWords,
  num,
  ratioWords,
  scoresFormula,
  unscaled,
  unscaledFormula,
} from "../draw/captions.js";
import { byId, drawPlot, idOf, setText } from "../dom.js";
import { BLUE, MUTED, ORANGE, baseLayout, fmtFixed, fmtSig, tokenMargins, tokenTicks } from "../draw/figures.js";
import { currentHead } from "../draw/pooled.js";
import { headDim } from "../state.js";
import { headFigure } from "./head.js";
import { extraKeys, quirkWords } from "../draw/quirks.js";
import { tokenBands, withBands } from "../draw/quirkbands.js";

export const id = "scaling";
export const was = ["compare"]; // the id of old links
export const label = "Scaled vs unscaled";
/** The chosen head's answer; a long text's head is asked with its unscaled pattern too (requests.js). */
export const needs = ["detail"];
export const focus = ["pattern_unscaled"];

/** Draw the view from the current chosen-head answer; false while it has none (or lacks the unscaled pattern). */
export function draw(state) {
  const head = currentHead(state);
  if (!head) return false;
  const { detail, layer, d } = head;
  // a long text's answer: the fields of `focus` (max-pooled where block > 1) and the head's stats
  const h = detail.focus?.thumbnail
    ? {
        pattern: d.pattern,
        pattern_unscaled: d.pattern_unscaled,
        attn_scores_raw: d.attn_scores_raw,
        attn_scores: d.attn_scores,
        stats: d.stats,
      }
    : layer.heads[0];
  if (!h.pattern_unscaled) return false; // asked for another view: data.js asks again (ensureData)
  const mask = d.mask;
  const sig = `${idOf(detail)}|${!!state.imageExpanded}`;
  // one head's heatmap, exact or max-pooled (block > 1): the same arguments either way
  const chosen = { response: detail, layer, mask, head: h, block: d.block };
  // the answer's bands on the token axes (quirkbands.js), as the head view draws them
  const band = { tokens: detail.tokens, bands: tokenBands(state.model, detail), expanded: !!state.imageExpanded };
  const heatmap = (matrix, showscale, uirevision) =>
    withBands(headFigure(state, chosen, { pattern: matrix, showscale, maxTicks: 28, uirevision }), {
      ...band,
      maxTicks: 28,
    });
  drawPlot(byId("scaling-scaled"), sig, () => heatmap(h.pattern, false, "s"), "attnscope-scaled");
  drawPlot(byId("scaling-unscaled"), sig, () => heatmap(h.pattern_unscaled, true, "u"), "attnscope-unscaled");
  setText(byId("scaling-left-caption"), scalingLeftCaption(state));
  for (const span of document.querySelectorAll(".divisor-label")) {
    const what = unscaled(layer) ? "÷ 1, what-if" : `÷ ${divisorWords(layer, headDim(state))}`;
    setText(span, layer.softcap ? `${what}, softcap ${num(layer.softcap)}` : what);
  }
  setText(byId("unscaled-label"), unscaledFormula(layer));
  setText(byId("entropy-caption"), entropyCaption(layer, quirkWords(state.model, "stats", { layer })));
  drawPlot(
    byId("scaling-entropy"),
    sig,
    () =>
      entropyFigure({
        tokens: detail.tokens,
        rowEntropy: h.stats.row_entropy,
        rowEntropyUnscaled: h.stats.row_entropy_unscaled,
        mask: d.block > 1 ? null : mask,
        layer,
        keys: extraKeys(state.model, layer),
      }),
    "attnscope-entropy",
  );
  drawStatsTable(state, h, layer, detail.tokens.length);
  return true;
}

/** The statistics table of the chosen head, rebuilt only when its rows change. */
function drawStatsTable(state, head, layer, T) {
  const table = byId("stats-table");
  const stats = head?.stats;
  if (!stats) return;
  const rows = statsRows(stats, { layer, headDim: headDim(state), T });
  const sig = JSON.stringify(rows);
  if (table.dataset.signature === sig) return;
  table.dataset.signature = sig;
  const body = document.createElement("tbody");
  for (const row of rows) {
    const tr = document.createElement("tr");
    tr.dataset.stat = row.key;
    if (row.highlight) tr.className = "highlight";
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = row.label;
    const v = document.createElement("td");
    v.className = "num";
    v.textContent = row.value;
    const u = document.createElement("td");
    u.className = "num";
    u.textContent = row.unscaled ?? "";
    const note = document.createElement("td");
    note.className = "note";
    note.textContent = row.note;
    tr.append(th, v, u, note);
    body.append(tr);
  }
  table.querySelector("tbody").replaceWith(body);
  setText(byId("stats-caption"), `Layer ${state.layer} · head ${state.head}`);
}

/**
 * Per-row entropy of the scaled and unscaled patterns, with the uniform row as a ceiling.
 * `layer` (the answer's: divisor_rule, softcap) names what each softmax was taken of.
 */
export function entropyFigure({ tokens, rowEntropy, rowEntropyUnscaled, mask, layer, keys = [] }) {
  const T = tokens.length;
  const x = tokens.map((_, i) => i);
  // a long text's answer has its mask pooled, not T×T: no keys-seen count, so no ceiling line
  // `keys`: what more every row's softmax sees than the keys (a layer's quirks; the server's entropy counts them)
  const allowed = mask ? mask.map((row) => row.reduce((a, v) => a + (v ? 1 : 0), keys.length)) : null;
  const ceiling = allowed ? allowed.map((n) => Math.log(Math.max(1, n))) : null;
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const line = (y, name, color, dash, width = 2.2) => ({
    type: "scatter",
    mode: T <= 40 ? "lines+markers" : "lines",
    x,
    y,
    name,
    customdata: labels,
    line: { color, width, dash, shape: "linear" },
    marker: { size: 5, color },
    hovertemplate: `%{customdata}: %{y:.3f} nats<extra>${name}</extra>`,
  });
  const { tickvals, ticktext } = tokenTicks(tokens, 30);
  return {
    data: [
      ...(ceiling
        ? [
            line(
              ceiling,
              `uniform row (ln of keys seen${keys.map((k) => ` + ${k}`).join("")})`,
              "#9aa1ad",
              "dot",
              1.5,
            ),
          ]
        : []),
      line(rowEntropyUnscaled, `unscaled softmax(${unscaledFormula(layer)})`, ORANGE, "solid"),
      line(rowEntropy, `scaled softmax(${scoresFormula(layer)})`, BLUE, "solid"),
    ],
    layout: baseLayout({
      margin: { l: 52, r: 12, t: 10, b: tokenMargins(tokens, 30, -50).t },
      xaxis: {
        tickmode: "array",
        tickvals,
        ticktext,
        tickangle: -50,
        showgrid: false,
        zeroline: false,
        range: [-0.5, T - 0.5],
        tickfont: { size: T > 64 ? 9 : 10 },
        title: { text: "query position", font: { size: 11, color: MUTED } },
      },
      yaxis: {
        title: { text: "row entropy (nats)", font: { size: 11, color: MUTED } },
        rangemode: "tozero",
        gridcolor: "#eceef2",
        zeroline: false,
      },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
      hovermode: "x unified",
      uirevision: "entropy",
    }),
  };
}

/**
 * Rows of the stats table: label, value for the scaled pattern, value for the unscaled one
 * (where it has one), and a note. `layer` is the answer's (divisor, divisor_rule, softcap),
 * `headDim` the model's, `T` the number of tokens.
 */
export function statsRows(stats, { layer, headDim, T }) {
  return [
    { key: "var_q", label: "var(q)", value: fmtSig(stats.var_q), note: "over all positions and dims" },
    { key: "var_k", label: "var(k)", value: fmtSig(stats.var_k), note: "" },
    {
      key: "var_scores_raw",
      label: "var(q·kᵀ)",
      value: fmtSig(stats.var_scores_raw),
      note: "raw scores, unmasked entries",
    },
    {
      key: "var_scores",
      label: `var(${scoresFormula(layer)})`,
      value: fmtSig(stats.var_scores),
      note: "the scores softmax sees",
    },
    {
      key: "variance_ratio",
      label: "ratio raw / scaled",
      value: fmtFixed(stats.variance_ratio, 2),
      note: ratioWords({ stats, layer, headDim, T }).note,
      highlight: true,
    },
    {
      key: "entropy",
      label: "mean row entropy",
      value: fmtFixed(stats.entropy),
      unscaled: fmtFixed(stats.entropy_unscaled),
      note: "nats; higher = more spread out",
    },
    {
      key: "max_weight",
      label: "mean max weight",
      value: fmtFixed(stats.max_weight),
      unscaled: fmtFixed(stats.max_weight_unscaled),
      note: "1 = each row puts everything on one key",
    },
  ];
}
