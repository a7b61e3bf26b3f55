// The anywidget module of attnscope.show(): a loader, the same for every widget.
//
// It holds no drawing code. On the first render in a page it asks the kernel (one custom
// message) for the page's own modules (frontend/js/**/*.js, the files the web app serves) and,
// when the page has no Plotly yet, for plotly.min.js from the installed plotly package. Each
// module becomes a blob: URL whose relative imports ("./x.js", "../draw/x.js") point at its
// dependencies' blob URLs, so the browser links them as real ES modules, offline. The loaded
// modules and Plotly are kept on globalThis under the modules' hash: several widgets in a page
// (or a widget shown twice) load them once. app/notebook/assets.py (widget_esm) replaces the hash
// below when it hands this module to anywidget.

const HASH = "__ATTNSCOPE_MODULES_HASH__";
const KEY = `__attnscope_widget_${HASH}`;
const WAIT_MS = 120000; // a busy kernel answers late; after this the next render asks again

function textOf(buffer) {
  return new TextDecoder().decode(buffer);
}

/** Run Plotly's UMD bundle as a classic script: it sets globalThis.Plotly once. */
function runPlotly(buffer) {
  if (globalThis.Plotly) return Promise.resolve(globalThis.Plotly);
  return new Promise((resolve, reject) => {
    const url = URL.createObjectURL(new Blob([buffer], { type: "text/javascript" }));
    const script = document.createElement("script");
    // a page with an AMD loader (RequireJS) would make the bundle register there instead
    const amd = globalThis.define;
    if (amd && amd.amd) globalThis.define = undefined;
    const done = (ok) => {
      if (amd && amd.amd) globalThis.define = amd;
      URL.revokeObjectURL(url);
      if (ok && globalThis.Plotly) resolve(globalThis.Plotly);
      else reject(new Error("plotly.min.js did not load"));
    };
    script.onload = () => done(true);
    script.onerror = () => done(false);
    script.src = url;
    document.head.append(script);
  });
}

// a relative import: "./x.js", "../x.js", "./views/x.js"
const IMPORT = /((?:from|import)\s*)["'](\.\.?\/[\w./-]+\.js)["']/g;

/** The path under js/ that `spec`, imported by the module at `importer` ("views/head.js"), names. */
function resolve(importer, spec) {
  const parts = importer.split("/").slice(0, -1);
  for (const part of spec.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== ".") parts.push(part);
  }
  return parts.join("/");
}

/** The modules (path under js/ -> source) linked through blob: URLs; resolves to the entry module. */
function linkModules(sources, entry) {
  const urls = {};
  const link = (name, seen) => {
    if (urls[name]) return urls[name];
    if (seen.has(name)) throw new Error(`import cycle through ${name}`);
    if (!(name in sources)) throw new Error(`module ${name} was not sent`);
    seen.add(name);
    const code = sources[name].replace(IMPORT, (_, kw, spec) => `${kw}"${link(resolve(name, spec), seen)}"`);
    seen.delete(name);
    urls[name] = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
    return urls[name];
  };
  return import(/* webpackIgnore: true */ link(entry, new Set()));
}

/** Ask the kernel for the assets once per page; every widget awaits the same promise. */
function assets(model) {
  if (!globalThis[KEY]) {
    globalThis[KEY] = new Promise((resolve, reject) => {
      const wantPlotly = !globalThis.Plotly;
      const timer = setTimeout(() => {
        model.off("msg:custom", onMessage);
        reject(new Error("the kernel did not send attnscope's scripts: is it running? Run the cell again."));
      }, WAIT_MS);
      async function onMessage(msg, buffers) {
        if (!msg || msg.type !== "assets") return;
        clearTimeout(timer);
        model.off("msg:custom", onMessage);
        try {
          if (msg.plotly) await runPlotly(buffers[1]);
          resolve(await linkModules(JSON.parse(textOf(buffers[0])), "widget.js"));
        } catch (err) {
          reject(err);
        }
      }
      model.on("msg:custom", onMessage);
      model.send({ type: "assets", plotly: wantPlotly });
    }).catch((err) => {
      delete globalThis[KEY];
      throw err;
    });
  }
  return globalThis[KEY];
}

async function render({ model, el }) {
  el.classList.add("attnscope-widget");
  el.textContent = "attnscope: loading…";
  try {
    const widget = await assets(model);
    return widget.render({ model, el });
  } catch (err) {
    el.textContent = `attnscope: ${err && err.message ? err.message : err}`;
    return undefined;
  }
}

export default { render };
