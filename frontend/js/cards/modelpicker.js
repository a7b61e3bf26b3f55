// The model picker in the top bar: the models on the server's machine (GET /api/models: its Hugging
// Face cache, Ollama, LM Studio, the model it started with), one of them served. Choosing another
// asks the server to load it (POST /api/model, 202); the current model keeps answering meanwhile,
// the picker says what is loading, and once the server serves the new one the page forgets every
// answer of the old one and asks again. Hidden while the machine holds a single model.

import { errorText, getJSON, postJSON } from "../api.js";
import { mount, setHidden, setText } from "../dom.js";

const POLL_MS = 500;
const WAIT_MS = 20 * 60 * 1000; // a load taking longer than this is not waited for

/** The picker's options: every openable model, by name, with its source and size in the tooltip. */
export function pickerOptions(listing) {
  return (listing?.models ?? [])
    .filter((m) => m.status === "ok")
    .map((m) => ({
      name: m.name,
      title: `${m.source}: ${m.path ?? ""}${m.size_bytes ? ` (${(m.size_bytes / 2 ** 20).toFixed(1)} MiB)` : ""}`,
    }));
}

/** Install the picker after the model badge; `app`: {state, els, update, data}. Returns `{draw(state)}`. */
export function installModelPicker(app) {
  const { state, els } = app;
  const { root, parts } = mount(
    "div",
    "model-picker",
    "model-picker",
    `<label class="small">model <select data-testid="model-picker-select" aria-label="Model to serve"></select></label>
    <span class="small" data-testid="model-picker-status" aria-live="polite"></span>`,
  );
  els.modelBadge.before(root);
  const { "model-picker-select": select, "model-picker-status": status } = parts;
  let listing = null;
  let loading = null; // the name asked for, until the server serves it or says why not

  async function list() {
    try {
      listing = await getJSON("/api/models");
    } catch {
      listing = null; // an older server, or none yet: no picker
    }
    app.update();
  }

  async function poll(name) {
    for (let waited = 0; ; waited += POLL_MS) {
      if (waited > WAIT_MS) {
        loading = null;
        state.error =
          `${name} is still loading after ${WAIT_MS / 60000} minutes; the page stopped waiting (GET ` +
          `/api/models says when it is served).`;
        app.update();
        return;
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
      try {
        listing = await getJSON("/api/models");
      } catch {
        continue; // the server is busy: ask again
      }
      if (listing.serving === name) {
        loading = null;
        await app.data.modelChanged();
        return;
      }
      if (listing.switch?.name === name && listing.switch.status === "failed") {
        loading = null;
        state.error = `Could not load ${name}: ${listing.switch.error}. Still serving ${listing.serving}.`;
        app.update();
        return;
      }
    }
  }

  select.addEventListener("change", async () => {
    const name = select.value;
    if (!name || name === listing?.serving) return;
    loading = name;
    app.update();
    try {
      const answer = await postJSON("/api/model", { name });
      if (answer.status === "serving") {
        loading = null;
        await app.data.modelChanged();
        return;
      }
      await poll(name);
    } catch (err) {
      loading = null;
      state.error = `Could not switch to ${name}: ${errorText(err)}`;
      app.update();
    }
  });

  function draw() {
    const options = pickerOptions(listing);
    setHidden(root, options.length < 2);
    const sig = JSON.stringify(options);
    if (select.dataset.signature !== sig) {
      select.dataset.signature = sig;
      select.replaceChildren(
        ...options.map((o) => {
          const opt = document.createElement("option");
          opt.value = o.name;
          opt.textContent = o.name;
          opt.title = o.title;
          return opt;
        }),
      );
    }
    const shown = loading ?? listing?.serving ?? "";
    if (select.value !== shown && document.activeElement !== select) select.value = shown;
    select.disabled = loading !== null;
    setText(
      status,
      loading ? `loading ${loading}… (${listing?.serving ?? "the current model"} answers meanwhile)` : "",
    );
  }

  list();
  return { draw };
}
