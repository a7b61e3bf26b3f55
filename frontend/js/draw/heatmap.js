// The head heatmap (one head's matrix with its masked cells, row sums and hover) and a differential
// pair's two softmaxes: the figures of the head view and of Two texts, built from the answer alone.

import {
  SIGNED_SCALE,
  WEIGHT_SCALE,
  anyMasked,
  baseLayout,
  hatchImages,
  lazyRows,
  maskNull,
  maskedReasons,
  signedRange,
  tokenAxis,
  tokenMargins,
} from "./figures.js";
import { headAxes, headLayout, heatmapArgs, weightColorbar, zoomedAxes } from "./headframe.js";

/**
 * Each cell's hover data, a row a query (each row made when first read): [query label, key label, raw,
 * scaled] (null scores when `raw` is not given), then the parts q·kᵀ adds up from (`parts`: MLA's two
 * halves, DeBERTa's three terms) and a differential pair's two weights.
 */
function headCustomdata(labels, { raw, scaled, parts, pair }) {
  const T = labels.length;
  return lazyRows(T, (i) => {
    const row = new Array(T);
    const rr = raw ? raw[i] : null;
    const sr = scaled ? scaled[i] : null;
    for (let j = 0; j < T; j++) {
      row[j] = rr ? [labels[i], labels[j], rr[j], sr[j]] : [labels[i], labels[j], null, null];
      if (rr && parts) row[j].push(...parts.map((part) => part.z[i][j]));
      if (pair) row[j].push(pair.parts[0][i][j], pair.parts[1][i][j]);
    }
    return row;
  });
}

/** The weights' trace of a head heatmap (`a`: its arguments): signed for a differential pair, 0..zmax else. */
function weightTrace(a, z, customdata, gap) {
  const { raw, scaledLabel, parts, pair, layer, head } = a;
  const split = parts ? ` = ${parts.map((part, n) => `${part.name} %{customdata[${4 + n}]:.3f}`).join(" + ")}` : "";
  const scores = raw
    ? `<br>raw q·kᵀ${pair ? " (first softmax)" : ""} %{customdata[2]:.3f}${split}<br>${scaledLabel} ` +
      `%{customdata[3]:.3f}`
    : "";
  const at = parts && raw ? 4 + parts.length : 4; // where the pair's two weights sit in customdata
  const lam = pair ? formatLambda(pair.lambda) : "";
  const weightHover = pair
    ? `weight %{z:+.4f} = first %{customdata[${at}]:.4f} − ${lam} × second %{customdata[${at + 1}]:.4f}`
    : "weight %{z:.4f}";
  const signed = Boolean(pair || a.signed); // a differential head's map: negative cells too
  const extra = `<extra>L${layer} · H${head}</extra>`;
  const range = signed ? signedRange(z) : null;
  return {
    type: "heatmap",
    z,
    customdata,
    colorscale: signed ? SIGNED_SCALE : WEIGHT_SCALE,
    zmin: signed ? -range : 0,
    zmax: signed ? range : a.zmax,
    ...(signed ? { zmid: 0 } : {}),
    hoverongaps: false,
    xgap: gap,
    ygap: gap,
    hovertemplate: `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${weightHover}${scores}${extra}`,
    showscale: a.showscale,
    colorbar: weightColorbar(pair ? `first − ${lam}·second` : signed ? "first − λ·second" : "weight"),
  };
}

/** A transparent trace over the masked cells whose hover says why each is masked; null when none is. */
function maskedHoverTrace({ mask, window, chunk, layer, head }, customdata, gap) {
  if (!anyMasked(mask)) return null;
  return {
    type: "heatmap",
    name: "masked",
    z: lazyRows(mask.length, (i) => Array.from(mask[i], (seen) => (seen ? null : 1))),
    text: maskedReasons(mask, window, chunk),
    customdata,
    opacity: 0, // the hatching below shows through; only the hover is this trace's
    showscale: false,
    hoverongaps: false,
    xgap: gap,
    ygap: gap,
    hovertemplate: `<b>%{customdata[0]}</b> → %{customdata[1]}<br>%{text}<extra>L${layer} · H${head}</extra>`,
  };
}

/** The per-query numbers a head heatmap shows as columns of their own (addRowColumns), those the answer has. */
const rowColumnsOf = (args) =>
  [
    // a learned attention sink (gpt-oss): each row's weight on the sink, the share its keys' weights lack
    args.sinkMass && {
      name: "sink",
      values: args.sinkMass,
      hover: "<b>%{customdata[0]}</b> → the sink<br>weight %{z:.4f}: this row's keys share the rest",
    },
    // an output gate (Qwen3-Next): what the head's output at this query is multiplied by, on average
    args.gate && {
      name: "gate",
      values: args.gate,
      hover:
        "<b>%{customdata[0]}</b><br>output gate %{z:.4f}: the head's output here is scaled by it (mean over its " +
        "dimensions) before o_proj",
    },
  ].filter(Boolean);

/**
 * The chosen head's pattern, queries as rows (top to bottom) and keys as columns.
 * Masked cells are gaps over a hatched background, so they never look like a zero weight; a
 * transparent second trace over them says, on hover, that the cell is masked and why (after
 * the query, or outside the layer's sliding `window`). `raw` and `scaled` (T×T, null where
 * masked) add the scores to the hover when given, `scaledLabel` naming what `scaled` is.
 * `parts` (`[{name, z}]`: MLA's content and position halves of q·kᵀ, DeBERTa's three terms) and `pair`
 * (differential attention: {lambda, parts: [first, second]}, the pair's two softmaxes) come from the answer.
 */
export function headHeatmapFigure(args) {
  const a = { ...heatmapArgs(args), zmax: args.zmax ?? 1, parts: args.parts ?? null, pair: args.pair ?? null };
  const { tokens, mask, maxTicks, layer, head } = a;
  const T = tokens.length;
  // zoomed in (the page's drag, zoom.js): a block of tokens that still fits the text
  const view = args.view && args.view.q1 <= T && args.view.k1 <= T ? args.view : null;
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const customdata = headCustomdata(labels, a);
  const gap = T <= 24 ? 1 : 0;
  const data = [weightTrace(a, maskNull(a.pattern, mask), customdata, gap)];
  const masked = maskedHoverTrace(a, customdata, gap);
  if (masked) data.push(masked);
  const layout = headLayout(a, {
    ...(view ? zoomedAxes(tokens, view, maxTicks) : headAxes(tokens, maxTicks)),
    images: hatchImages(mask),
    uirevision: a.uirevision ?? `${T}`,
    meta: { tokens: T, block: 1, size: T },
  });
  const columns = rowColumnsOf(args);
  if (columns.length) addRowColumns(data, layout, columns, { labels, zmax: a.zmax, gap, layer, head });
  return { data, layout };
}

/** λ of a differential layer as the page writes it (the server's number, 3 decimals). */
export const formatLambda = (lambda) => `λ ${Number(lambda).toFixed(3)}`;

/** The title over one of a pair's two heatmaps, centred at `x` (paper units). */
const partTitle = (text, x) => ({
  text,
  x,
  xanchor: "center",
  y: 1.01,
  yanchor: "bottom",
  xref: "paper",
  yref: "paper",
  showarrow: false,
  font: { size: 12 },
});

/**
 * A differential pair's two softmaxes side by side (the answer's `pattern_parts`), each on the
 * weights' scale 0..1: what the head's signed map is made of.
 */
export function pairPartsFigure({ tokens, parts, mask, lambda, layer, head, maxTicks = 20 }) {
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const customdata = labels.map((q) => labels.map((k) => [q, k]));
  const names = ["first softmax", "second softmax"];
  const m = tokenMargins(tokens, maxTicks);
  const data = parts.map((m, n) => ({
    type: "heatmap",
    xaxis: n ? "x2" : "x",
    yaxis: "y",
    z: maskNull(m, mask),
    customdata,
    colorscale: WEIGHT_SCALE,
    zmin: 0,
    zmax: 1,
    showscale: n === 1,
    hoverongaps: false,
    hovertemplate:
      `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${names[n]} %{z:.4f}<extra>L${layer} · ` + `H${head}</extra>`,
    colorbar: weightColorbar("weight", 10),
  }));
  const layout = baseLayout({
    margin: { l: m.l, r: 10, t: 28, b: m.t }, // the key labels below: the titles above
    xaxis: { ...tokenAxis(tokens, { maxTicks, angle: -55 }), domain: [0, 0.46] },
    xaxis2: { ...tokenAxis(tokens, { maxTicks, angle: -55 }), domain: [0.52, 0.98] },
    yaxis: tokenAxis(tokens, { reversed: true, title: "query", maxTicks }),
    annotations: [
      partTitle("first softmax (+)", 0.23),
      partTitle(`second softmax (× ${formatLambda(lambda)}, −)`, 0.75),
    ],
  });
  return { data, layout };
}

/**
 * One number per query row (the answer's `sink_mass`, `gate`) as a narrow column of its own right
 * of the keys, each in the weights' colours and named on top.
 */
function addRowColumns(data, layout, columns, { labels, zmax, gap, layer, head }) {
  const width = 0.07;
  layout.xaxis.domain = [0, 1 - (width + 0.03) * columns.length];
  columns.forEach((c, n) => {
    const axis = `x${n + 2}`;
    const left = 1 - (width + 0.03) * (columns.length - n) + 0.03;
    layout[`xaxis${n + 2}`] = {
      domain: [left, left + width],
      side: "top",
      fixedrange: true,
      tickvals: [0],
      ticktext: [c.name],
      tickfont: { size: 11 },
      showgrid: false,
      zeroline: false,
    };
    data.push({
      type: "heatmap",
      name: c.name,
      xaxis: axis,
      yaxis: "y",
      z: Array.from(c.values, (m) => [m]),
      x: [0],
      customdata: labels.map((l) => [[l]]), // a row of one cell, holding the query's label
      colorscale: WEIGHT_SCALE,
      zmin: 0,
      zmax,
      showscale: false,
      ygap: gap,
      hovertemplate: `${c.hover}<extra>L${layer} · H${head}</extra>`,
    });
  });
}
