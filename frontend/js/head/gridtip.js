// The all-heads grid's tooltip: what a cell of the canvas (draw/gridcanvas.js) shows, in words: the head, the
// query and key tokens it pools, and its value from the answer (a weight, a signed M of an implicit layer, or
// why the cell is masked).

import { maskedWhy } from "../draw/captions.js";
import { cellWord } from "../draw/quirks.js";
import { gridColumns, layerMask, meanThumbnail } from "../draw/gridcanvas.js";

const span = (a, b) => (b - a <= 1 ? `${a}` : `${a}–${b - 1}`);

/** The lines the tooltip shows for a cell: head, query and key tokens, the value, or "masked". */
export function gridTooltip({ grid, hit, aggregate = false, model = null, keys = grid.tokens }) {
  const cols = gridColumns(grid.layers, aggregate);
  const layer = grid.layers[hit.row];
  const head = cols[hit.col];
  const k = grid.thumbnail.block;
  const T = grid.tokens.length;
  const q0 = hit.i * k;
  const k0 = hit.j * k;
  const q1 = Math.min(T, q0 + k);
  const k1 = Math.min(keys.length, k0 + k);
  const name = head === -1 ? `Layer ${layer.layer} · mean of the heads` : `Layer ${layer.layer} · head ${head}`;
  const first = layer.heads[0].thumbnail; // a tile's cells past a cross stack's rows or columns hold nothing
  if (hit.i >= first.length || hit.j >= first[hit.i].length) return [name, "click to open this head"];
  const tok = (i) => grid.tokens[i];
  const lines = [
    name,
    k === 1 ? `query ${q0} ${tok(q0)}` : `queries ${span(q0, q1)} (${tok(q0)} … ${tok(q1 - 1)})`,
    k === 1 ? `key ${k0} ${keys[k0]}` : `keys ${span(k0, k1)} (${keys[k0]} … ${keys[k1 - 1]})`,
  ];
  const why = maskedWhy({
    mask: layerMask(layer, grid.thumbnail.mask),
    i: hit.i,
    j: hit.j,
    window: layer.window,
    chunk: layer.chunk,
    block: k,
  });
  if (why) {
    lines.push(why);
  } else if (layer.implicit) {
    lines[0] = `${name} · ${layer.mixer} (implicit)`;
    lines.push(implicitCell(layer, head, hit, k, grid.thumbnail.size));
  } else {
    const thumb =
      head === -1
        ? meanThumbnail(layer.heads, grid.thumbnail.size)
        : layer.heads.find((h) => h.head === head)?.thumbnail;
    if (!thumb) return [name, "no such head in this layer"];
    const w = (thumb[hit.i][hit.j] / 255).toFixed(3);
    // a signed map's quirk names its cells (the server pools |pattern|)
    const weight = cellWord(model, layer);
    if (head === -1) lines.push(`mean over heads of the largest ${weight} ${w}`);
    else lines.push(k === 1 ? `${weight} ${w}` : `largest ${weight} in this ${k}×${k} block ${w}`);
  }
  lines.push(head === -1 ? "" : "click to open this head");
  return lines.filter(Boolean);
}

/** The tooltip's line for a cell of an implicit layer: the answer's pooled M, signed. */
function implicitCell(layer, head, hit, k, size) {
  const thumb = head === -1 ? meanThumbnail(layer.heads, size, false) : layer.heads.find((h) => h.head === head);
  if (!thumb) return "no such head in this layer";
  const v = (head === -1 ? thumb : thumb.thumbnail)[hit.i][hit.j].toPrecision(4);
  const what = layer.per_channel ? "mean over channels of |M|" : "M";
  if (head === -1) return `mean over heads of the block's ${what} ${v}`;
  return k === 1 ? `${what} ${v}` : `${what} of largest |M| in this ${k}×${k} block (sign kept) ${v}`;
}
