// The model's description (GET /api/model) and the head roles (GET /api/heads), asked at start and
// again when the server serves another model; the chosen head and the switched-off heads fitted to it. The parts of
// the subject each route takes (subject.js `loadRoutes`, read once) come in before the model: every request waits
// for the model (data.js), so none is built before the page knows what its route takes.

import { errorText, getJSON } from "./api.js";
import { addNotice, chooseHead, fitHead, showError } from "./state.js";
import { loadRoutes } from "./subject.js";
import { switchOff } from "./switchedoff.js";
import { fitRole } from "./views/roles.js";
import { fitStack, stackModel } from "./stacks.js";

/**
 * Clamp the chosen stack, then the chosen head into the loaded model (the stack's own layers and heads); a link that
 * named more gets a calm note.
 */
export function fitToModel(state) {
  if (!state.model) return;
  const stackNote = fitStack(state);
  const fit = fitHead(state, stackModel(state));
  chooseHead(state, fit.layer, fit.head);
  switchOff(state, fit.ablate);
  for (const note of [stackNote, fit.note]) addNotice(state, note);
}

export async function loadModel({ state, update }) {
  for (let attempt = 0; ; attempt++) {
    try {
      const [model] = await Promise.all([getJSON("/api/model"), loadRoutes(state)]);
      state.model = model;
      fitToModel(state);
      update();
      return;
    } catch (err) {
      if (attempt >= 60) {
        showError(state, errorText(err));
        update();
        return;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

export async function loadRoles({ state, update }) {
  try {
    state.roles = await getJSON("/api/heads");
    fitRole(state);
  } catch (err) {
    showError(state, `Head roles: ${errorText(err)}`);
  }
  update();
}
