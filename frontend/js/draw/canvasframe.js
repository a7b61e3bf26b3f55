// The frame of a figure canvasplot.js draws, as SVG markup: tick labels and axis titles, the
// layout's shapes (a chosen row's outline, knocked-out cells, an image's band), its images but a
// hatching, the title. Pure functions of the figure and its pixel geometry (canvasplot.js
// plotGeometry); text stays text, so the SVG download keeps it selectable.

import { INK, MUTED } from "./figures.js";

/** "x2" -> "xaxis2". */
export const axisKey = (id) => `${id[0]}axis${id.slice(1)}`;

/** Pixels of a shape's coordinate `v` along an axis reference ("x", "y2", "paper", "x domain"). */
function refPixel(geom, ref, v, x) {
  const { paper, axes } = geom;
  if (ref === "paper") return x ? paper.x + v * paper.w : paper.y + (1 - v) * paper.h;
  const [id, domain] = ref.split(" ");
  const a = axes[axisKey(id)];
  if (domain) return x ? a.offset + v * a.length : a.offset + (1 - v) * a.length;
  return a.offset + a.d2p(v);
}

/** `s` as text inside markup: &, <, > and " escaped. */
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
export const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ENTITIES[c]);

/** One label as SVG text at (x, y), rotated by `rotate` degrees about that point. */
export function svgText(
  text,
  x,
  y,
  { anchor = "middle", size = 12, color = INK, rotate = 0, baseline = "auto", cls = "" },
) {
  const turn = rotate ? ` rotate(${rotate})` : "";
  return (
    `<text class="${cls}" transform="translate(${x.toFixed(1)},${y.toFixed(1)})${turn}" text-anchor="${anchor}" ` +
    `dominant-baseline="${baseline}" font-size="${size}" fill="${color}">${esc(text)}</text>`
  );
}

/** Tick labels and the title of one axis, as SVG; `edge`: the pixel its labels stand on (top or left of the area). */
export function axisFrame(key, axis, a, edge) {
  const x = key.startsWith("x");
  const size = axis.tickfont?.size ?? 12;
  const angle = axis.tickangle ?? 0;
  const [lo, hi] = [Math.min(...a.range), Math.max(...a.range)];
  const parts = (axis.tickvals ?? []).map((v, n) => {
    if (v < lo || v > hi) return "";
    const p = a.offset + a.d2p(v);
    const text = axis.ticktext?.[n] ?? String(v);
    if (!x) return svgText(text, edge - 4, p, { anchor: "end", size, baseline: "middle", cls: "ytick" });
    return angle
      ? svgText(text, p, edge - 4, { anchor: "start", size, rotate: angle, cls: "xtick" })
      : svgText(text, p, edge - 4, { size, cls: "xtick" });
  });
  const title = axis.title?.text;
  if (title) {
    const font = { size: axis.title.font?.size ?? 12, color: axis.title.font?.color ?? MUTED };
    const mid = a.offset + a.length / 2;
    parts.push(x ? svgText(title, mid, 12, font) : svgText(title, 12, mid, { ...font, rotate: -90 }));
  }
  return parts.join("");
}

/**
 * The area a shape is clipped to, as Plotly does: its axes' area along each axis it is in (an axis
 * reference), the whole figure along paper; null when both are paper.
 */
function shapeClip(geom, s) {
  const xa = (s.xref ?? "x") === "paper" ? null : geom.axes[axisKey((s.xref ?? "x").split(" ")[0])];
  const ya = (s.yref ?? "y") === "paper" ? null : geom.axes[axisKey((s.yref ?? "y").split(" ")[0])];
  if (!xa && !ya) return null;
  return {
    x: xa ? xa.offset : 0,
    y: ya ? ya.offset : 0,
    w: xa ? xa.length : geom.width,
    h: ya ? ya.length : geom.height,
  };
}

/**
 * The shapes of the layout (rectangles and lines in axis, domain or paper coordinates), as SVG, each
 * clipped to its axes (`shapeClip`); `id` makes the clip paths' ids unique on the page.
 */
export function shapesFrame(geom, shapes, id = "plot") {
  return (shapes ?? [])
    .map((s, n) => {
      const x0 = refPixel(geom, s.xref ?? "x", s.x0, true);
      const x1 = refPixel(geom, s.xref ?? "x", s.x1, true);
      const y0 = refPixel(geom, s.yref ?? "y", s.y0, false);
      const y1 = refPixel(geom, s.yref ?? "y", s.y1, false);
      const w = s.line?.width ?? 2;
      const stroke = w > 0 ? `stroke="${s.line?.color ?? "#444"}" stroke-width="${w}"` : 'stroke="none"';
      const dash = s.line?.dash === "dot" ? ' stroke-dasharray="2,3"' : s.line?.dash ? ' stroke-dasharray="6,4"' : "";
      const op = s.opacity != null ? ` opacity="${s.opacity}"` : "";
      const c = shapeClip(geom, s);
      const clipId = `${id}-shape${n}`;
      const clipDef = c
        ? `<clipPath id="${clipId}"><rect x="${c.x}" y="${c.y}" width="${c.w}" height="${c.h}"/></clipPath>`
        : "";
      const clip = c ? ` clip-path="url(#${clipId})"` : "";
      if (s.type === "line")
        return `${clipDef}<line x1="${x0}" y1="${y0}" x2="${x1}" y2="${y1}" ${stroke}${dash}${op}${clip}/>`;
      const [l, t] = [Math.min(x0, x1), Math.min(y0, y1)];
      // a named shape (a band on the token axes) says its name on hover
      const body = s.name ? `><title>${esc(s.name)}</title></rect>` : "/>";
      return (
        `${clipDef}<rect class="shape" x="${l}" y="${t}" width="${Math.abs(x1 - x0)}" ` +
        `height="${Math.abs(y1 - y0)}" fill="${s.fillcolor ?? "none"}" ${stroke}${dash}${op}${clip}${body}`
      );
    })
    .join("");
}

/** The layout's images over the areas they name, as SVG; a hatching's runs are painted on the canvas instead. */
export function imagesFrame(geom, images) {
  return (images ?? [])
    .filter((im) => !im.hatch)
    .map((im) => {
      const x0 = refPixel(geom, im.xref, im.x, true);
      const x1 = refPixel(geom, im.xref, im.x + im.sizex, true);
      const y0 = refPixel(geom, im.yref, im.y, false);
      const y1 = refPixel(geom, im.yref, im.y - im.sizey, false);
      return (
        `<image href="${esc(im.source)}" x="${x0}" y="${y0}" width="${x1 - x0}" height="${y1 - y0}" ` +
        `preserveAspectRatio="none"/>`
      );
    })
    .join("");
}

/** The title in the top-left corner (heatframe.js heatmapTitle), as SVG. */
export const titleFrame = (title) => (title?.text ? svgText(title.text, 4, 16, { anchor: "start", size: 13 }) : "");
