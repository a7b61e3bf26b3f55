// Writing to the page only where something changed: texts, attributes, Plotly figures, and the
// few pieces of markup a card builds for itself. Every view and card draws through these.

/** The element with this id. */
export const byId = (id) => document.getElementById(id);

/** Set an element's text only when it changes: each write would invalidate the page's layout. */
export function setText(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}

/** Set an attribute only when it changes. */
export function setAttr(el, name, value) {
  if (el.getAttribute(name) !== value) el.setAttribute(name, value);
}

/** Set an element's property (`disabled`, `title`, `max`, ...) only when it changes: an equal write still restyles. */
export function setProp(el, name, value) {
  if (el && el[name] !== value) el[name] = value;
}

/** Show or hide an element, touching it only when that changes. */
export function setHidden(el, hidden) {
  if (el && el.hidden !== hidden) el.hidden = hidden;
}

// Stable ids for API answers, so a figure can tell whether its data changed. The id lives on the answer it
// names (a hidden property), never in this module: 64 random bits, drawn once per answer.
const ID = Symbol("attnscope.id");
export function idOf(obj) {
  if (!obj) return 0;
  if (!Object.hasOwn(obj, ID)) {
    const [hi, lo] = crypto.getRandomValues(new Uint32Array(2));
    Object.defineProperty(obj, ID, { value: `${hi.toString(36)}.${lo.toString(36)}` });
  }
  return obj[ID];
}

function plotConfig(filename) {
  return {
    responsive: true,
    displaylogo: false,
    showSendToCloud: false,
    showEditInChartStudio: false,
    displayModeBar: "hover",
    modeBarButtonsToRemove: [
      "select2d",
      "lasso2d",
      "autoScale2d",
      "toggleSpikelines",
      "hoverClosestCartesian",
      "hoverCompareCartesian",
      "sendChartToCloud",
    ],
    toImageButtonOptions: { format: "png", filename, scale: 2 },
    // for papers: the same figure as vector graphics (Plotly draws it offline, in the page)
    modeBarButtonsToAdd: [
      {
        name: "Download as SVG",
        icon: window.Plotly?.Icons?.camera,
        click: (gd) =>
          window.Plotly.downloadImage(gd, { format: "svg", filename, width: gd.clientWidth, height: gd.clientHeight }),
      },
    ],
  };
}

/**
 * Plotly.react `el` with `build()` unless it already shows `signature`; true when it drew. Without a
 * `datarevision` in the layout, Plotly.react reads an array again when it is another array than the drawn one.
 */
export function drawPlot(el, signature, build, filename) {
  const Plotly = window.Plotly;
  if (!Plotly || el.dataset.signature === signature) return false;
  const start = performance.now();
  const fig = build();
  const built = performance.now();
  // the plot's config is kept on it while its file name stays: Plotly.react compares the config it is given with
  // the plot's, functions by identity, and starts the plot anew (Plotly.newPlot, every part rebuilt) on a new one
  if (el.plotConfig?.toImageButtonOptions.filename !== filename) el.plotConfig = plotConfig(filename);
  Plotly.react(el, fig.data, fig.layout, el.plotConfig);
  performance.measure(`attnscope:build:${el.id}`, { start, end: built });
  performance.measure(`attnscope:draw:${el.id}`, { start, end: performance.now() });
  el.dataset.signature = signature;
  el.classList.add("drawn");
  return true;
}

/**
 * A card's markup as an element: `tag` with `className`, `testid` and the inner `html`, and
 * `parts`, its descendants by their data-testid ("effects-run" -> the button).
 */
export function mount(tag, className, testid, html) {
  const root = document.createElement(tag);
  root.className = className;
  root.dataset.testid = testid;
  root.innerHTML = html;
  const parts = Object.fromEntries([...root.querySelectorAll("[data-testid]")].map((el) => [el.dataset.testid, el]));
  return { root, parts };
}

/** Save `blob` as the file `name` (a download the browser asks nothing about). */
export function downloadBlob(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Fill a <select> with options "`prefix` 0" … "`prefix` n−1" (only when their number changes)
 * and choose `value`. */
export function fillIndexSelect(select, n, prefix, value) {
  const values = Array.isArray(n) ? n : Array.from({ length: n }, (_, i) => i); // n: a count, or the numbers themselves
  if (select.dataset.values !== values.join(",")) {
    select.dataset.values = values.join(",");
    select.replaceChildren(
      ...values.map((i) => {
        const o = document.createElement("option");
        o.value = String(i);
        o.textContent = `${prefix} ${i}`;
        return o;
      }),
    );
  }
  if (select.value !== String(value)) select.value = String(value);
}

/** Call `handler(point, el)` for Plotly clicks on `el`, bound once Plotly has drawn into it (its `on` exists then). */
export function onPlotClick(el, handler) {
  const bind = () => {
    if (!el.on || el.dataset.clickBound) return;
    el.dataset.clickBound = "1";
    el.on("plotly_click", (ev) => {
      const pt = ev?.points?.[0];
      if (pt) handler(pt, el);
    });
  };
  new MutationObserver(bind).observe(el, { childList: true });
  bind();
}

/** A file's bytes as a `data:` URL (what the API's image and audio fields take). */
export const dataUrl = (blob) =>
  new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });

/** Point a media element (an <img>, an <audio>) at `src`, or at nothing when it is "": only when it changed. */
export function setSource(el, src) {
  if (el.getAttribute("src") === src) return;
  if (src) el.src = src;
  else el.removeAttribute("src");
}
