// The views whose route takes no image, or no conversation (subject.js `routeTakes`: patching, two texts, two models,
// q · k take no image; patching no conversation), and the line each of them shows while one is beside the text: it
// runs on the text alone, and reads the text's own last token (the page's chosen token counts the prompt). A view
// names its route (`route`) and whether it reads the chosen token (`readsToken`).

import { imageOf, messagesOf, routeTakes } from "./subject.js";

/** What `view` ({route}) leaves out now: "image" or "conversation" (its route does not take it), else null. */
function leftOut(state, view) {
  if (!view.route) return null;
  if (messagesOf(state) && !routeTakes(state, view.route, "messages")) return "conversation";
  if (imageOf(state) && !routeTakes(state, view.route, "image")) return "image";
  return null;
}

/** Whether `view` runs on the text alone now: its route takes no image (or conversation) and one is set. */
export const textOnlyNow = (state, view) => leftOut(state, view) !== null;

/** The view's line while an image (or a conversation) it cannot take is set, or null. */
export function textOnlyWords(state, view) {
  const what = leftOut(state, view);
  if (!what) return null;
  return (
    `This view runs on the text alone: POST ${view.route} takes no ${what}, so the ${what} beside the text is not ` +
    "sent and its numbers are those of the text without it" +
    (view.readsToken ? `, at the text's own last token (the chosen token counts the ${what}'s prompt).` : ".")
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
