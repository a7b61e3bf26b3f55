// A heatmap figure drawn without Plotly: the head heatmap's renderer (issue 31, item 10). The
// figure is the same `{data, layout}` the pure builders of heatmap.js and pooled.js make, in
// Plotly's words; this module reads the part of that vocabulary they use (heatmap traces on token
// axes, shapes, layout images, a colour bar) and draws it in three layers: an SVG below (the plot's
// background, any image but a hatching), one canvas (the stripes of the masked cells, every trace's
// cells, one pixel a cell, scaled without smoothing, and the colour bar), and an SVG above (shapes,
// tick labels, titles).
// Redrawing a 256-token head costs a few milliseconds where Plotly.react took 40 to 90.
//
// The element keeps what it shows, as a Plotly plot does: `el.data` and `el.layout` (the figure) and
// `el.plotAxes` (each axis's `offset` and `length` in pixels, `d2p` and `p2d` between its data and
// pixel coordinates). canvashover.js draws through it and adds the tooltips and the downloads.

import { axisFrame, axisKey, imagesFrame, shapesFrame, svgText, titleFrame } from "./canvasframe.js";
import { FONT_FAMILY, HATCH_INK, MASK_BG } from "./figures.js";
import { scaleLUT } from "./gridcanvas.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORBAR_ROOM = 74; // pixels right of the plot area for a colour bar, its ticks and its title
const PLOTLY_MARGIN = { l: 80, r: 80, t: 100, b: 80 };

/** Whether `id` ("x", "x2", "y") names an x axis. */
const isX = (id) => id.startsWith("x");
/** "xaxis2" -> "x2". */
const axisId = (key) => key.replace("axis", "");

/** The centres of a trace's cells along one axis: its `x` (or `y`) array, else x0 + k·dx for its n cells. */
export function cellCentres(trace, axis, n) {
  const given = trace[axis];
  if (given) return given;
  const start = trace[`${axis}0`] ?? 0;
  const step = trace[`d${axis}`] ?? 1;
  return Array.from({ length: n }, (_, k) => start + k * step);
}

/** The size of a trace's cells along one axis (data units): its step, or 1. */
const cellSize = (trace, axis) => (trace[axis] ? 1 : (trace[`d${axis}`] ?? 1));

/** A trace's cells: rows `ny`, columns `nx`, and the centres of each. */
export function traceCells(trace) {
  const ny = trace.z.length;
  const nx = ny ? trace.z[0].length : 0;
  return { nx, ny, xs: cellCentres(trace, "x", nx), ys: cellCentres(trace, "y", ny) };
}

/** The range an axis shows: its layout `range`, else the extent of the cells of the traces on it. */
function axisRange(id, axis, data) {
  if (axis?.range) return axis.range;
  let lo = Infinity;
  let hi = -Infinity;
  for (const t of data) {
    if ((isX(id) ? (t.xaxis ?? "x") : (t.yaxis ?? "y")) !== id || !t.z?.length) continue;
    const a = isX(id) ? "x" : "y";
    const { xs, ys } = traceCells(t);
    const c = isX(id) ? xs : ys;
    const half = cellSize(t, a) / 2;
    lo = Math.min(lo, c[0] - half);
    hi = Math.max(hi, c.at(-1) + half);
  }
  return Number.isFinite(lo) ? [lo, hi] : [-0.5, 0.5];
}

/**
 * Pixel geometry of a figure drawn `width` × `height`: the paper (the area inside the margins, less
 * a colour bar's room) and each axis of the layout, as {offset, length, range, d2p, p2d}. An y axis
 * runs from its range's first value at the bottom to its second at the top, as in Plotly.
 */
export function plotGeometry({ data, layout }, width, height) {
  const m = { ...PLOTLY_MARGIN, ...layout.margin };
  const bar = data.some((t) => t.showscale) ? COLORBAR_ROOM : 0;
  const paper = { x: m.l, y: m.t, w: Math.max(1, width - m.l - m.r - bar), h: Math.max(1, height - m.t - m.b) };
  const axes = {};
  for (const key of Object.keys(layout).filter((k) => /^[xy]axis\d*$/.test(k))) {
    const id = axisId(key);
    const axis = layout[key];
    const [d0, d1] = axis.domain ?? [0, 1];
    const [r0, r1] = axisRange(id, axis, data);
    const x = isX(id);
    const offset = x ? paper.x + d0 * paper.w : paper.y + (1 - d1) * paper.h;
    const length = (d1 - d0) * (x ? paper.w : paper.h);
    const span = r1 - r0;
    axes[key] = {
      offset,
      length,
      range: [r0, r1],
      d2p: x ? (v) => ((v - r0) / span) * length : (v) => ((r1 - v) / span) * length,
      p2d: x ? (p) => r0 + (p / length) * span : (p) => r1 - (p / length) * span,
    };
  }
  return { paper, axes, width, height };
}

// ---------------------------------------------------------------- the cells

/** The 0..1 position of `v` on a trace's colour scale, from its zmin and zmax (else the data's range). */
function zRange(trace) {
  if (trace.zmin != null && trace.zmax != null) return [trace.zmin, trace.zmax];
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of trace.z)
    for (const v of row)
      if (v != null) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
  return Number.isFinite(lo) ? [trace.zmin ?? lo, trace.zmax ?? hi] : [0, 1];
}

/** The cells of one trace, a pixel each (transparent where z is null), as ImageData in screen order. */
export function traceImage(trace, flipY) {
  const { nx, ny } = traceCells(trace);
  const lut = scaleLUT(trace.colorscale);
  const [zmin, zmax] = zRange(trace);
  const span = zmax - zmin || 1;
  const img = new ImageData(Math.max(1, nx), Math.max(1, ny));
  const px = img.data;
  for (let i = 0; i < ny; i++) {
    const row = trace.z[i];
    const out = (flipY ? ny - 1 - i : i) * nx * 4;
    for (let j = 0; j < nx; j++) {
      const v = row[j];
      if (v == null || Number.isNaN(v)) continue; // alpha stays 0: a gap
      const t = (v - zmin) / span;
      const c = Math.round((t < 0 ? 0 : t > 1 ? 1 : t) * 255) * 3;
      const o = out + j * 4;
      px[o] = lut[c];
      px[o + 1] = lut[c + 1];
      px[o + 2] = lut[c + 2];
      px[o + 3] = 255;
    }
  }
  return img;
}

/** Paint one heatmap trace into `g` (CSS pixels), clipped to its axes' area. */
function paintTrace(g, geom, trace, scratch) {
  if (trace.opacity === 0 || !trace.z?.length || !trace.z[0].length) return;
  const xa = geom.axes[axisKey(trace.xaxis ?? "x")];
  const ya = geom.axes[axisKey(trace.yaxis ?? "y")];
  const { nx, ny, xs, ys } = traceCells(trace);
  const hx = cellSize(trace, "x") / 2;
  const hy = cellSize(trace, "y") / 2;
  const left = xa.offset + xa.d2p(xs[0] - hx);
  const right = xa.offset + xa.d2p(xs[nx - 1] + hx);
  const top0 = ya.offset + ya.d2p(ys[0] - hy);
  const bottom0 = ya.offset + ya.d2p(ys[ny - 1] + hy);
  const flipY = top0 > bottom0; // the first row at the bottom: an axis not reversed
  g.save();
  g.beginPath();
  g.rect(xa.offset, ya.offset, xa.length, ya.length);
  g.clip();
  if (trace.opacity != null) g.globalAlpha = trace.opacity;
  const gap = Math.max(trace.xgap ?? 0, trace.ygap ?? 0);
  if (gap > 0) {
    paintBricks(g, trace, { left, right, top: Math.min(top0, bottom0), bottom: Math.max(top0, bottom0), flipY });
  } else {
    scratch.width = nx;
    scratch.height = ny;
    scratch.getContext("2d").putImageData(traceImage(trace, flipY), 0, 0);
    g.imageSmoothingEnabled = false;
    g.drawImage(scratch, left, Math.min(top0, bottom0), right - left, Math.abs(bottom0 - top0));
  }
  g.restore();
}

/** A few cells with a gap between them (a short text): one rectangle each. */
function paintBricks(g, trace, { left, right, top, bottom, flipY }) {
  const img = traceImage(trace, flipY);
  const { width: nx, height: ny, data: px } = img;
  const w = (right - left) / nx;
  const h = (bottom - top) / ny;
  const gx = trace.xgap ?? 0;
  const gy = trace.ygap ?? 0;
  for (let i = 0; i < ny; i++)
    for (let j = 0; j < nx; j++) {
      const o = (i * nx + j) * 4;
      if (!px[o + 3]) continue;
      g.fillStyle = `rgb(${px[o]},${px[o + 1]},${px[o + 2]})`;
      g.fillRect(left + j * w + gx / 2, top + i * h + gy / 2, w - gx, h - gy);
    }
}

/**
 * The masked cells of a hatching image (figures.js hatchImage: its `hatch` runs, cells of the token grid of the
 * axes it names), filled with the same diagonal stripes its SVG draws: about `stripes` across the area.
 */
function paintHatch(g, geom, { xref, yref, hatch }) {
  const xa = geom.axes[axisKey(xref.split(" ")[0])];
  const ya = geom.axes[axisKey(yref.split(" ")[0])];
  const { runs, stripes } = hatch;
  const period = Math.max(4, (ya.length / stripes) * Math.SQRT2); // the stripes' spacing along a row
  const tile = document.createElement("canvas");
  tile.width = tile.height = Math.round(period);
  const t = tile.getContext("2d");
  t.fillStyle = MASK_BG;
  t.fillRect(0, 0, tile.width, tile.height);
  t.strokeStyle = HATCH_INK;
  t.lineWidth = (0.3 * tile.width) / Math.SQRT2;
  for (const dx of [-tile.width, 0, tile.width]) {
    t.beginPath();
    t.moveTo(dx, tile.height);
    t.lineTo(dx + tile.width, 0);
    t.stroke();
  }
  // the hatching's cells are the token grid of its axes (column c spans c − 0.5 .. c + 0.5, as the heatmap's
  // cells): placed by the axes' data coordinates, so that a zoomed head (a narrower range) hatches the same cells
  g.save();
  g.beginPath();
  g.rect(xa.offset, ya.offset, xa.length, ya.length);
  g.clip();
  g.fillStyle = g.createPattern(tile, "repeat");
  // whole pixels, so that the runs of neighbouring rows meet without a seam
  const px = (c) => Math.round(xa.offset + xa.d2p(c - 0.5));
  const py = (r) => Math.round(ya.offset + ya.d2p(r - 0.5));
  for (const [i, a, b] of runs) {
    const [x0, x1, y0, y1] = [px(a), px(b), py(i), py(i + 1)];
    g.fillRect(Math.min(x0, x1), Math.min(y0, y1), Math.abs(x1 - x0), Math.abs(y1 - y0));
  }
  g.restore();
}

/** Round ticks (1, 2 or 5 × 10^k apart) from lo to hi, about five of them. */
export function niceTicks(lo, hi, n = 5) {
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) ?? 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Math.abs(v) < 1e-12 ? 0 : v);
  return { ticks, step };
}

/** The colour bar of `trace` right of the paper: the scale on the canvas, its ticks and title as SVG. */
function colorBar(g, geom, trace) {
  const { paper } = geom;
  const cb = trace.colorbar ?? {};
  const thick = cb.thickness ?? 30;
  const len = (cb.len ?? 1) * paper.h;
  const x = paper.x + paper.w + 12;
  const y = paper.y + (paper.h - len) / 2;
  const lut = scaleLUT(trace.colorscale);
  for (let k = 0; k < 64; k++) {
    const c = Math.round(((63 - k) / 63) * 255) * 3;
    g.fillStyle = `rgb(${lut[c]},${lut[c + 1]},${lut[c + 2]})`;
    g.fillRect(x, y + (k * len) / 64, thick, len / 64 + 0.5);
  }
  const [zmin, zmax] = zRange(trace);
  const { ticks, step } = niceTicks(zmin, zmax);
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  const labels = ticks.map((v) => {
    const ty = y + (1 - (v - zmin) / (zmax - zmin || 1)) * len;
    return svgText(v.toFixed(digits), x + thick + 3, ty, { anchor: "start", size: 11, baseline: "middle" });
  });
  const title = cb.title?.text;
  if (title)
    labels.push(
      svgText(title, x + thick + 44, y + len / 2, { anchor: "middle", size: cb.title.font?.size ?? 11, rotate: 90 }),
    );
  return `<g class="colorbar">${labels.join("")}</g>`;
}

// ---------------------------------------------------------------- drawing

/** The layers of `el`, made on its first drawing: below (SVG), cells (canvas), above (SVG). */
function layersOf(el) {
  if (el.canvasLayers) return el.canvasLayers;
  el.replaceChildren();
  el.classList.add("canvas-plot");
  const below = document.createElementNS(SVG_NS, "svg");
  const cells = document.createElement("canvas");
  const above = document.createElementNS(SVG_NS, "svg");
  below.classList.add("plot-below");
  cells.className = "plot-cells";
  above.classList.add("plot-above");
  el.append(below, cells, above);
  el.canvasLayers = { below, cells, above, scratch: document.createElement("canvas") };
  new ResizeObserver(() => el.figure && paintFigure(el, el.figure)).observe(el);
  return el.canvasLayers;
}

/** Replace `svg`'s content with `markup` unless it holds that already: an equal frame is neither parsed nor painted. */
function setMarkup(svg, markup) {
  if (svg.markup === markup) return;
  svg.innerHTML = markup;
  svg.markup = markup;
}

/** Draw `fig` into `el` at its current size. */
export function paintFigure(el, fig) {
  const { below, cells, above, scratch } = layersOf(el);
  const width = el.clientWidth;
  const height = el.clientHeight;
  const geom = plotGeometry(fig, width, height);
  const { paper } = geom;
  const bg = fig.layout.plot_bgcolor ?? "#ffffff";
  for (const svg of [below, above]) {
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
  }
  setMarkup(
    below,
    `<rect x="${paper.x}" y="${paper.y}" width="${paper.w}" height="${paper.h}" fill="${bg}"/>` +
      imagesFrame(geom, fig.layout.images),
  );
  const dpr = window.devicePixelRatio || 1;
  const g = cells.getContext("2d");
  if (cells.width !== Math.round(width * dpr) || cells.height !== Math.round(height * dpr)) {
    cells.width = Math.round(width * dpr); // a new size clears the canvas; the same one is cleared below
    cells.height = Math.round(height * dpr);
    cells.style.width = `${width}px`;
    cells.style.height = `${height}px`;
  }
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, height);
  for (const im of fig.layout.images ?? []) if (im.hatch) paintHatch(g, geom, im);
  for (const trace of fig.data) paintTrace(g, geom, trace, scratch);
  const scaled = fig.data.find((t) => t.showscale);
  const font = fig.layout.font ?? {};
  let frame = titleFrame(fig.layout.title) + shapesFrame(geom, fig.layout.shapes, el.id || "plot");
  // an x axis's labels stand on the paper's top edge (the token axes' side "top"), an y axis's left of it
  for (const [key, a] of Object.entries(geom.axes))
    frame += axisFrame(key, fig.layout[key], a, key.startsWith("x") ? paper.y : paper.x);
  if (scaled) frame += colorBar(g, geom, scaled);
  above.setAttribute("font-family", font.family ?? FONT_FAMILY);
  below.setAttribute("font-family", font.family ?? FONT_FAMILY);
  setMarkup(above, frame);
  el.plotAxes = geom.axes;
  el.plotGeometry = geom;
}
