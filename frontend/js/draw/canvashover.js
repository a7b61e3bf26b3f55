// What the pointer finds on a figure canvasplot.js drew: the cell under it, the tooltip its
// trace's `hovertemplate` makes (Plotly's syntax: %{z:.4f}, %{customdata[2]:.3f}, %{text}, <b>,
// <br>, <extra>), and the figure's downloads as PNG and SVG (the plot's own buttons, shown on hover).
// drawCanvasPlot, the views' entry point, draws a figure with canvasplot.js and adds these.

import { downloadBlob } from "../dom.js";
import { axisKey, esc } from "./canvasframe.js";
import { paintFigure, traceCells } from "./canvasplot.js";

/** The index of the centre nearest `v` among evenly spaced (or listed) `centres`, or -1 outside their cells. */
function nearest(centres, v, step) {
  const n = centres.length;
  if (!n) return -1;
  const k = Math.round((v - centres[0]) / step);
  return k >= 0 && k < n ? k : -1;
}

/**
 * The hovered point at (px, py), pixels from the plot's top-left corner: the last trace (the one on
 * top) with a cell there, that cell's row `i` and column `j`, and its value; null when none. A null
 * cell of a trace with `hoverongaps: false` passes the pointer on to the traces below.
 */
export function pointAt({ data }, axes, px, py) {
  for (let n = data.length - 1; n >= 0; n--) {
    const t = data[n];
    if (!t.z?.length || t.hoverinfo === "skip" || t.hoverinfo === "none") continue;
    const xa = axes[axisKey(t.xaxis ?? "x")];
    const ya = axes[axisKey(t.yaxis ?? "y")];
    const x = px - xa.offset;
    const y = py - ya.offset;
    if (x < 0 || x > xa.length || y < 0 || y > ya.length) continue;
    const { xs, ys } = traceCells(t);
    const j = nearest(xs, xa.p2d(x), t.x ? 1 : (t.dx ?? 1));
    const i = nearest(ys, ya.p2d(y), t.y ? 1 : (t.dy ?? 1));
    if (i < 0 || j < 0) continue;
    const z = t.z[i][j];
    if (z == null && t.hoverongaps === false) continue;
    return { trace: t, i, j, z };
  }
  return null;
}

/** `v` by a d3-format of the kinds the figures use (".3f", "+.4f"); as it is without one. */
function format(v, spec) {
  if (v === null || v === undefined) return "–";
  if (!spec) return String(v);
  const m = /^(\+)?\.(\d+)f$/.exec(spec);
  if (!m || typeof v !== "number") return String(v);
  const s = v.toFixed(Number(m[2]));
  return m[1] && v >= 0 ? `+${s}` : s;
}

/** The value a template field names at a point: z, text, x, y or customdata[k]. */
function fieldValue(name, { trace, i, j, z }) {
  if (name === "z") return z;
  if (name === "text") return trace.text?.[i]?.[j];
  const cd = /^customdata\[(\d+)\]$/.exec(name);
  if (cd) return trace.customdata?.[i]?.[j]?.[Number(cd[1])];
  if (name === "x" || name === "y") return traceCells(trace)[`${name}s`][name === "x" ? j : i];
  return undefined;
}

/** A point's tooltip from its trace's hovertemplate: {lines: [HTML], extra: text beside them (the trace's name)}. */
export function hoverLines(point) {
  const template = point.trace.hovertemplate ?? "%{z}";
  const filled = template.replace(/%\{([^}:]+)(?::([^}]*))?\}/g, (_, name, spec) =>
    esc(format(fieldValue(name, point), spec)),
  );
  const extraMatch = /<extra>(.*?)<\/extra>/.exec(filled);
  const body = filled.replace(/<extra>.*?<\/extra>/, "");
  return { lines: body.split("<br>"), extra: extraMatch ? extraMatch[1] : "" };
}

/** Only <b> and </b> of a tooltip line survive as markup; every other character is text. */
const safeLine = (line) =>
  esc(line.replace(/<\/?b>/g, (t) => (t === "<b>" ? "\u0001" : "\u0002")))
    .replace(/&amp;(lt|gt|amp|quot);/g, "&$1;")
    .replace(/\u0001/g, "<b>")
    .replace(/\u0002/g, "</b>");

/** Show the tooltip of the point under the mouse event `ev` on `el`, or remove it when there is none. */
function hover(el, ev) {
  const layer = el.querySelector(":scope > .hoverlayer");
  const box = el.getBoundingClientRect();
  const px = ev.clientX - box.left;
  const py = ev.clientY - box.top;
  const point = el.figure && el.plotAxes ? pointAt(el.figure, el.plotAxes, px, py) : null;
  if (!point) {
    layer?.remove();
    return;
  }
  const { lines, extra } = hoverLines(point);
  const html =
    lines.map((l) => `<div class="line">${safeLine(l)}</div>`).join("\n") +
    (extra ? `\n<div class="line extra">${esc(extra)}</div>` : "");
  const tip = layer ?? Object.assign(document.createElement("div"), { className: "hoverlayer" });
  if (!layer) {
    tip.innerHTML = '<div class="hovertext" role="tooltip"></div>';
    el.append(tip);
  }
  const text = tip.firstChild;
  if (text.innerHTML !== html) text.innerHTML = html;
  // beside the pointer, on its left where the right edge is near
  const right = px + 16 + text.offsetWidth > box.width;
  text.style.left = `${right ? px - 12 - text.offsetWidth : px + 12}px`;
  text.style.top = `${Math.max(0, Math.min(py - text.offsetHeight / 2, box.height - text.offsetHeight))}px`;
}

/** An SVG layer's content as XML (innerHTML would write HTML entities such as &nbsp;, which XML lacks). */
const xml = (svg) => [...svg.childNodes].map((node) => new XMLSerializer().serializeToString(node)).join("");

/** The figure in `el` as one SVG document: the layers below and above with the cells between them as an image. */
export function figureSvg(el) {
  const { below, cells, above } = el.canvasLayers;
  const w = el.clientWidth;
  const h = el.clientHeight;
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" ` +
    `font-family="${esc(above.getAttribute("font-family"))}">` +
    `<rect width="${w}" height="${h}" fill="#ffffff"/>` +
    `${xml(below)}<image href="${cells.toDataURL("image/png")}" x="0" y="0" width="${w}" height="${h}" ` +
    `preserveAspectRatio="none"/>${xml(above)}</svg>`
  );
}

/** The figure as a PNG at `scale` times its size, from its SVG. */
async function figurePng(el, scale = 2) {
  const url = URL.createObjectURL(new Blob([figureSvg(el)], { type: "image/svg+xml" }));
  try {
    const img = new Image();
    img.src = url;
    await img.decode();
    const canvas = document.createElement("canvas");
    canvas.width = el.clientWidth * scale;
    canvas.height = el.clientHeight * scale;
    canvas.getContext("2d").drawImage(img, 0, 0, canvas.width, canvas.height);
    return await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** The plot's downloads, each a button of its toolbar: {name, click(el)}. */
export const DOWNLOADS = [
  {
    name: "Download as PNG",
    click: async (el) => downloadBlob(`${el.filename}.png`, await figurePng(el)),
  },
  {
    name: "Download as SVG",
    click: (el) => downloadBlob(`${el.filename}.svg`, new Blob([figureSvg(el)], { type: "image/svg+xml" })),
  },
];

/** The tooltip on hover and the toolbar of downloads, installed once on a canvas plot `el`. */
function installCanvasTools(el) {
  el.canvasTools = true;
  el.addEventListener("mousemove", (ev) => hover(el, ev));
  el.addEventListener("mouseleave", () => el.querySelector(":scope > .hoverlayer")?.remove());
  const bar = document.createElement("div");
  bar.className = "plot-tools";
  for (const d of DOWNLOADS) {
    const b = document.createElement("button");
    b.type = "button";
    b.title = d.name;
    b.setAttribute("aria-label", d.name);
    b.textContent = d.name.endsWith("PNG") ? "PNG" : "SVG";
    b.addEventListener("click", (ev) => {
      ev.stopPropagation(); // a download is no click on a cell
      d.click(el);
    });
    bar.append(b);
  }
  el.append(bar);
}

/**
 * Draw the figure `build()` makes into `el` unless it already shows `signature`; true when it drew (as
 * dom.js drawPlot, without Plotly), with a tooltip on hover and its downloads. `filename` names its downloads.
 */
export function drawCanvasPlot(el, signature, build, filename) {
  if (el.dataset.signature === signature) return false;
  const start = performance.now();
  const fig = build();
  const built = performance.now();
  el.figure = fig;
  el.data = fig.data;
  el.layout = fig.layout;
  el.filename = filename;
  paintFigure(el, fig);
  if (!el.canvasTools) installCanvasTools(el);
  performance.measure(`attnscope:build:${el.id}`, { start, end: built });
  performance.measure(`attnscope:draw:${el.id}`, { start, end: performance.now() });
  el.dataset.signature = signature;
  el.classList.add("drawn");
  return true;
}
