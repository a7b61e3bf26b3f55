// The chosen head of a long text (issue 16): its matrices come max-pooled from the server
// (`focus.thumbnail`: at most N×N cells, each the maximum over a block×block of queries and
// keys), and the exact cells of one zoomed block come as `focus.region`. Pure functions: the
// answer in, what the views draw out. Every number is the server's; only words are made here.

import { maskedWhy } from "./captions.js";
import { MASK_BG, WEIGHT_SCALE, lazyRows, shortToken } from "./figures.js";
import { headLayout, heatmapArgs, weightColorbar, zoomedAxes } from "./headframe.js";
import { currentDetail, limitOf } from "../state.js";
import { copyFields } from "../wire.js";

/** Whether the zoomed block is small enough for its exact cells (at most the server's `region_max` a side). */
export function regionFits(state, zoom) {
  const most = limitOf(state, "region_max");
  return !!zoom && zoom.q1 - zoom.q0 <= most && zoom.k1 - zoom.k0 <= most;
}

/**
 * The words under the head heatmap of a long text: what a cell is, and what zooming in gives (`region`: the exact
 * cells of the zoomed block once they are in, else null).
 */
export function zoomWords(state, T, block, size, region, S = T, kSize = size) {
  const pooled = pooledWords(T, block, size, S, kSize);
  const most = limitOf(state, "region_max");
  const z = state.zoom;
  const where = z ? `queries ${z.q0}–${z.q1 - 1} × keys ${z.k0}–${z.k1 - 1}` : "";
  if (!z) return `${pooled} Drag a box over at most ${most}×${most} tokens for their exact cells.`;
  if (!regionFits(state, z)) {
    return (
      `Zoomed to ${where} (${z.q1 - z.q0}×${z.k1 - z.k0} tokens): each cell is still the largest value of a ` +
      `${block}×${block} block. Zoom to at most ${most}×${most} tokens for exact cells.`
    );
  }
  if (!region) return `Fetching the exact cells of ${where}…`;
  return `Exact cells of ${where}: one query and key each (outside them, block maxima). Double-click to zoom out.`;
}

/** Tokens [a, b) of pooled cell `c` (the last block of a row or column may be shorter). */
export function blockSpan(T, block, c) {
  const a = c * block;
  return [a, Math.min(T, a + block)];
}

/** "140–153 (tok … tok)" for the tokens [a, b); one token reads "140 tok". */
export function spanWords(tokens, a, b) {
  if (b - a === 1) return `${a} ${shortToken(tokens[a])}`;
  return `${a}–${b - 1} (${shortToken(tokens[a])} … ${shortToken(tokens[b - 1])})`;
}

/**
 * The chosen head's data in one shape, whatever was asked: its fields as the server names them
 * (`pattern`, `attn_scores_raw`, `attn_scores`, ...: the field table of /api/model), with
 * `{tokens, layer, stats, mask, block}`, `block` the tokens a side of one cell (1: every cell one
 * query and key). A pooled answer of block 1 is the exact matrix. A field the answer has not is absent.
 */
export function headData(detail) {
  if (!detail) return null;
  const layer = detail.layers?.[0];
  const h = layer?.heads?.[0];
  if (!layer || !h) return null;
  const f = detail.focus;
  if (f?.thumbnail) {
    // a quirk's per-query rows come at full resolution only
    return Object.assign(copyFields(f, ["layer", "head", "thumbnail", "region"]), {
      tokens: detail.tokens,
      layer,
      stats: h.stats ?? f.stats,
      mask: f.thumbnail.mask,
      block: f.thumbnail.block,
    });
  }
  // copied field by field: a field no view reads stays undecoded (wire.js)
  const fields = copyFields(h, ["head", "thumbnail"]);
  return Object.assign(fields, { tokens: detail.tokens, layer, mask: detail.mask, block: 1 });
}

/** The current chosen-head answer, its layer and its data in `headData`'s shape; null while there is none. */
export function currentHead(state) {
  const detail = currentDetail(state);
  return detail ? { detail, layer: detail.layers[0], d: headData(detail) } : null;
}

/** What a pooled picture shows, in words (null when every cell is one query and key); `S` keys where not `T`. */
export function pooledWords(T, block, size, S = T, kSize = size) {
  if (block === 1) return null;
  const n = (v) => v.toLocaleString("en-US");
  const what = S === T ? `${n(T)} tokens` : `${n(T)} queries × ${n(S)} keys`;
  return (
    `${what}, shown as ${size}×${kSize} cells: each cell is the largest value in a ` +
    `${block}×${block} block of queries and keys (max-pooled on the server), so a one-token diagonal stays visible.`
  );
}

/**
 * The token block a zoomed heatmap shows: `{q0, q1, k0, k1}` (half-open) from the axes' ranges
 * (cell t spans t − 0.5 .. t + 0.5; the y axis is reversed), or null when it shows every token.
 * `T` queries and `S` keys (a cross map's keys are the source's tokens, more or fewer than its queries).
 */
export function visibleBlock(xRange, yRange, T, S = T) {
  const span = ([a, b], n) => {
    const clamp = (v) => Math.min(n, Math.max(0, v));
    const lo = Math.min(a, b);
    const hi = Math.max(a, b);
    return [clamp(Math.floor(lo + 0.5)), clamp(Math.ceil(hi + 0.5))];
  };
  const [k0, k1] = span(xRange, S);
  const [q0, q1] = span(yRange, T);
  if (q0 === 0 && k0 === 0 && q1 === T && k1 === S) return null;
  if (q1 <= q0 || k1 <= k0) return null;
  return { q0, q1, k0, k1 };
}

const num = (v, digits) =>
  v === null || v === undefined || Number.isNaN(v) ? "all masked" : Number(v).toFixed(digits);

/**
 * The pooled cells to draw, [i0, i1, j0, j1) of the m×m: all of them, or zoomed in (`view`, the
 * token block in view) only those in view and one around them: the cells out of view would cost
 * their hover rows and pixels for nothing.
 */
function cellsInView(view, block, m, mk = m) {
  if (!view) return [0, m, 0, mk];
  return [
    Math.max(0, Math.floor(view.q0 / block) - 1),
    Math.min(m, Math.ceil(view.q1 / block) + 1),
    Math.max(0, Math.floor(view.k0 / block) - 1),
    Math.min(mk, Math.ceil(view.k1 / block) + 1),
  ];
}

/**
 * The pooled cells [i0, i1) × [j0, j1) as rows: `z` (the weights; null where masked or under the
 * exact `region`), `hatched` (1 where masked and not under it), `reasons` (why a block is masked),
 * `customdata` (the query and key words, the largest scores, the block's size) and `anyMasked`.
 */
function pooledCells(a, [i0, i1, j0, j1]) {
  const { tokens, keys, block, pattern, mask, raw, scaled, window, chunk, region } = a;
  const spans = Array.from({ length: pattern.length }, (_, c) => blockSpan(tokens.length, block, c));
  // the key side's blocks: a cross stack's keys are the source's tokens, more or fewer than the queries
  const kSpans = Array.from({ length: pattern[0]?.length ?? 0 }, (_, c) => blockSpan(keys.length, block, c));
  const qWords = spans.map(([s, e]) => `queries ${spanWords(tokens, s, e)}`);
  const kWords = kSpans.map(([s, e]) => `keys ${spanWords(keys, s, e)}`);
  const sizes = spans.map(([s, e]) => e - s);
  const kSizes = kSpans.map(([s, e]) => e - s);
  // the blocks under an exact region are left out: the region's cells are drawn there instead
  const [r0, r1, c0, c1] = region ? region.bounds : [0, 0, 0, 0];
  const under = (i, j) => region && spans[i][0] < r1 && spans[i][1] > r0 && kSpans[j][0] < c1 && kSpans[j][1] > c0;
  const cells = { z: [], hatched: [], anyMasked: false };
  for (let i = i0; i < i1; i++) {
    const zr = [];
    const hr = [];
    for (let j = j0; j < j1; j++) {
      const seen = mask[i][j];
      const hidden = under(i, j);
      zr.push(seen && !hidden ? pattern[i][j] : null);
      hr.push(!seen && !hidden ? 1 : null);
      if (!seen) cells.anyMasked = true;
    }
    cells.z.push(zr);
    cells.hatched.push(hr);
  }
  // the hover's words, a row made when first read: up to drawCells² cells of them
  const columns = (make) => Array.from({ length: j1 - j0 }, (_, n) => make(j0 + n));
  cells.reasons = lazyRows(i1 - i0, (n) =>
    columns((j) => {
      const i = i0 + n;
      const w = mask[i][j] ? null : maskedWhy({ mask, i, j, window, chunk, block });
      return w ? `all ${w}` : null;
    }),
  );
  cells.customdata = lazyRows(i1 - i0, (n) =>
    columns((j) => {
      const i = i0 + n;
      return [
        qWords[i],
        kWords[j],
        raw ? num(raw[i][j], 3) : "",
        scaled ? num(scaled[i][j], 3) : "",
        `${sizes[i]}×${kSizes[j]}`,
      ];
    }),
  );
  return cells;
}

/** The pooled cells' weights as a trace laid on `grid`: each hover a block's largest values. */
function blocksTrace({ raw, scaledLabel, layer, head, showscale }, grid, { z, customdata }) {
  const scores = raw ? `<br>largest raw q·kᵀ %{customdata[2]}<br>largest ${scaledLabel} %{customdata[3]}` : "";
  return {
    type: "heatmap",
    name: "blocks",
    ...grid,
    z,
    customdata,
    colorscale: WEIGHT_SCALE,
    zmin: 0,
    zmax: 1,
    hoverongaps: false,
    hovertemplate:
      `<b>%{customdata[0]}</b><br>× %{customdata[1]}<br>largest weight %{z:.4f} of these %{customdata[4]} pairs` +
      `${scores}<extra>L${layer} · H${head}</extra>`,
    showscale,
    colorbar: weightColorbar(),
  };
}

/**
 * The chosen head of a long text as a heatmap in token coordinates: the pooled cells (each
 * covering `block` tokens a side) and, where `region` is given, the exact cells of that block
 * drawn over them. Every hover says what its cell is: a block's maximum over the named token
 * ranges, or one query and key. Fully masked blocks are solid grey (a hatching image in token
 * units would be rasterised at the zoomed size: tens of thousands of pixels a side) and say
 * "all masked".
 */
export function pooledHeatmapFigure(args) {
  const a = { ...heatmapArgs(args), region: args.region ?? null, view: args.view ?? null };
  const { tokens, block, region, view, layer, head } = a;
  const m = a.pattern.length;
  const [i0, i1, j0, j1] = cellsInView(view, block, m, a.pattern[0]?.length ?? m);
  // evenly spaced cells (x0, dx); the last block, shorter, is cut at T by the axes
  const grid = { x0: j0 * block + (block - 1) / 2, dx: block, y0: i0 * block + (block - 1) / 2, dy: block };
  const cells = pooledCells(a, [i0, i1, j0, j1]);
  const data = [blocksTrace(a, grid, cells)];
  if (cells.anyMasked) {
    const hover = `<b>%{customdata[0]}</b><br>× %{customdata[1]}<br>%{text}<extra>L${layer} · H${head}</extra>`;
    data.push(maskedTrace("masked", grid, cells.hatched, cells.reasons, cells.customdata, hover));
  }
  if (region) {
    const { scaledLabel, window, chunk } = a;
    const signed = Boolean(args.signed);
    data.push(...regionTraces({ tokens, keys: a.keys, region, scaledLabel, window, chunk, layer, head, signed }));
  }
  const layout = headLayout(a, {
    ...zoomedAxes(tokens, view, a.maxTicks, a.keys, a.axes),
    dragmode: false,
    meta: { tokens: tokens.length, keys: a.keys.length, block, size: m },
    // one revision for every long text: a zoom stays while the text is typed on or the head changes
    uirevision: a.uirevision ?? "pooled",
  });
  return { data, layout };
}

/** The masked cells drawn over a heatmap in the mask colour, each hover saying why it is masked. */
function maskedTrace(name, grid, z, reasons, customdata, hovertemplate) {
  return {
    type: "heatmap",
    name,
    ...grid,
    z,
    text: reasons,
    customdata,
    colorscale: [
      [0, MASK_BG],
      [1, MASK_BG],
    ],
    showscale: false,
    hoverongaps: false,
    hovertemplate,
  };
}

/**
 * The exact cells of one block (`region`: the answer's `focus.region`, {bounds, pattern,
 * attn_scores_raw, attn_scores}) as heatmap traces in token coordinates: the weights, one query
 * and key per cell, and the masked cells (null scores in the answer) in the mask's grey, each
 * hover saying why.
 */
export function regionTraces({
  tokens,
  keys = tokens,
  region,
  scaledLabel = "score",
  window = null,
  chunk = null,
  layer,
  head,
  signed = false,
}) {
  // `signed`: a signed map (quirks.js); its exact cells drawn as |weight| like the pooled cells around them,
  // the sign in the hover
  const [q0, q1, k0, k1] = region.bounds;
  const label = (i, names = tokens) => `${i} ${names[i]}`; // a cross map's keys: the source's tokens
  const xs = Array.from({ length: k1 - k0 }, (_, j) => k0 + j);
  const ys = Array.from({ length: q1 - q0 }, (_, i) => q0 + i);
  const grid = { x0: k0, dx: 1, y0: q0, dy: 1 };
  const raw = region.attn_scores_raw;
  const scaled = region.attn_scores;
  const z = [];
  const masked = [];
  const reasons = [];
  const customdata = [];
  let anyMasked = false;
  for (let i = 0; i < ys.length; i++) {
    const q = ys[i];
    const zr = new Array(xs.length);
    const mr = new Array(xs.length);
    const wr = new Array(xs.length);
    const cr = new Array(xs.length);
    for (let j = 0; j < xs.length; j++) {
      const k = xs[j];
      // the server sends a masked cell's scores as null
      const isMasked = raw[i][j] === null;
      zr[j] = isMasked ? null : signed ? Math.abs(region.pattern[i][j]) : region.pattern[i][j];
      mr[j] = isMasked ? 1 : null;
      wr[j] = isMasked ? maskedWhy({ mask: { [q]: { [k]: 0 } }, i: q, j: k, window, chunk }) : null;
      if (isMasked) anyMasked = true;
      cr[j] = [label(q), label(k, keys), raw[i][j], scaled[i][j], region.pattern[i][j]];
    }
    z.push(zr);
    masked.push(mr);
    reasons.push(wr);
    customdata.push(cr);
  }
  const traces = [
    {
      type: "heatmap",
      name: "exact cells",
      ...grid,
      z,
      customdata,
      colorscale: WEIGHT_SCALE,
      zmin: 0,
      zmax: 1,
      showscale: false,
      hoverongaps: false,
      hovertemplate:
        `<b>%{customdata[0]}</b> → %{customdata[1]}<br>weight %{customdata[4]:${signed ? "+" : ""}.4f}<br>raw ` +
        `q·kᵀ %{customdata[2]:.3f}` +
        `<br>${scaledLabel} %{customdata[3]:.3f}<extra>L${layer} · H${head}</extra>`,
    },
  ];
  if (anyMasked) {
    const hover = `<b>%{customdata[0]}</b> → %{customdata[1]}<br>%{text}<extra>L${layer} · H${head}</extra>`;
    traces.push(maskedTrace("exact masked", grid, masked, reasons, customdata, hover));
  }
  return traces;
}
