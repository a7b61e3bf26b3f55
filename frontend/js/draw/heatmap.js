// The head heatmap (one head's matrix with its masked cells, row sums and hover) and a differential
// pair's two softmaxes: the figures of the head view and of Two texts, built from the answer alone.

import {
  MAX_TICKS_BIG,
  SIGNED_SCALE,
  WEIGHT_SCALE,
  baseLayout,
  hatchImages,
  maskNull,
  maskedReasons,
  rowOutline,
  signedRange,
  tokenAxis,
  tokenMargins,
} from "./figures.js";

/**
 * The arguments a head heatmap takes besides its data (`tokens`, `pattern`, `mask`, `layer`,
 * `head`), with their defaults; the exact heatmap below and the pooled one (pooled.js) share them.
 */
export const HEATMAP_DEFAULTS = {
  raw: null,
  scaled: null,
  scaledLabel: "score",
  window: null,
  chunk: null,
  position: null,
  title: null,
  showscale: true,
  maxTicks: MAX_TICKS_BIG,
  uirevision: null,
};

/** The title of a head heatmap, in its top-left corner (undefined: none). */
export const heatmapTitle = (title) =>
  title
    ? {
        text: title,
        font: { size: 13 },
        x: 0,
        xanchor: "left",
        xref: "paper",
        y: 1,
        yref: "container",
        yanchor: "top",
        pad: { t: 8 },
      }
    : undefined;

/**
 * The chosen head's pattern, queries as rows (top to bottom) and keys as columns.
 * Masked cells are gaps over a hatched background, so they never look like a zero weight; a
 * transparent second trace over them says, on hover, that the cell is masked and why (after
 * the query, or outside the layer's sliding `window`). `raw` and `scaled` (T×T, null where
 * masked) add the scores to the hover when given, `scaledLabel` naming what `scaled` is.
 */
export function headHeatmapFigure(args) {
  const {
    tokens,
    pattern,
    mask,
    raw,
    scaled,
    scaledLabel,
    window,
    chunk,
    layer,
    head,
    position,
    title,
    showscale,
    maxTicks,
    uirevision,
  } = { ...HEATMAP_DEFAULTS, ...args };
  const zmax = args.zmax ?? 1;
  const T = tokens.length;
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const parts = args.parts ?? null; // MLA: [content, position], the two halves of q·kᵀ, from the answer
  const pair = args.pair ?? null; // differential attention: {lambda, parts: [first, second]}, the pair's two softmaxes
  const customdata = new Array(T);
  for (let i = 0; i < T; i++) {
    const row = new Array(T);
    const rr = raw ? raw[i] : null;
    const sr = scaled ? scaled[i] : null;
    for (let j = 0; j < T; j++) {
      row[j] = rr ? [labels[i], labels[j], rr[j], sr[j]] : [labels[i], labels[j], null, null];
      if (rr && parts) row[j].push(parts[0][i][j], parts[1][i][j]);
      if (pair) row[j].push(pair.parts[0][i][j], pair.parts[1][i][j]);
    }
    customdata[i] = row;
  }
  const split = parts ? " = content %{customdata[4]:.3f} + position %{customdata[5]:.3f}" : "";
  const scores = raw
    ? `<br>raw q·kᵀ${pair ? " (first softmax)" : ""} %{customdata[2]:.3f}${split}<br>${scaledLabel} ` +
      `%{customdata[3]:.3f}`
    : "";
  const gap = T <= 24 ? 1 : 0;
  const z = maskNull(pattern, mask);
  const at = parts && raw ? 6 : 4; // where the pair's two weights sit in customdata
  const lam = pair ? formatLambda(pair.lambda) : "";
  const weightHover = pair
    ? `weight %{z:+.4f} = first %{customdata[${at}]:.4f} − ${lam} × second %{customdata[${at + 1}]:.4f}`
    : "weight %{z:.4f}";
  const signed = Boolean(pair || args.signed); // a differential head's map: negative cells too
  const range = signed ? signedRange(z) : null;
  const trace = {
    type: "heatmap",
    z,
    customdata,
    colorscale: signed ? SIGNED_SCALE : WEIGHT_SCALE,
    zmin: signed ? -range : 0,
    zmax: signed ? range : zmax,
    ...(signed ? { zmid: 0 } : {}),
    hoverongaps: false,
    xgap: gap,
    ygap: gap,
    hovertemplate:
      `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${weightHover}${scores}` +
      `<extra>L${layer} · H${head}</extra>`,
    showscale,
    colorbar: {
      title: {
        text: pair ? `first − ${lam}·second` : signed ? "first − λ·second" : "weight",
        side: "right",
        font: { size: 11 },
      },
      thickness: 12,
      len: 0.85,
      outlinewidth: 0,
    },
  };
  const data = [trace];
  const reasons = maskedReasons(mask, window, chunk);
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
    title: heatmapTitle(title),
    uirevision: uirevision ?? `${T}`,
  });
  const columns = [
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
  if (columns.length) addRowColumns(data, layout, columns, { labels, zmax, gap, layer, head });
  return { data, layout };
}

/** λ of a differential layer as the page writes it (the server's number, 3 decimals). */
export const formatLambda = (lambda) => `λ ${Number(lambda).toFixed(3)}`;

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
    colorbar: {
      title: { text: "weight", side: "right", font: { size: 11 } },
      thickness: 10,
      len: 0.85,
      outlinewidth: 0,
    },
  }));
  const layout = baseLayout({
    margin: { l: m.l, r: 10, t: 28, b: m.t }, // the key labels below: the titles above
    xaxis: { ...tokenAxis(tokens, { maxTicks, angle: -55 }), domain: [0, 0.46] },
    xaxis2: { ...tokenAxis(tokens, { maxTicks, angle: -55 }), domain: [0.52, 0.98] },
    yaxis: tokenAxis(tokens, { reversed: true, title: "query", maxTicks }),
    annotations: [
      {
        text: "first softmax (+)",
        x: 0.23,
        xanchor: "center",
        y: 1.01,
        yanchor: "bottom",
        xref: "paper",
        yref: "paper",
        showarrow: false,
        font: { size: 12 },
      },
      {
        text: `second softmax (× ${formatLambda(lambda)}, −)`,
        x: 0.75,
        xanchor: "center",
        y: 1.01,
        yanchor: "bottom",
        xref: "paper",
        yref: "paper",
        showarrow: false,
        font: { size: 12 },
      },
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
      customdata: labels.map((l) => [l]),
      colorscale: WEIGHT_SCALE,
      zmin: 0,
      zmax,
      showscale: false,
      ygap: gap,
      hovertemplate: `${c.hover}<extra>L${layer} · H${head}</extra>`,
    });
  });
}
