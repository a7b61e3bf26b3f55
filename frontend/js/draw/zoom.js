// Zooming in on the head heatmap: drag a box over its cells and the page shows that block of
// tokens; over a long text's max-pooled cells (issue 16), then the exact cells of it once the
// server sent them (the head view's `need` asks for them). A double-click shows the whole head again.

import { visibleBlock } from "./pooled.js";

/** Drag-to-zoom on `app.els.headHeatmap`; `app`: {state, els, update}. Returns `{endedDrag()}`. */
export function installZoom(app) {
  const { state, els } = app;
  const gd = els.headHeatmap;
  let dragged = false;

  function setZoom(zoom) {
    if (JSON.stringify(zoom) === JSON.stringify(state.zoom)) return;
    state.zoom = zoom;
    app.update(); // a pooled head then asks for the exact cells of the block; an exact one has them already
  }

  /** The heatmap's axes (a head heatmap's, whose layout.meta counts its tokens), else null. */
  function headAxes() {
    const meta = gd.layout?.meta;
    const xa = gd.plotAxes?.xaxis;
    const ya = gd.plotAxes?.yaxis;
    return meta?.tokens && xa && ya ? { meta, xa, ya } : null;
  }

  const box = document.createElement("div");
  box.className = "zoom-box";
  box.hidden = true;
  document.body.append(box);
  let start = null;
  gd.addEventListener("mousedown", (ev) => {
    const axes = headAxes();
    if (!axes || ev.button !== 0) return;
    const r = gd.getBoundingClientRect();
    const x = ev.clientX - r.left - axes.xa.offset;
    const y = ev.clientY - r.top - axes.ya.offset;
    if (x < 0 || x > axes.xa.length || y < 0 || y > axes.ya.length) return;
    start = { ...axes, x0: ev.clientX, y0: ev.clientY, r };
    dragged = false;
    ev.preventDefault();
  });
  window.addEventListener("mousemove", (ev) => {
    if (!start) return;
    const { xa, ya, r } = start;
    // the box stays inside the plot area
    const cx = Math.min(r.left + xa.offset + xa.length, Math.max(r.left + xa.offset, ev.clientX));
    const cy = Math.min(r.top + ya.offset + ya.length, Math.max(r.top + ya.offset, ev.clientY));
    start.x1 = cx;
    start.y1 = cy;
    if (Math.abs(cx - start.x0) + Math.abs(cy - start.y0) < 6) return;
    Object.assign(box.style, {
      left: `${Math.min(cx, start.x0)}px`,
      top: `${Math.min(cy, start.y0)}px`,
      width: `${Math.abs(cx - start.x0)}px`,
      height: `${Math.abs(cy - start.y0)}px`,
    });
    box.hidden = false;
  });
  window.addEventListener("mouseup", () => {
    if (!start) return;
    const s0 = start;
    start = null;
    box.hidden = true;
    if (s0.x1 === undefined || Math.abs(s0.x1 - s0.x0) + Math.abs(s0.y1 - s0.y0) < 6) return;
    dragged = true;
    const { xa, ya, r, meta } = s0;
    const px = (cx) => xa.p2d(cx - r.left - xa.offset);
    const py = (cy) => ya.p2d(cy - r.top - ya.offset);
    // a cross map: its queries (the target's tokens) and keys (the source's) counted apart
    setZoom(visibleBlock([px(s0.x0), px(s0.x1)], [py(s0.y0), py(s0.y1)], meta.tokens, meta.keys ?? meta.tokens));
  });
  gd.addEventListener("dblclick", () => {
    if (headAxes()) setZoom(null);
  });
  return {
    /** Whether the last mouse-up ended a dragged box (asked once per click: the answer is then forgotten). */
    endedDrag() {
      const was = dragged;
      dragged = false;
      return was;
    },
  };
}

/** Let go of the zoomed block: the whole head again (another stack's tokens are not the block's). */
export function unzoom(state) {
  state.zoom = null;
}
