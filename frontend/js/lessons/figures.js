// Figures of the lessons page: pure functions from a lesson endpoint's answer to a Plotly figure.

import { ACCENT, BLUE, MUTED, ORANGE, WEIGHT_SCALE, baseLayout, hatchImages } from "../draw/figures.js";

/** The bag-of-words weights: row t is 1/(t+1) on keys 0..t; the −∞ cells are hatched. */
export function bowWeightsFigure(weights) {
  const T = weights.length;
  const z = weights.map((row, i) => row.map((v, j) => (j <= i ? v : null)));
  const idx = Array.from({ length: T }, (_, i) => i);
  return {
    data: [
      {
        type: "heatmap",
        z,
        x: idx,
        y: idx,
        colorscale: WEIGHT_SCALE,
        zmin: 0,
        zmax: 1,
        xgap: 1,
        ygap: 1,
        hoverongaps: false,
        texttemplate: T <= 10 ? "%{z:.2f}" : "",
        textfont: { size: 10 },
        hovertemplate: "position %{y} takes %{z:.4f} of position %{x}<extra></extra>",
        colorbar: {
          thickness: 10,
          outlinewidth: 0,
          len: 0.9,
          title: { text: "weight", side: "right", font: { size: 11 } },
        },
      },
    ],
    layout: baseLayout({
      margin: { l: 36, r: 8, t: 28, b: 8 },
      images: hatchImages(
        weights.map((row, i) => row.map((_, j) => (j <= i ? 1 : 0))),
        "x",
        "y",
        24,
      ),
      xaxis: { side: "top", range: [-0.5, T - 0.5], showgrid: false, zeroline: false, dtick: 1, fixedrange: true },
      yaxis: { range: [T - 0.5, -0.5], showgrid: false, zeroline: false, dtick: 1, fixedrange: true },
      uirevision: "bow",
    }),
  };
}

/** Softmax of a row and of the row × factor, as grouped bars. */
export function softmaxBarsFigure({ logits, factor, softmax, softmax_scaled: scaled }) {
  const x = logits.map((v, i) => `${i}: ${Number(v.toFixed(3))}`);
  const bars = (y, name, color) => ({
    type: "bar",
    x,
    y,
    name,
    marker: { color },
    texttemplate: "%{y:.2f}",
    textposition: "outside",
    textfont: { size: 10 },
    cliponaxis: false,
    hovertemplate: `${name}<br>score %{x}<br>weight %{y:.4f}<extra></extra>`,
  });
  return {
    data: [bars(softmax, "softmax(scores)", BLUE), bars(scaled, `softmax(scores × ${factor})`, ORANGE)],
    layout: baseLayout({
      barmode: "group",
      bargap: 0.25,
      margin: { l: 48, r: 8, t: 10, b: 40 },
      yaxis: {
        range: [0, 1.08],
        title: { text: "weight", font: { size: 11, color: MUTED } },
        gridcolor: "#eceef2",
        fixedrange: true,
      },
      xaxis: {
        title: { text: "position: score", font: { size: 11, color: MUTED } },
        fixedrange: true,
        type: "category",
      },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      uirevision: "softmax",
    }),
  };
}

/** The lesson's histograms: counts of raw and scaled random scores on the server's bins. */
export function varianceLessonFigure({ bin_edges: edges, hist_raw: raw, hist_scaled: scaled, head_size: hs }) {
  const centres = raw.map((_, i) => (edges[i] + edges[i + 1]) / 2);
  const width = edges[1] - edges[0];
  const bars = (y, name, color) => ({
    type: "bar",
    x: centres,
    y,
    width,
    name,
    marker: { color, line: { color: "#ffffff", width: 0.5 } },
    opacity: 0.75,
    hovertemplate: `${name}<br>around %{x:.2f}: %{y}<extra></extra>`,
  });
  return {
    data: [bars(raw, "q·kᵀ", ORANGE), bars(scaled, `q·kᵀ / √${hs}`, BLUE)],
    layout: baseLayout({
      barmode: "overlay",
      margin: { l: 48, r: 8, t: 10, b: 40 },
      xaxis: { title: { text: "score", font: { size: 11, color: MUTED } }, zerolinecolor: "#c9ced8", fixedrange: true },
      yaxis: { title: { text: "count", font: { size: 11, color: MUTED } }, gridcolor: "#eceef2", fixedrange: true },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      uirevision: "variance-lesson",
    }),
  };
}

/** var(q·kᵀ) and var(q·kᵀ/√d_k) against head size, log–log, with y = d_k for reference. */
export function varianceSweepFigure(points, current) {
  const x = points.map((p) => p.head_size);
  const line = (y, name, color, band = false) => ({
    type: "scatter",
    mode: band ? "lines" : "lines+markers",
    x,
    y,
    name,
    line: band ? { color: "rgba(154, 161, 173, 0.35)", width: 9 } : { color, width: 2.2 },
    marker: { size: 6, color },
    hovertemplate: `${name}<br>d_k %{x}: %{y:.3g}<extra></extra>`,
  });
  return {
    data: [
      line(x, "d_k and 1 (expected)", null, true),
      {
        ...line(
          x.map(() => 1),
          "",
          null,
          true,
        ),
        showlegend: false,
        hoverinfo: "skip",
        hovertemplate: undefined,
      },
      line(
        points.map((p) => p.var_scores_raw),
        "var(q·kᵀ)",
        ORANGE,
      ),
      line(
        points.map((p) => p.var_scores),
        "var(q·kᵀ / √d_k)",
        BLUE,
      ),
    ],
    layout: baseLayout({
      margin: { l: 48, r: 8, t: 10, b: 40 },
      xaxis: {
        type: "log",
        tickvals: x,
        ticktext: x.map(String),
        title: { text: "head size d_k", font: { size: 11, color: MUTED } },
        gridcolor: "#f0f1f4",
        fixedrange: true,
      },
      yaxis: {
        type: "log",
        tickvals: [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500],
        title: { text: "variance", font: { size: 11, color: MUTED } },
        gridcolor: "#eceef2",
        fixedrange: true,
      },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      shapes:
        current === undefined
          ? []
          : [
              {
                type: "line",
                xref: "x",
                yref: "paper",
                x0: current,
                x1: current,
                y0: 0,
                y1: 1,
                line: { color: ACCENT, width: 1.5, dash: "dash" },
              },
            ],
      uirevision: "sweep",
    }),
  };
}
