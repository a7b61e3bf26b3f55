// The model picker in the top bar: the models on the server's machine (GET /api/models: its Hugging
// Face cache, Ollama, LM Studio, the model it started with), one of them served. Choosing another
// asks the server to load it (POST /api/model, 202); the current model keeps answering meanwhile,
// the picker says what is loading, and once the server serves the new one the page forgets every
// answer of the old one and asks again. Hidden while the machine holds a single model.

import { errorText, getJSON, postJSON } from "../api.js";
import { mount, setHidden, setText } from "../dom.js";
import { showError } from "../state.js";

const POLL_MS = 500;
const WAIT_MS = 20 * 60 * 1000; // a load taking longer than this is not waited for

/**
 * The picker's options: every openable model, by name, with its source and size in the tooltip; with
 * `others`, all but the one the server marks `served` (a second model to compare it with).
 */
export function pickerOptions(listing, others = false) {
  return (listing?.models ?? [])
    .filter((m) => m.status === "ok" && !(others && m.served))
    .map((m) => ({
      name: m.name,
      title: `${m.source}: ${m.path ?? ""}${m.size_bytes ? ` (${(m.size_bytes / 2 ** 20).toFixed(1)} MiB)` : ""}`,
    }));
}

/**
 * Fill a model <select> with `options` ({name, title}), only when they change; an option with no
 * name reads `blank`.
 */
export function fillModelOptions(select, options, blank = "") {
  const sig = JSON.stringify(options);
  if (select.dataset.signature === sig) return;
  select.dataset.signature = sig;
  select.replaceChildren(
    ...options.map((o) => {
      const opt = document.createElement("option");
      opt.value = o.name;
      opt.textContent = o.name || blank;
      opt.title = o.title;
      return opt;
    }),
  );
}

/** Ask for the machine's models into `picker.listing` (none from an older server, or none yet: no picker). */
async function listModels(picker) {
  try {
    picker.listing = await getJSON("/api/models");
  } catch {
    picker.listing = null;
  }
  picker.app.update();
}

/** Wait for the server to serve `name`: then the page asks again; a failed load or WAIT_MS says why not. */
async function pollSwitch(picker, name) {
  const { app } = picker;
  for (let waited = 0; ; waited += POLL_MS) {
    if (waited > WAIT_MS) {
      picker.loading = null;
      showError(
        app.state,
        `${name} is still loading after ${WAIT_MS / 60000} minutes; the page stopped waiting (GET ` +
          `/api/models says when it is served).`,
      );
      app.update();
      return;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
    let listing;
    try {
      listing = picker.listing = await getJSON("/api/models");
    } catch {
      continue; // the server is busy: ask again
    }
    if (listing.serving === name) {
      picker.loading = null;
      await app.data.modelChanged();
      return;
    }
    if (listing.switch?.name === name && listing.switch.status === "failed") {
      picker.loading = null;
      showError(app.state, `Could not load ${name}: ${listing.switch.error}. Still serving ${listing.serving}.`);
      app.update();
      return;
    }
  }
}

/** Ask the server to serve the model chosen in the picker, and follow its load. */
async function switchModel(picker) {
  const { app, select } = picker;
  const name = select.value;
  if (!name || name === picker.listing?.serving) return;
  picker.loading = name;
  app.update();
  try {
    const answer = await postJSON("/api/model", { name });
    if (answer.status === "serving") {
      picker.loading = null;
      await app.data.modelChanged();
      return;
    }
    await pollSwitch(picker, name);
  } catch (err) {
    picker.loading = null;
    showError(app.state, `Could not switch to ${name}: ${errorText(err)}`);
    app.update();
  }
}

/** The picker as the listing and the load on its way say: hidden under two models. */
function drawPicker({ root, select, status, listing, loading }) {
  const options = pickerOptions(listing);
  setHidden(root, options.length < 2);
  fillModelOptions(select, options);
  const shown = loading ?? listing?.serving ?? "";
  if (select.value !== shown && document.activeElement !== select) select.value = shown;
  select.disabled = loading !== null;
  setText(
    status,
    loading ? `loading ${loading}… (${listing?.serving ?? "the current model"} answers meanwhile)` : "",
  );
}

/** Install the picker after the model badge; `app`: {state, els, update, data}. Returns `{draw(state)}`. */
export function installModelPicker(app) {
  const { root, parts } = mount(
    "div",
    "model-picker",
    "model-picker",
    `<label class="small">model <select data-testid="model-picker-select" aria-label="Model to serve"></select></label>
    <span class="small" data-testid="model-picker-status" aria-live="polite"></span>`,
  );
  app.els.modelBadge.before(root);
  const { "model-picker-select": select, "model-picker-status": status } = parts;
  // `loading`: the name asked for, until the server serves it or says why not
  const picker = { app, root, select, status, listing: null, loading: null };
  select.addEventListener("change", () => switchModel(picker));
  listModels(picker);
  return { draw: () => drawPicker(picker) };
}
