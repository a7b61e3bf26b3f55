// The atlas's figures, pure functions of the server's answers: the layer × head map of a metric (or
// the difference of two atlases), a head's histograms, and its queries and keys projected together.

import { QUALITATIVE, SIGNED_SCALE, WEIGHT_SCALE, baseLayout, signedRange } from "./figures.js";

// metrics whose values are a share of a row's attention: drawn on 0..1
export const SHARES = new Set([
  "first_token",
  "sink_mass",
  "previous_token",
  "self",
  "local_fraction",
  "induction",
]);

// metrics whose values are mostly far below 1 (two models' divergence, in bits): shown to 3 significant digits
const SMALL = new Set(["divergence"]);

/** A value as text: `decimals` places, or 3 significant digits where those places would hide it. */
export function valueText(x, decimals = 3) {
  return x === 0 || Math.abs(x) >= 10 ** (1 - decimals) ? x.toFixed(decimals) : x.toExponential(2);
}

/** A bin edge as text: 0.5, 0.0039, 9.5e-7. */
const edgeText = (x) => (x === 0 || x >= 1e-3 ? String(Number(x.toPrecision(2))) : x.toExponential(1));

/** A bin by its name: over whole numbers (edges at halves), [1.5, 3.5) is "2–3"; else its two edges. */
function binName(lo, hi, whole) {
  if (!whole) return `${edgeText(lo)}–${edgeText(hi)}`;
  const a = Math.ceil(lo);
  const b = Math.ceil(hi) - 1;
  return a >= b ? String(a) : `${a}–${b}`;
}

export const TOP_TOKENS = 8; // coloured by token: the most frequent tokens each a colour, the rest grey

/** The head's queries and keys projected together (AttentionViz): circles and crosses, coloured by
 * position, or (`by` "token") the most frequent tokens each in a colour of its own. */
export function qkFigure(answer, by = "position") {
  return by === "token" ? qkByToken(answer) : qkByPosition(answer);
}

function qkByToken(answer) {
  const counts = new Map();
  for (const p of answer.points) if (p.kind === "q") counts.set(p.token, (counts.get(p.token) ?? 0) + 1);
  const top = [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP_TOKENS)
    .map(([t]) => t);
  const groups = [...top.map((t, i) => [t, QUALITATIVE[i % QUALITATIVE.length]]), [null, "#c4c8d0"]];
  const data = [];
  for (const [token, colour] of groups) {
    for (const [kind, symbol] of [
      ["q", "circle"],
      ["k", "x"],
    ]) {
      const pts = answer.points.filter(
        (p) => p.kind === kind && (token === null ? !top.includes(p.token) : p.token === token),
      );
      data.push({
        type: "scatter",
        mode: "markers",
        name: token === null ? "other tokens" : token,
        legendgroup: token ?? "other",
        showlegend: kind === "q",
        x: pts.map((p) => p.x),
        y: pts.map((p) => p.y),
        customdata: pts.map((p) => [p.token, p.position, p.context]),
        marker: { symbol, size: 6, color: colour, opacity: 0.8 },
        hovertemplate:
          `${kind === "q" ? "query" : "key"} <b>%{customdata[0]}</b><br>position %{customdata[1]} ` +
          `of context %{customdata[2]}<extra></extra>`,
      });
    }
  }
  return { data, layout: qkLayout(answer, { legend: { orientation: "v", x: 1.02, y: 1 } }) };
}

function qkLayout(answer, extra) {
  const [a, b] = answer.explained.map((e) => `${(100 * e).toFixed(1)} %`);
  return baseLayout({
    margin: { l: 40, r: 10, t: 10, b: 40 },
    xaxis: { title: { text: `PC 1 (${a} of the variance)`, font: { size: 11 } }, zeroline: false },
    yaxis: { title: { text: `PC 2 (${b})`, font: { size: 11 } }, zeroline: false, scaleanchor: "x" },
    ...extra,
  });
}

function qkByPosition(answer) {
  const traces = [
    ["q", "queries", "circle"],
    ["k", "keys", "x"],
  ].map(([kind, name, symbol]) => {
    const pts = answer.points.filter((p) => p.kind === kind);
    return {
      type: "scatter",
      mode: "markers",
      name,
      x: pts.map((p) => p.x),
      y: pts.map((p) => p.y),
      customdata: pts.map((p) => [p.token, p.position, p.context]),
      marker: { symbol, size: 6, color: pts.map((p) => p.position), coloraxis: "coloraxis", opacity: 0.8 },
      hovertemplate:
        `${name.slice(0, -1)} <b>%{customdata[0]}</b><br>position %{customdata[1]} of context ` +
        `%{customdata[2]}<extra></extra>`,
    };
  });
  return {
    data: traces,
    layout: qkLayout(answer, {
      coloraxis: {
        colorscale: WEIGHT_SCALE,
        colorbar: { title: { text: "position", side: "right", font: { size: 11 } }, thickness: 10, outlinewidth: 0 },
      },
      legend: { orientation: "h", y: -0.15 },
    }),
  };
}

/** The layer × head map of one metric, or of a difference (signed: diverging, centred on 0). */
export function atlasMapFigure({ grid, layers, metric, signed }) {
  const heads = grid[0]?.length ?? 0;
  const range = signed ? signedRange(grid) : null;
  const share = SHARES.has(metric);
  return {
    data: [
      {
        type: "heatmap",
        z: grid,
        x: Array.from({ length: heads }, (_, h) => h),
        y: layers.map((_, i) => i),
        customdata: layers.map((l) => Array.from({ length: heads }, (_, h) => [l, h])),
        colorscale: signed ? SIGNED_SCALE : WEIGHT_SCALE,
        ...(signed ? { zmin: -range, zmax: range, zmid: 0 } : share ? { zmin: 0, zmax: 1 } : { zmin: 0 }),
        xgap: 1,
        ygap: 1,
        hoverongaps: false,
        hovertemplate:
          `L%{customdata[0]} · H%{customdata[1]}<br>${metric}${signed ? " difference" : ""} ` +
          `%{z:${signed ? "+" : ""}${SMALL.has(metric) ? ".3e" : ".4f"}}<extra>click for the head's card</extra>`,
        colorbar: {
          title: { text: signed ? "difference" : metric, side: "right", font: { size: 11 } },
          thickness: 12,
          outlinewidth: 0,
        },
      },
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 30, b: 30 },
      xaxis: { title: { text: "head", font: { size: 11 } }, dtick: 1, fixedrange: true, side: "top" },
      yaxis: {
        tickmode: "array",
        tickvals: layers.map((_, i) => i),
        ticktext: layers.map((l) => `L${l}`),
        autorange: "reversed",
        fixedrange: true,
      },
    }),
  };
}

/** The histograms' columns in a plot `px` wide: two side by side, one on a phone so each title has the width. */
export const histColumns = (px) => (px >= 560 ? 2 : 1);

const HIST_ROW_PX = 150; // a chart of 100 px and, over it, its title and the row above's tick labels

/** The histograms' plot height in px: a row of `cols` charts per HIST_ROW_PX, `n` metrics. */
export const histHeight = (n, cols) => 50 + HIST_ROW_PX * Math.ceil(n / cols);

/**
 * One head's histograms, a small bar chart per metric, each over its bins' edges, `cols` a row (histColumns);
 * each title sits on its own chart, in the gap that the grid leaves above it.
 */
export function atlasHistogramsFigure(card, cols = 2) {
  const names = Object.keys(card.metrics);
  const rows = Math.ceil(names.length / cols);
  const data = [];
  const layout = baseLayout({
    margin: { l: 40, r: 10, t: 24, b: 30 },
    height: histHeight(names.length, cols),
    showlegend: false,
    grid: { rows, columns: cols, pattern: "independent", ygap: 0.5, xgap: 0.15 },
    annotations: [],
  });
  names.forEach((name, n) => {
    const m = card.metrics[name];
    const axis = n === 0 ? "" : String(n + 1);
    // bins of one width on a number line; bins that double (distance in tokens, divergence) as named categories
    const widths = m.histogram.map((_, i) => m.bin_edges[i + 1] - m.bin_edges[i]);
    const even = widths.every((w) => Math.abs(w - widths[0]) < 1e-9);
    const whole = m.bin_edges.slice(1).every((e) => Math.abs(e - Math.floor(e) - 0.5) < 1e-9); // edges at halves
    // named bins stop after the last one holding a row (distance bins run to 65535 tokens)
    const last = even ? m.histogram.length : Math.max(1, m.histogram.findLastIndex((c) => c > 0) + 1);
    const x = even
      ? m.histogram.map((_, i) => (m.bin_edges[i] + m.bin_edges[i + 1]) / 2)
      : m.histogram.slice(0, last).map((_, i) => binName(m.bin_edges[i], m.bin_edges[i + 1], whole));
    data.push({
      type: "bar",
      x,
      y: m.histogram.slice(0, last),
      ...(even ? { width: widths } : {}),
      xaxis: `x${axis}`,
      yaxis: `y${axis}`,
      marker: { color: "#3b6ea8" },
      customdata: m.histogram.map((_, i) => [m.bin_edges[i], m.bin_edges[i + 1]]),
      hovertemplate: `${name} in [%{customdata[0]:.3g}, %{customdata[1]:.3g}): %{y} rows<extra></extra>`,
    });
    layout.annotations.push({
      text: `${name} · mean ${m.mean === null ? "—" : valueText(m.mean)}`,
      xref: `x${axis} domain`,
      yref: `y${axis} domain`,
      x: 0,
      y: 1,
      xanchor: "left",
      yanchor: "bottom",
      yshift: 2,
      showarrow: false,
      font: { size: 11 },
    });
  });
  return { data, layout };
}
