// The head heatmap (one head's matrix with its masked cells, row sums and hover, its quirks' strips and
// hover terms from quirks.js): the figure of the head view and of Two texts, built from the answer alone.

import {
  SIGNED_SCALE,
  WEIGHT_SCALE,
  anyMasked,
  hatchImages,
  lazyRows,
  maskNull,
  maskedReasons,
  signedRange,
} from "./figures.js";
import { headAxes, headLayout, heatmapArgs, weightColorbar, zoomedAxes } from "./headframe.js";

/**
 * Each cell's hover data, a row a query (each row made when first read): [query label, key label, raw,
 * scaled] (null scores when `raw` is not given), then the head's parts (`hover.matrices`: quirks.js `cellHover`).
 */
function headCustomdata(labels, keyLabels, { raw, scaled, hover }) {
  const K = keyLabels.length;
  const extra = hover?.matrices ?? [];
  return lazyRows(labels.length, (i) => {
    const row = new Array(K);
    const rr = raw ? raw[i] : null;
    const sr = scaled ? scaled[i] : null;
    for (let j = 0; j < K; j++) {
      row[j] = rr ? [labels[i], keyLabels[j], rr[j], sr[j]] : [labels[i], keyLabels[j], null, null];
      for (const m of extra) row[j].push(m[i][j]);
    }
    return row;
  });
}

/** The weights' trace of a head heatmap (`a`: its arguments): signed (a quirk's map), 0..zmax else. */
function weightTrace(a, z, customdata, gap) {
  const { raw, scaledLabel, hover, layer, head } = a;
  const scores = raw
    ? `<br>raw q·kᵀ${hover?.scores ?? ""} %{customdata[2]:.3f}${hover?.split ?? ""}<br>${scaledLabel} ` +
      `%{customdata[3]:.3f}`
    : "";
  const signed = Boolean(a.signed); // a signed map: negative cells too
  const weightHover = hover?.weight ?? (signed ? "weight %{z:+.4f}" : "weight %{z:.4f}");
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
    colorbar: weightColorbar(a.colorbar ?? "weight"),
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

/**
 * The chosen head's pattern, queries as rows (top to bottom) and keys as columns.
 * Masked cells are gaps over a hatched background, so they never look like a zero weight; a
 * transparent second trace over them says, on hover, that the cell is masked and why (after
 * the query, or outside the layer's sliding `window`). `raw` and `scaled` (T×T, null where
 * masked) add the scores to the hover when given, `scaledLabel` naming what `scaled` is.
 * The head's quirks come from quirks.js: `hover` (cellHover: its parts in each cell's hover), `rows`
 * (rowStrips: per-query strips right of the keys), `signed` and `colorbar` (a signed map's scale and title).
 */
export function headHeatmapFigure(args) {
  const a = { ...heatmapArgs(args), zmax: args.zmax ?? 1, hover: args.hover ?? null, colorbar: args.colorbar };
  const { tokens, keys, mask, maxTicks, layer, head } = a;
  const T = tokens.length;
  // zoomed in (the page's drag, zoom.js): a block of tokens that still fits the text
  const view = args.view && args.view.q1 <= T && args.view.k1 <= keys.length ? args.view : null;
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const customdata = headCustomdata(labels, keys === tokens ? labels : keys.map((t, j) => `${j} ${t}`), a);
  const gap = Math.max(T, keys.length) <= 24 ? 1 : 0; // a gap between cells only where they are large
  const data = [weightTrace(a, maskNull(a.pattern, mask), customdata, gap)];
  const masked = maskedHoverTrace(a, customdata, gap);
  if (masked) data.push(masked);
  const layout = headLayout(a, {
    ...(view ? zoomedAxes(tokens, view, maxTicks, keys, a.axes) : headAxes(tokens, maxTicks, keys, a.axes)),
    images: hatchImages(mask),
    uirevision: a.uirevision ?? `${T}`,
    meta: { tokens: T, keys: keys.length, block: 1, size: T },
  });
  const columns = args.rows ?? [];
  if (columns.length) addRowColumns(data, layout, columns, { labels, zmax: a.zmax, gap, layer, head });
  return { data, layout };
}

/**
 * One number per query row (a quirk's strip: quirks.js `rowStrips`) as a narrow column of its own right
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
