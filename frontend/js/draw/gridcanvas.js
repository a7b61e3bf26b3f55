// The all-heads grid: every layer × head thumbnail in ONE canvas (up to 32 × 32 heads).
//
// The server max-pools each head's pattern into blocks of `block` × `block` tokens (at most
// 64 cells a side) and sends the block maxima as levels 0..255 (weight × 255). This module
// lays the thumbnails out (pure functions: geometry, the image, what a pixel shows; the tooltip is
// head/gridtip.js's) and paints them with putImageData, which stays fast where one Plotly heatmap per
// head, or one giant heatmap, does not. Each layer is painted with its own mask: the answer's
// `thumbnail_mask` of the layer where a sliding window makes it differ, else `thumbnail.mask`.


// Plotly's Viridis, the colour scale of every weight heatmap on the page
const VIRIDIS = [
  [0, "#440154"],
  [0.0627, "#48186a"],
  [0.1255, "#472d7b"],
  [0.1882, "#424086"],
  [0.251, "#3b528b"],
  [0.3137, "#33638d"],
  [0.3765, "#2c728e"],
  [0.4392, "#26828e"],
  [0.502, "#21918c"],
  [0.5647, "#1fa088"],
  [0.6275, "#28ae80"],
  [0.6902, "#3fbc73"],
  [0.7529, "#5ec962"],
  [0.8157, "#84d44b"],
  [0.8784, "#addc30"],
  [0.9412, "#d8e219"],
  [1, "#fde725"],
];
const MASKED_RGB = [236, 238, 242]; // MASK_BG of figures.js: masked cells, not zero weights
const GAP_RGB = [255, 255, 255];

// Plotly's RdBu (blue low, red high) and Cividis, the signed and the scores' scales
const SCALES = {
  Viridis: VIRIDIS,
  RdBu: [
    [0, "rgb(5,10,172)"],
    [0.35, "rgb(106,137,247)"],
    [0.5, "rgb(190,190,190)"],
    [0.6, "rgb(220,170,132)"],
    [0.7, "rgb(230,145,90)"],
    [1, "rgb(178,10,28)"],
  ],
  Cividis: [
    [0, "rgb(0,32,76)"],
    [0.058824, "rgb(0,42,102)"],
    [0.117647, "rgb(0,52,110)"],
    [0.176471, "rgb(39,63,108)"],
    [0.235294, "rgb(60,74,107)"],
    [0.294118, "rgb(76,85,107)"],
    [0.352941, "rgb(91,95,109)"],
    [0.411765, "rgb(104,106,112)"],
    [0.470588, "rgb(117,117,117)"],
    [0.529412, "rgb(131,129,120)"],
    [0.588235, "rgb(146,140,120)"],
    [0.647059, "rgb(161,152,118)"],
    [0.705882, "rgb(176,165,114)"],
    [0.764706, "rgb(192,177,109)"],
    [0.823529, "rgb(209,191,102)"],
    [0.882353, "rgb(225,204,92)"],
    [0.941176, "rgb(243,219,79)"],
    [1, "rgb(255,233,69)"],
  ],
};

/** A colour "#rrggbb" or "rgb(r, g, b)" as [r, g, b]. */
const rgbOf = (c) =>
  c.startsWith("#") ? [1, 3, 5].map((i) => Number.parseInt(c.slice(i, i + 2), 16)) : c.match(/[\d.]+/g).map(Number);

/** 256 × RGB: the colour of each level (0..255) of a colour scale, by Plotly's name or as [[t, colour], ...]. */
export function scaleLUT(scale = "Viridis") {
  const stops = (typeof scale === "string" ? SCALES[scale] : scale) ?? VIRIDIS;
  const lut = new Uint8ClampedArray(256 * 3);
  for (let v = 0; v < 256; v++) {
    const t = v / 255;
    let k = 0;
    while (k < stops.length - 2 && stops[k + 1][0] < t) k++;
    const [t0, c0] = stops[k];
    const [t1, c1] = stops[Math.min(k + 1, stops.length - 1)];
    const a = rgbOf(c0);
    const b = rgbOf(c1);
    const u = t1 > t0 ? Math.min(1, Math.max(0, (t - t0) / (t1 - t0))) : 0;
    for (let c = 0; c < 3; c++) lut[v * 3 + c] = Math.round(a[c] + (b[c] - a[c]) * u);
  }
  return lut;
}

/** 256 × RGB: colour of each level (weight × 255). */
export const viridisLUT = () => scaleLUT("Viridis");

/** The colour of weight `w` (0..1) as every heatmap draws it, from a `viridisLUT()`. */
export const weightColor = (lut, w) => {
  const v = Math.round(Math.min(1, Math.max(0, w)) * 255) * 3;
  return `rgb(${lut[v]}, ${lut[v + 1]}, ${lut[v + 2]})`;
};

/** A legend of that colour scale: "0 ▭ 1 weight", the bar in the heatmaps' colours. */
export function weightLegend(testid, label = "attention weight") {
  const legend = document.createElement("div");
  legend.className = "weight-legend muted small";
  legend.dataset.testid = testid;
  const bar = document.createElement("canvas");
  bar.width = 96;
  bar.height = 8;
  const g = bar.getContext("2d");
  const lut = viridisLUT();
  for (let x = 0; x < bar.width; x++) {
    g.fillStyle = weightColor(lut, x / (bar.width - 1));
    g.fillRect(x, 0, 1, bar.height);
  }
  legend.append("0 ", bar, ` 1 ${label}`);
  return legend;
}

/**
 * Columns of the grid: one per head of the layer with the most (a hybrid's implicit layers may have more heads than
 * its softmax layers; a layer's missing heads are blank tiles), plus "mean" (the mean over the layer's heads of
 * their cells) when `aggregate`.
 */
export function gridColumns(layers, aggregate) {
  const widest = layers.reduce((a, l) => (l.heads.length > a.heads.length ? l : a), layers[0] ?? { heads: [] });
  const heads = widest.heads.map((h) => h.head);
  return aggregate ? [...heads, -1] : heads;
}

/** A layer's thumbnail mask: its own where the answer gives one (a sliding window), else the shared one. */
export const layerMask = (layer, mask) => layer.thumbnail_mask ?? mask;

/** The largest |M| of an implicit layer's thumbnails: its heads share one diverging scale, ±peak. */
export const layerPeak = (layer) =>
  layer.heads.reduce((a, h) => h.thumbnail.reduce((b, row) => row.reduce((c, v) => Math.max(c, Math.abs(v)), b), a), 0);

/** An implicit layer's signed thumbnail as levels 0..255 of the diverging scale: 0 = −peak, 128 = 0, 255 = +peak. */
const signedLevels = (thumb, peak) =>
  thumb.map((row) => Array.from(row, (v) => Math.round(127.5 + (127.5 * v) / (peak || 1))));

/** Per column, the tile of `layer` as levels (null: a head the layer does not have) and the colour table. */
function layerTiles(layer, cols, size, luts) {
  const mean = cols.includes(-1) ? meanThumbnail(layer.heads, size, !layer.implicit) : null;
  const byHead = new Map(layer.heads.map((h) => [h.head, h.thumbnail]));
  const thumbs = cols.map((head) => (head === -1 ? mean : (byHead.get(head) ?? null)));
  if (!layer.implicit) return { thumbs, lut: luts.weights };
  const peak = layerPeak(layer);
  return { thumbs: thumbs.map((t) => t && signedLevels(t, peak)), lut: luts.signed };
}

/**
 * The image of the grid at one pixel per thumbnail cell, with 1-pixel gaps between tiles; an implicit layer's
 * tiles on the diverging scale (RdBu, centred on 0, the layer's ±peak), never the softmax colours.
 */
export function gridImage({ layers, size, mask, aggregate = false, lut = viridisLUT() }) {
  const cols = gridColumns(layers, aggregate);
  const luts = { weights: lut, signed: layers.some((l) => l.implicit) ? scaleLUT("RdBu") : null };
  const W = cols.length * (size + 1) + 1;
  const H = layers.length * (size + 1) + 1;
  const px = new Uint8ClampedArray(W * H * 4);
  // written byte by byte: a small array a pixel (set, subarray) kept the collector busy on every keystroke
  for (let o = 0; o < px.length; o += 4) {
    px[o] = GAP_RGB[0];
    px[o + 1] = GAP_RGB[1];
    px[o + 2] = GAP_RGB[2];
    px[o + 3] = 255;
  }
  layers.forEach((layer, r) => {
    const tiles = layerTiles(layer, cols, size, luts);
    const lmask = layerMask(layer, mask);
    cols.forEach((_, c) => {
      const thumb = tiles.thumbs[c];
      if (!thumb) return;
      const x0 = 1 + c * (size + 1);
      const y0 = 1 + r * (size + 1);
      // a cross stack's thumbnail need not be square: its rows (target) and columns (source) as the answer has them
      for (let i = 0; i < Math.min(size, thumb.length); i++) {
        const row = thumb[i];
        const mrow = lmask[i];
        for (let j = 0; j < Math.min(size, row.length); j++) {
          const o = ((y0 + i) * W + x0 + j) * 4;
          const rgb = mrow[j] ? tiles.lut : MASKED_RGB;
          const at = mrow[j] ? row[j] * 3 : 0;
          px[o] = rgb[at];
          px[o + 1] = rgb[at + 1];
          px[o + 2] = rgb[at + 2];
        }
      }
    });
  });
  return { width: W, height: H, data: px, cols };
}

/** Per cell, the mean over heads of their cells: the "mean" column (levels rounded; an implicit layer's M not). */
export function meanThumbnail(heads, size, round = true) {
  const first = heads[0].thumbnail; // its rows and columns (a cross stack's need not be square)
  return Array.from({ length: Math.min(size, first.length) }, (_, i) => {
    const n = Math.min(size, first[i].length);
    const row = round ? new Uint8Array(n) : new Float64Array(n);
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (const h of heads) s += h.thumbnail[i][j];
      row[j] = round ? Math.round(s / heads.length) : s / heads.length;
    }
    return row;
  });
}

/**
 * Where things go on a canvas `width` CSS pixels wide: labels, tiles, the scale. `shape`: a thumbnail's rows and
 * columns (a cross stack's: target × source), each tile drawn with that aspect (`tile` wide, `tileH` high).
 */
export function gridGeometry({ nRows, nCols, size, width, shape = { rows: size, cols: size } }) {
  const label = 34; // left margin for "L12", top margin for "H31"
  const tile = Math.max(4, Math.floor((width - label - 4) / nCols));
  const scale = (tile - 1) / shape.cols; // CSS pixels per thumbnail cell (a tile holds a 1-pixel gap)
  const tileH = Math.max(5, Math.round(shape.rows * scale) + 1); // a few target rows stay visible
  const { rows, cols } = shape;
  return { label, tile, tileH, scale, scaleY: (tileH - 1) / rows, rows, cols, width: label + nCols * tile + 4,
    height: label + nRows * tileH + 4 };
}

/** A grid's thumbnail shape, rows × columns, as the answer has it (its first head's; every head's alike). */
export function thumbShape(grid, size) {
  const thumb = grid.layers[0]?.heads[0]?.thumbnail;
  return thumb?.length ? { rows: thumb.length, cols: thumb[0].length } : { rows: size, cols: size };
}

/** The layer row, column and thumbnail cell under canvas point (x, y), or null. */
export function cellAt(geom, size, nRows, nCols, x, y) {
  const gx = x - geom.label;
  const gy = y - geom.label;
  if (gx < 0 || gy < 0) return null;
  const c = Math.floor(gx / geom.tile);
  const r = Math.floor(gy / geom.tileH);
  if (c >= nCols || r >= nRows) return null;
  const i = Math.floor((gy - r * geom.tileH) / geom.scaleY);
  const j = Math.floor((gx - c * geom.tile) / geom.scale);
  if (i < 0 || j < 0 || i >= Math.min(size, geom.rows) || j >= Math.min(size, geom.cols)) return null;
  return { row: r, col: c, i, j };
}

/**
 * A tile's side in cells: the thumbnails' `size` (their rows), or their columns where those are more (a cross
 * stack's thumbnails: fewer target rows than source columns, drawn in the tile's top rows).
 */
export const tileSize = (grid) =>
  Math.max(grid.thumbnail.size, grid.layers[0]?.heads[0]?.thumbnail?.[0]?.length ?? 0);

/**
 * Paint `grid` (a b64 grid answer, decoded) into `canvas`, the chosen head outlined; `marked`: [layer, head]
 * pairs given an orange corner (a speech model's alignment heads on its cross stack).
 */
export function paintGrid(canvas, grid, { selected, aggregate = false, width, marked = [] }) {
  const size = tileSize(grid);
  const img = gridImage({ layers: grid.layers, size, mask: grid.thumbnail.mask, aggregate });
  const nRows = grid.layers.length;
  const nCols = img.cols.length;
  const geom = gridGeometry({ nRows, nCols, size, width, shape: thumbShape(grid, size) });
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(geom.width * dpr);
  canvas.height = Math.round(geom.height * dpr);
  canvas.style.width = `${geom.width}px`;
  canvas.style.height = `${geom.height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, geom.width, geom.height);
  const native = new OffscreenCanvas(img.width, img.height);
  native.getContext("2d").putImageData(new ImageData(img.data, img.width, img.height), 0, 0);
  ctx.imageSmoothingEnabled = geom.scale < 1; // shrinking: average; enlarging: crisp cells
  // one drawImage per tile keeps the white gaps one CSS pixel wide at any zoom
  for (let r = 0; r < nRows; r++) {
    for (let c = 0; c < nCols; c++) {
      const sx = 1 + c * (size + 1);
      const sy = 1 + r * (size + 1);
      ctx.drawImage(
        native,
        sx,
        sy,
        geom.cols,
        geom.rows,
        geom.label + c * geom.tile,
        geom.label + r * geom.tileH,
        geom.tile - 1,
        geom.tileH - 1,
      );
    }
  }
  ctx.fillStyle = "#4a5160"; // labels: 7.6:1 on white
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  const every = Math.max(1, Math.ceil(14 / geom.tile)); // a label every few tiles when they are small
  const everyRow = Math.max(1, Math.ceil(14 / geom.tileH));
  grid.layers.forEach((l, r) => {
    // a layer number twice (attention and a mixer side by side): its mixer's row is "L3m"
    const twice = l.implicit && grid.layers[r - 1]?.layer === l.layer;
    const y = geom.label + r * geom.tileH + geom.tileH / 2;
    if (r % everyRow === 0) ctx.fillText(`L${l.layer}${twice ? "m" : ""}`, geom.label - 4, y);
  });
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  img.cols.forEach((h, c) => {
    if (c % every === 0 || h === -1)
      ctx.fillText(h === -1 ? "mean" : `H${h}`, geom.label + c * geom.tile + geom.tile / 2, geom.label - 4);
  });
  ctx.fillStyle = "#e8590c";
  for (const [layer, head] of marked) {
    const [r, c] = [grid.layers.findIndex((l) => l.layer === layer), img.cols.indexOf(head)];
    if (r < 0 || c < 0) continue;
    const [x, y, s] = [geom.label + c * geom.tile, geom.label + r * geom.tileH, Math.max(4, geom.tileH / 4)];
    ctx.beginPath();
    ctx.moveTo(x, y);
    ctx.lineTo(x + s, y);
    ctx.lineTo(x, y + s);
    ctx.fill();
  }
  if (selected) {
    const r = grid.layers.findIndex((l) => l.layer === selected.layer);
    const c = img.cols.indexOf(selected.head);
    if (r >= 0 && c >= 0) {
      ctx.strokeStyle = "#4338ca";
      ctx.lineWidth = 2.5;
      const [x, y] = [geom.label + c * geom.tile - 1.5, geom.label + r * geom.tileH - 1.5];
      ctx.strokeRect(x, y, geom.tile + 2, geom.tileH + 2);
    }
  }
  return { geom, size, nRows, nCols, cols: img.cols };
}
