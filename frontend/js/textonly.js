// The views whose routes take no image (docs/API.md "Images": patching, two texts, two models, q · k),
// and the line each of them shows while an image is beside the text: it runs on the text alone, sends no
// image, and reads the text's own last token (the page's chosen token counts the image's prompt).

import { imageOf } from "./state.js";

/** Each such view's route, by the view's id. */
export const TEXT_ONLY = {
  patching: { route: "POST /api/patching", token: true },
  twotexts: { route: "POST /api/compare-texts", token: false },
  twomodels: { route: "POST /api/compare-models", token: false },
  qk: { route: "POST /api/neuron", token: true },
};

/** Whether the view `id` runs on the text alone now: it takes no image and an image is set. */
export const textOnlyNow = (state, id) => !!(TEXT_ONLY[id] && imageOf(state));

/** The view's line while an image is set, or null. */
export function textOnlyWords(state, id) {
  if (!textOnlyNow(state, id)) return null;
  const { route, token } = TEXT_ONLY[id];
  return (
    `This view runs on the text alone: ${route} takes no image, so the image beside the text is not sent and ` +
    "its numbers are those of the text without it" +
    (token ? ", at the text's own last token (the chosen token counts the image's prompt)." : ".")
  );
}

/** Show or hide the line at the top of the current view's panel (`els.panels`: the page's, none in the widget). */
export function drawTextOnly(state, els) {
  const panel = els.panels?.[state.view];
  if (!panel) return;
  let line = panel.querySelector(":scope > .image-textonly");
  const words = textOnlyWords(state, state.view);
  if (!words && !line) return;
  if (!line) {
    line = document.createElement("p");
    line.className = "image-textonly small";
    line.dataset.testid = "image-textonly";
    line.setAttribute("role", "note");
    panel.prepend(line);
  }
  line.hidden = !words;
  if (line.textContent !== (words ?? "")) line.textContent = words ?? "";
}
