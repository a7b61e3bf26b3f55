// The registry of views: one line per tab. Each view module exports its `id` (the tab, the
// panel `#view-<id>`, the link's `view=`), its `label`, what it `needs` from the server ("grid",
// "detail": data.js ensureData asks for what is missing), optionally `focus` (fields a long
// text's head is asked with for it), `draw(state, els)` (render.js calls it for the visible
// view) and `install(app)` (its own controls, wired once by main.js). The tabs, the link
// parsing, the data fetching and the render pass all read this list.
//
// A new view is its module, one line here, and its tab and panel in index.html.

import * as head from "./views/head.js";
import * as compare from "./views/compare.js";
import * as pipeline from "./views/pipeline.js";
import * as variance from "./views/variance.js";
import * as roles from "./views/roles.js";
import * as rollout from "./views/rollout.js";
import * as texts from "./views/texts.js";
import * as neuron from "./views/neuron.js";
import * as lines from "./views/lines.js";
import * as atlas from "./views/atlas.js";

export const VIEWS = [head, lines, compare, pipeline, variance, roles, rollout, texts, neuron, atlas];

export const VIEW_IDS = VIEWS.map((v) => v.id);

/** The view with this id (the head view for an unknown one). */
export const viewById = (id) => VIEWS.find((v) => v.id === id) ?? head;
