// The image beside the text (an image-text model only: GET /api/model `vision`): drop one on the
// field, paste one anywhere on the page, or pick a file. It is checked against the server's
// `image_limits` (bytes, then pixels) and its format before anything is sent: an image over a
// limit is refused here in one line naming the limit; one the server then refuses (it cannot decode
// it) is taken out and refused here too. The image lives in the state (`state.image`), never in the
// link: the field says so.

import { byId, dataUrl, setHidden, setSource, setText } from "../dom.js";

/** The formats the server reads (docs/API.md "Images"). */
export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];

const FIELD = `
  <span class="field-label">Image</span>
  <div id="image-drop" class="image-drop" data-testid="image-drop" tabindex="0">
    <img id="image-thumb" class="image-thumb" alt="The image sent with the text" hidden />
    <span id="image-drop-words" class="muted small">Drop or paste an image here, or</span>
    <label class="btn small"><input type="file" id="image-file" data-testid="image-file"
      accept="${IMAGE_TYPES.join(",")}" hidden />pick one</label>
    <button type="button" id="image-remove" class="btn small" data-testid="image-remove" hidden>remove</button>
  </div>
  <p id="image-refusal" class="image-refusal small" data-testid="image-refusal" role="alert" hidden></p>
  <p class="muted small" data-testid="image-note">Every tab reads it with the text, the image's tokens one band
    that expands, but those whose routes take no image (patching, two texts, two models, q · k, a selection of the
    lines): they read the text alone and say so. A link does not carry the image: it stays on this page only.</p>`;

const fmt = (n) => n.toLocaleString("en-US");

/** The image's width and height, read by the browser; null when it cannot read it. */
function imageSize(url) {
  return new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve({ width: img.naturalWidth, height: img.naturalHeight });
    img.onerror = () => resolve(null);
    img.src = url;
  });
}

/**
 * `file` checked against `limits` (`image_limits`): `{image}` ({id, data, name, bytes, width, height}; `id`, the
 * page's number for this image: the answers are keyed by it, never by its bytes), or `{refusal}`, one line naming
 * what is over which limit.
 */
export async function readImage(file, limits, id) {
  const name = file.name || "the pasted image";
  if (!IMAGE_TYPES.includes(file.type))
    return { refusal: `image: ${name} is ${file.type || "not an image"}; the server reads PNG, JPEG, WebP or GIF.` };
  if (limits && file.size > limits.max_bytes)
    return {
      refusal:
        `image: ${name} is ${fmt(file.size)} bytes; this server takes at most ${fmt(limits.max_bytes)} bytes ` +
        "(image_limits.max_bytes).",
    };
  const data = await dataUrl(file);
  const size = await imageSize(data);
  if (!size) return { refusal: `image: ${name} could not be read as an image.` };
  const pixels = size.width * size.height;
  if (limits && pixels > limits.max_pixels)
    return {
      refusal:
        `image: ${name} is ${size.width} × ${size.height} = ${fmt(pixels)} pixels; this server takes at most ` +
        `${fmt(limits.max_pixels)} pixels (image_limits.max_pixels).`,
    };
  return { image: { id, data, name, bytes: file.size, ...size } };
}

/**
 * A request refused for its image (a 4xx naming `image`, e.g. a PNG cut short that the browser drew in part):
 * the image is taken out and the field says the server's why, as for a file refused here; true then, and the
 * caller asks again for the text alone. False for any other failure.
 */
export function dropRefusedImage(state, err) {
  const items = err?.status >= 400 && err.status < 500 && Array.isArray(err.detail) ? err.detail : [];
  const item = items.find((d) => Array.isArray(d?.loc) && d.loc[0] === "body" && d.loc[1] === "image");
  if (!item) return false;
  if (state.image) {
    state.imageRefusal = `image: ${state.image.name} was refused by the server: ${item.msg}`;
    state.image = null; // the Image view's chosen query (views/image.js) was this image's: it goes with it
  }
  return true;
}

/** Take `file` as the image numbered `id` (or say why not); `app`: {state, update}. */
async function take(app, file, id) {
  const { state } = app;
  const { image, refusal } = await readImage(file, state.model?.image_limits, id);
  state.imageRefusal = refusal ?? null;
  state.image = image ?? null; // a refused image leaves none: nothing drawn from the one before
  if (image && state.view !== "image") app.setView?.("image");
  app.update();
  app.refreshNow?.(); // every answer of the text alone is another prompt's now: ask again
}

/** The field in `#image-field`, wired once; returns the card `{draw(state)}` that shows it on a vision model. */
export function installImagePick(app) {
  const field = byId("image-field");
  field.innerHTML = FIELD;
  const input = byId("image-file");
  const drop = byId("image-drop");
  let taken = 0; // each file taken gets its own number
  const takeFile = (file) => take(app, file, ++taken);
  input.addEventListener("change", () => {
    if (input.files[0]) takeFile(input.files[0]);
    input.value = "";
  });
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    const file = [...(e.dataTransfer?.files ?? [])][0];
    if (file) takeFile(file);
  });
  document.addEventListener("paste", (e) => {
    if (!app.state.model?.vision) return;
    const file = [...(e.clipboardData?.files ?? [])].find((f) => f.type.startsWith("image/"));
    if (!file) return; // text pastes into the text box as ever
    e.preventDefault();
    takeFile(file);
  });
  byId("image-remove").addEventListener("click", () => {
    Object.assign(app.state, { image: null, imageRefusal: null });
    app.update();
    app.refreshNow?.();
  });
  return { draw: (state) => drawField(state, field) };
}

function drawField(state, field) {
  const vision = !!state.model?.vision;
  setHidden(field, !vision);
  const tab = byId("tab-image");
  if (tab && tab.hidden === vision) tab.hidden = !vision;
  if (!vision) return;
  const thumb = byId("image-thumb");
  const src = state.image?.data ?? "";
  setSource(thumb, src);
  setHidden(thumb, !src);
  setHidden(byId("image-remove"), !src);
  setText(
    byId("image-drop-words"),
    src ? `${state.image.name} · ${state.image.width} × ${state.image.height} px` : "Drop or paste an image here, or",
  );
  setText(byId("image-refusal"), state.imageRefusal ?? "");
  setHidden(byId("image-refusal"), !state.imageRefusal);
}
