// The views whose route takes no image (subject.js `ROUTES`: patching, two texts, two models, q · k), and the
// line each of them shows while an image is beside the text: it runs on the text alone, sends no image, and reads
// the text's own last token (the page's chosen token counts the image's prompt). A view names its route (`route`)
// and whether it reads the chosen token (`readsToken`).

import { imageOf, routeTakes } from "./subject.js";

/** Whether `view` ({route}) runs on the text alone now: its route takes no image and an image is set. */
export const textOnlyNow = (state, view) => Boolean(view.route && !routeTakes(view.route, "image") && imageOf(state));

/** The view's line while an image is set, or null. */
export function textOnlyWords(state, view) {
  if (!textOnlyNow(state, view)) return null;
  return (
    `This view runs on the text alone: POST ${view.route} takes no image, so the image beside the text is not sent ` +
    "and its numbers are those of the text without it" +
    (view.readsToken ? ", at the text's own last token (the chosen token counts the image's prompt)." : ".")
  );
}

/** Show or hide the line at the top of `view`'s panel (`els.panels`: the page's, none in the widget). */
export function drawTextOnly(state, els, view) {
  const panel = els.panels?.[view.id];
  if (!panel) return;
  let line = panel.querySelector(":scope > .image-textonly");
  const words = textOnlyWords(state, view);
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
