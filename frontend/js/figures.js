// Pure functions: API data in, Plotly figure objects ({data, layout}) out.
//
// Nothing here touches the DOM or the network, so every figure is a plain function of its
// arguments. Matrices are arrays of rows, indexed [query][key] as in the API. Every number a
// figure shows is the server's (scores, weights, statistics); the words come from captions.js.

import { divisorShort, maskedWhy, num, ratioWords, scoresFormula, softcapWords, unscaled, unscaledFormula } from "./captions.js";

export const FONT_FAMILY =
  'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans", "Liberation Sans", Arial, sans-serif';
export const INK = "#1f2430";
export const MUTED = "#5c6370";
export const ACCENT = "#4338ca";
export const MASK_BG = "#eceef2";
// Okabe–Ito colours: distinguishable with every common colour-vision deficiency.
export const BLUE = "#0072B2";
export const ORANGE = "#E69F00";
export const GREEN = "#009E73";
export const WEIGHT_SCALE = "Viridis";
export const SCORE_SCALE = "Cividis";

const MAX_TICKS_BIG = 40;

// ---------------------------------------------------------------- small helpers

/** At most `n` characters of a token label, with an ellipsis when cut. */
export function shortToken(token, n = 12) {
  return token.length > n ? token.slice(0, n - 1) + "…" : token;
}

/** Tick positions and labels for a token axis, thinned to about `maxTicks` labels. */
export function tokenTicks(tokens, maxTicks = MAX_TICKS_BIG, maxChars = 12) {
  const T = tokens.length;
  const step = Math.max(1, Math.ceil(T / maxTicks));
  const tickvals = [];
  const ticktext = [];
  for (let i = 0; i < T; i += step) {
    tickvals.push(i);
    ticktext.push(shortToken(tokens[i], maxChars));
  }
  return { tickvals, ticktext, step };
}

/** Copy of `matrix` with `null` wherever `mask` is 0: masked cells become gaps in a heatmap. */
export function maskNull(matrix, mask) {
  return matrix.map((row, i) => row.map((v, j) => (mask[i][j] ? v : null)));
}

export const rowSums = (m) => m.map((row) => row.reduce((a, v) => a + (v ?? 0), 0));

/** Every non-null entry of a matrix, flattened. */
export function unmaskedValues(m) {
  const out = [];
  for (const row of m) for (const v of row) if (v !== null && v !== undefined) out.push(v);
  return out;
}

/** `v` with about three significant digits, fixed notation for ordinary sizes. */
export function fmtSig(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1000 || a < 1e-3) return v.toExponential(2);
  return v.toPrecision(3);
}

const fmt = (v, digits = 3) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits));

/**
 * A layout image that hatches the masked cells of one subplot (axis ids like "x", "x3").
 * `mask` is the T×T 0/1 mask (or a pooled one); the image is an SVG with one rectangle per
 * run of masked cells, filled with diagonal stripes, stretched over the subplot and drawn
 * below the heatmap, whose masked cells are gaps. A zero weight is a dark cell; a masked
 * key shows stripes. `stripes` sets roughly how many stripes cross the plot. A data: URI, so
 * nothing is requested over the network. Returns null when nothing is masked.
 */
export function hatchImage(mask, xaxis = "x", yaxis = "y", stripes = 60) {
  const n = mask.length; // rows
  const w = n ? mask[0].length : 0; // columns
  let path = "";
  for (let i = 0; i < n; i++) {
    const row = mask[i];
    let j = 0;
    while (j < w) {
      if (row[j]) {
        j++;
        continue;
      }
      const a = j;
      while (j < w && !row[j]) j++;
      path += `M${a} ${i}h${j - a}v1h${a - j}z`;
    }
  }
  if (!path) return null;
  const s = n / stripes;
  const svg =
    `<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 ${w} ${n}' preserveAspectRatio='none'>` +
    `<defs><pattern id='h' patternUnits='userSpaceOnUse' width='${s}' height='${s}' patternTransform='rotate(45)'>` +
    `<rect width='${s}' height='${s}' fill='${MASK_BG}'/><rect width='${s * 0.3}' height='${s}' fill='#c3c8d2'/></pattern></defs>` +
    `<path d='${path}' fill='url(#h)'/></svg>`;
  return {
    source: "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svg),
    xref: `${xaxis} domain`,
    yref: `${yaxis} domain`,
    x: 0,
    y: 1,
    sizex: 1,
    sizey: 1,
    sizing: "stretch",
    xanchor: "left",
    yanchor: "top",
    layer: "below",
  };
}

/** `hatchImage` as a list for `layout.images`: empty when nothing is masked. */
export const hatchImages = (...args) => {
  const img = hatchImage(...args);
  return img ? [img] : [];
};


export function baseLayout(extra = {}) {
  return {
    font: { family: FONT_FAMILY, size: 12, color: INK },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "#ffffff",
    // dark text on white, 15.9:1 (WCAG AA asks 4.5:1); Plotly would take the text colour from the border
    hoverlabel: { font: { family: FONT_FAMILY, size: 12, color: INK }, bgcolor: "#ffffff", bordercolor: "#4a5160" },
    autosize: true,
    ...extra,
  };
}

/** Font size of token tick labels: smaller as the axis gets crowded. */
const tickFontSize = (T) => (T > 64 ? 9 : T > 24 ? 10 : 11);

/** Rough pixel width of a label (system sans-serif averages about 0.6 em per character). */
const labelPx = (text, size) => Math.ceil(text.length * size * 0.6);

/**
 * Margins that fit the token labels: left for the query labels, top for the key labels
 * rotated by `angle` degrees. Computed here rather than with Plotly's automargin, which
 * costs a second layout pass on every draw.
 */
export function tokenMargins(tokens, maxTicks, angle = -55, titles = true) {
  const size = tickFontSize(tokens.length);
  const { ticktext } = tokenTicks(tokens, maxTicks);
  const widest = ticktext.reduce((w, t) => Math.max(w, labelPx(t, size)), 0);
  const a = (Math.abs(angle) * Math.PI) / 180;
  const extra = titles ? 22 : 4;
  return {
    l: Math.min(140, widest + extra + 6),
    t: Math.min(140, Math.ceil(widest * Math.sin(a) + size * Math.cos(a)) + extra + 4),
  };
}

export function tokenAxis(tokens, { side, reversed, title, maxTicks = MAX_TICKS_BIG, showLabels = true, angle }) {
  const T = tokens.length;
  const { tickvals, ticktext } = tokenTicks(tokens, maxTicks);
  return {
    tickmode: "array",
    tickvals: showLabels ? tickvals : [],
    ticktext: showLabels ? ticktext : [],
    range: reversed ? [T - 0.5, -0.5] : [-0.5, T - 0.5],
    side,
    tickangle: angle ?? 0,
    // "allow": Plotly's default here measures every label's box on each draw to hide the
    // ones that overflow the div, the costliest part of redrawing a labelled heatmap
    ticklabeloverflow: "allow",
    showgrid: false,
    zeroline: false,
    ticks: "",
    tickfont: { size: tickFontSize(T) },
    title: title ? { text: title, font: { size: 11, color: MUTED }, standoff: 4 } : undefined,
  };
}

/** A white-on-black outline around query row `p`: the row whose predictions are shown. */
function rowOutline(p, T, xref = "x", yref = "y") {
  if (p === null || p === undefined || p < 0 || p >= T) return [];
  const box = { type: "rect", xref, yref, x0: -0.5, x1: T - 0.5, y0: p - 0.5, y1: p + 0.5, layer: "above" };
  return [
    { ...box, line: { color: "#000000", width: 3 } },
    { ...box, line: { color: "#ffffff", width: 1.5 } },
  ];
}

// ---------------------------------------------------------------- head view

/**
 * Per cell of `mask`, why the key is masked (the words of captions.js), null where it is
 * seen; one string per kind of reason, shared by the cells.
 */
export function maskedReasons(mask, window = null) {
  const words = new Map();
  return mask.map((row, i) =>
    Array.from(row, (seen, j) => {
      if (seen) return null;
      const kind = Math.sign(j - i);
      if (!words.has(kind)) words.set(kind, maskedWhy({ mask, i, j, window }));
      return words.get(kind);
    }),
  );
}

/**
 * The chosen head's pattern, queries as rows (top to bottom) and keys as columns.
 * Masked cells are gaps over a hatched background, so they never look like a zero weight; a
 * transparent second trace over them says, on hover, that the cell is masked and why (after
 * the query, or outside the layer's sliding `window`). `raw` and `scaled` (T×T, null where
 * masked) add the scores to the hover when given, `scaledLabel` naming what `scaled` is.
 */
export function headHeatmapFigure({
  tokens,
  pattern,
  mask,
  raw = null,
  scaled = null,
  scaledLabel = "score",
  window = null,
  layer,
  head,
  position = null,
  title = null,
  zmax = 1,
  showscale = true,
  maxTicks = MAX_TICKS_BIG,
  uirevision = null,
}) {
  const T = tokens.length;
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const customdata = new Array(T);
  for (let i = 0; i < T; i++) {
    const row = new Array(T);
    const rr = raw ? raw[i] : null;
    const sr = scaled ? scaled[i] : null;
    for (let j = 0; j < T; j++) row[j] = rr ? [labels[i], labels[j], rr[j], sr[j]] : [labels[i], labels[j]];
    customdata[i] = row;
  }
  const scores = raw ? `<br>raw q·kᵀ %{customdata[2]:.3f}<br>${scaledLabel} %{customdata[3]:.3f}` : "";
  const gap = T <= 24 ? 1 : 0;
  const trace = {
    type: "heatmap",
    z: maskNull(pattern, mask),
    customdata,
    colorscale: WEIGHT_SCALE,
    zmin: 0,
    zmax,
    hoverongaps: false,
    xgap: gap,
    ygap: gap,
    hovertemplate: `<b>%{customdata[0]}</b> → %{customdata[1]}<br>weight %{z:.4f}${scores}<extra>L${layer} · H${head}</extra>`,
    showscale,
    colorbar: { title: { text: "weight", side: "right", font: { size: 11 } }, thickness: 12, len: 0.85, outlinewidth: 0 },
  };
  const data = [trace];
  const reasons = maskedReasons(mask, window);
  if (reasons.some((row) => row.some((r) => r !== null))) {
    data.push({
      type: "heatmap",
      name: "masked",
      z: reasons.map((row) => row.map((r) => (r === null ? null : 1))),
      text: reasons,
      customdata,
      opacity: 0, // the hatching below shows through; only the hover is this trace's
      showscale: false,
      hoverongaps: false,
      xgap: gap,
      ygap: gap,
      hovertemplate: `<b>%{customdata[0]}</b> → %{customdata[1]}<br>%{text}<extra>L${layer} · H${head}</extra>`,
    });
  }
  const layout = baseLayout({
    margin: { ...tokenMargins(tokens, maxTicks), r: 10, b: 10 },
    xaxis: tokenAxis(tokens, { side: "top", title: "key (attended to)", maxTicks, angle: -55 }),
    yaxis: tokenAxis(tokens, { reversed: true, title: "query (attending)", maxTicks }),
    images: hatchImages(mask),
    shapes: rowOutline(position, T),
    title: title ? { text: title, font: { size: 13 }, x: 0, xanchor: "left", xref: "paper", y: 1, yref: "container", yanchor: "top", pad: { t: 8 } } : undefined,
    uirevision: uirevision ?? `${T}`,
  });
  return { data, layout };
}

// ---------------------------------------------------------------- scaled vs unscaled

/**
 * Per-row entropy of the scaled and unscaled patterns, with the uniform row as a ceiling.
 * `layer` (the answer's: divisor_rule, softcap) names what each softmax was taken of.
 */
export function entropyFigure({ tokens, rowEntropy, rowEntropyUnscaled, mask, layer }) {
  const T = tokens.length;
  const x = tokens.map((_, i) => i);
  // a long text's answer has its mask pooled, not T×T: no keys-seen count, so no ceiling line
  const allowed = mask ? mask.map((row) => row.reduce((a, v) => a + (v ? 1 : 0), 0)) : null;
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
      ...(ceiling ? [line(ceiling, "uniform row (ln of keys seen)", "#9aa1ad", "dot", 1.5)] : []),
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
    { key: "var_scores_raw", label: "var(q·kᵀ)", value: fmtSig(stats.var_scores_raw), note: "raw scores, unmasked entries" },
    {
      key: "var_scores",
      label: `var(${scoresFormula(layer)})`,
      value: fmtSig(stats.var_scores),
      note: "the scores softmax sees",
    },
    {
      key: "variance_ratio",
      label: "ratio raw / scaled",
      value: fmt(stats.variance_ratio, 2),
      note: ratioWords({ stats, layer, headDim, T }).note,
      highlight: true,
    },
    {
      key: "entropy",
      label: "mean row entropy",
      value: fmt(stats.entropy),
      unscaled: fmt(stats.entropy_unscaled),
      note: "nats; higher = more spread out",
    },
    {
      key: "max_weight",
      label: "mean max weight",
      value: fmt(stats.max_weight),
      unscaled: fmt(stats.max_weight_unscaled),
      note: "1 = each row puts everything on one key",
    },
  ];
}

// ---------------------------------------------------------------- mask pipeline

const CIRCLED = ["①", "②", "③", "④", "⑤", "⑥"];

/**
 * The steps of one head as small heatmaps, plus the row sums after softmax, each drawn from
 * the server's numbers: q·kᵀ (`raw`) → ÷ divisor (`uncapped`: the answer's
 * attn_scores_uncapped, or attn_scores where the layer has no softcap) → the softcap, where
 * `layer.softcap` is set (`scores`) → masked_fill(−∞) (`scores`, hatched where `mask` is 0)
 * → softmax (`pattern`). `kinds` (captions.maskKinds) says what the mask hides.
 */
export function maskStepsFigure({ tokens, raw, uncapped, scores, mask, pattern, layer, kinds, causal, cells = null }) {
  // `cells` ({rows, cols}: words per pooled row and column) for a long text's max-pooled matrices:
  // each value is a block's largest, so no row sums (those need every cell) and "largest" in the hover
  const T = cells ? cells.rows.length : tokens.length;
  const sums = cells ? null : rowSums(pattern).map((s) => [s]);
  const labels = cells ? cells.rows : tokens.map((t, i) => `${i} ${t}`);
  const cd = cells ? cells.rows.map((q) => cells.cols.map((k) => [q, k])) : labels.map((q) => labels.map((k) => [q, k]));
  const range = (m) => {
    const vals = unmaskedValues(m);
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of vals) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    return vals.length ? [lo, hi] : [0, 1];
  };
  const sub = (text) => `<br><span style="font-size:10px;color:${MUTED}">${text}</span>`;
  const span = (m, digits) => {
    const [lo, hi] = range(m);
    return cells ? `largest ${fmt(hi, digits)}` : `[${fmt(lo, digits)}, ${fmt(hi, digits)}]`;
  };
  const short = divisorShort(layer);
  const steps = [
    { z: raw, axis: "coloraxis", title: `q·kᵀ${sub(span(raw, 1))}`, hover: "q·kᵀ %{z:.3f}" },
    {
      z: uncapped ?? scores,
      axis: "coloraxis2",
      // the name on the title line, its value under it: long names (√query_pre_attn_scalar) fit a panel
      title: `÷ ${short}${sub(`${short.startsWith("√") ? `= ${num(layer.divisor)}, ` : ""}${span(uncapped ?? scores, 2)}`)}`,
      hover: `q·kᵀ ÷ ${short} %{z:.3f}`,
    },
  ];
  if (layer.softcap) {
    steps.push({
      z: scores,
      axis: "coloraxis2",
      title: `softcap${sub(`${softcapWords(layer.softcap)} ${span(scores, 2)}`)}`,
      hover: `${softcapWords(layer.softcap)} %{z:.3f}`,
    });
  }
  const maskTitle = kinds.any
    ? `masked_fill(−∞)${sub("hatched = −∞")}`
    : causal
      ? `masked_fill(−∞)${sub("nothing to mask")}`
      : `no mask (what-if)${sub("nothing hidden")}`;
  steps.push({ z: maskNull(scores, mask), axis: "coloraxis2", title: maskTitle, hover: "score %{z:.3f}", hatched: true });
  steps.push({ z: pattern, axis: "coloraxis3", title: `softmax${sub("rows → weights")}`, hover: "weight %{z:.4f}" });
  const n = steps.length;
  const gap = 0.03;
  const sumW = cells ? 0 : 0.045;
  const stepW = (1 - sumW - gap * n) / n;
  const doms = steps.map((_, i) => [i * (stepW + gap), i * (stepW + gap) + stepW]);
  if (!cells) doms.push([1 - sumW, 1]);
  const hover = (what) => `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${cells ? "largest " : ""}${what}<extra></extra>`;
  const common = { customdata: cd, hoverongaps: false, xgap: T <= 16 ? 1 : 0, ygap: T <= 16 ? 1 : 0 };
  const axisId = (i) => (i === 0 ? "" : String(i + 1));
  const data = steps.map((step, i) => ({
    ...common,
    type: "heatmap",
    z: step.z,
    coloraxis: step.axis,
    xaxis: `x${axisId(i)}`,
    yaxis: `y${axisId(i)}`,
    hovertemplate: hover(step.hover),
  }));
  if (sums) data.push({
    type: "heatmap",
    z: sums,
    x: [0],
    customdata: labels.map((l) => [[l]]), // one cell per row, its customdata the array [label]
    colorscale: [
      [0, "#f3f4f7"],
      [1, "#f3f4f7"],
    ],
    showscale: false,
    xaxis: `x${n + 1}`,
    yaxis: `y${n + 1}`,
    texttemplate: T <= 20 ? "%{z:.3f}" : "",
    textfont: { size: 9, color: INK },
    ygap: T <= 16 ? 1 : 0,
    hovertemplate: "row %{customdata[0]}<br>sum %{z:.6f}<extra></extra>",
  });
  const titles = [...steps.map((step, i) => `${CIRCLED[i]} ${step.title}`), ...(sums ? ["Σ row"] : [])];
  const hatchedAt = steps.findIndex((step) => step.hatched);
  const layout = baseLayout({
    margin: { l: 8, r: 8, t: 46, b: 8 },
    coloraxis: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis2: { colorscale: SCORE_SCALE, showscale: false },
    coloraxis3: { colorscale: WEIGHT_SCALE, cmin: 0, cmax: 1, showscale: false },
    annotations: titles.map((text, i) => ({
      text,
      xref: "paper",
      yref: "paper",
      x: (doms[i][0] + doms[i][1]) / 2,
      y: 1,
      yanchor: "bottom",
      yshift: 4,
      showarrow: false,
      font: { size: n > 4 ? 11 : 12, color: INK },
    })),
    images: hatchImages(mask, `x${axisId(hatchedAt)}`, `y${axisId(hatchedAt)}`, 24),
    uirevision: "steps",
  });
  const axis = { visible: false, fixedrange: true };
  doms.forEach((dom, i) => {
    const id = axisId(i);
    const isSum = i === n;
    layout["xaxis" + id] = { ...axis, domain: dom, range: isSum ? [-0.5, 0.5] : [-0.5, T - 0.5], anchor: "y" + id };
    layout["yaxis" + id] = { ...axis, domain: [0, 1], range: [T - 0.5, -0.5], anchor: "x" + id };
  });
  return { data, layout };
}

// ---------------------------------------------------------------- variance

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
  const bins = { start: -m - size / 2, end: m + size / 2, size };
  const sdR = Math.sqrt(stats.var_scores_raw);
  const sdS = Math.sqrt(stats.var_scores);
  const meanR = stats.mean_scores_raw;
  const meanS = stats.mean_scores;
  const hist = (x, name, color) => ({
    type: "histogram",
    x,
    name,
    xbins: bins,
    autobinx: false,
    marker: { color, line: { color: "#ffffff", width: 0.5 } },
    opacity: 0.72,
    hovertemplate: `${name}<br>%{x}: %{y} scores<extra></extra>`,
  });
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
  return {
    data: [
      hist(r, `${of}raw q·kᵀ (var ${fmtSig(stats.var_scores_raw)}${every})`, ORANGE),
      hist(
        s,
        of +
        (unscaled(layer)
          ? `${scoresFormula(layer)}, what-if: ${layer.softcap ? "only the softcap" : "the same scores"} (var ${fmtSig(stats.var_scores)}${every})`
          : `scaled ${scoresFormula(layer)} (var ${fmtSig(stats.var_scores)}${every})`),
        BLUE,
      ),
    ],
    layout: baseLayout({
      barmode: "overlay",
      margin: { l: 56, r: 16, t: 10, b: 46 },
      xaxis: { title: { text: "score", font: { size: 11, color: MUTED } }, zeroline: true, zerolinecolor: "#c9ced8", gridcolor: "#f0f1f4" },
      yaxis: { title: { text: block === 1 ? "number of (query, key) pairs" : "number of blocks", font: { size: 11, color: MUTED } }, gridcolor: "#eceef2" },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      shapes: [...sdLines(meanR, sdR, ORANGE), ...sdLines(meanS, sdS, BLUE)],
      uirevision: "variance",
    }),
  };
}

// ---------------------------------------------------------------- head roles

/** Layers × heads heatmap of one role's scores, the chosen head outlined. */
export function rolesFigure({ roles, scores, role, selected }) {
  const r = Math.max(0, roles.indexOf(role));
  const nLayer = scores.length;
  const nHead = scores[0].length;
  const z = scores.map((row) => row.map((cell) => cell[r]));
  const x = Array.from({ length: nHead }, (_, h) => h);
  const y = Array.from({ length: nLayer }, (_, l) => l);
  const shapes = selected
    ? [
        {
          type: "rect",
          x0: selected.head - 0.5,
          x1: selected.head + 0.5,
          y0: selected.layer - 0.5,
          y1: selected.layer + 0.5,
          line: { color: "#ffffff", width: 4 },
        },
        {
          type: "rect",
          x0: selected.head - 0.5,
          x1: selected.head + 0.5,
          y0: selected.layer - 0.5,
          y1: selected.layer + 0.5,
          line: { color: ACCENT, width: 2 },
        },
      ]
    : [];
  return {
    data: [
      {
        type: "heatmap",
        z,
        x,
        y,
        colorscale: WEIGHT_SCALE,
        zmin: 0,
        zmax: 1,
        xgap: 3,
        ygap: 3,
        texttemplate: "%{z:.2f}",
        textfont: { size: 13 },
        hovertemplate: `%{y} · %{x}<br>${role.replace("_", " ")} score %{z:.3f}<extra>click to open</extra>`,
        colorbar: { title: { text: "score", side: "right", font: { size: 11 } }, thickness: 12, outlinewidth: 0 },
      },
    ],
    layout: baseLayout({
      margin: { l: 50, r: 10, t: 30, b: 10 },
      xaxis: {
        tickmode: "array",
        tickvals: x,
        ticktext: x.map((h) => `H${h}`),
        side: "top",
        showgrid: false,
        zeroline: false,
        ticks: "",
        fixedrange: true,
      },
      yaxis: {
        tickmode: "array",
        tickvals: y,
        ticktext: y.map((l) => `L${l}`),
        autorange: "reversed",
        showgrid: false,
        zeroline: false,
        ticks: "",
        fixedrange: true,
      },
      shapes,
      uirevision: "roles",
    }),
  };
}

// ---------------------------------------------------------------- export

const csvField = (v) => {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

/**
 * The chosen head as long-format CSV: one line per (query, key) pair with the mask, the
 * weights, scaled and unscaled, and the raw and scaled scores.
 */
export function headCsv({ tokens, mask, pattern, patternUnscaled, raw, scaled, layer, head }) {
  const lines = [
    [
      "layer",
      "head",
      "query_index",
      "query_token",
      "key_index",
      "key_token",
      "mask",
      "pattern",
      "pattern_unscaled",
      "attn_scores_raw",
      "attn_scores",
    ].join(","),
  ];
  const T = tokens.length;
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      lines.push(
        [
          layer,
          head,
          i,
          csvField(tokens[i]),
          j,
          csvField(tokens[j]),
          mask[i][j],
          pattern[i][j],
          patternUnscaled ? patternUnscaled[i][j] : "",
          raw ? csvField(raw[i][j]) : "",
          scaled ? csvField(scaled[i][j]) : "",
        ].join(","),
      );
    }
  }
  return lines.join("\n") + "\n";
}
