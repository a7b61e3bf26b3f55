// The registry of views, grouped by the question a person asks: one line per tab. Each view
// module exports its `id` (the tab, the panel `#view-<id>`, the link's `view=`), its `label`
// (written here only: the tab is built from it, tabs.js), what it `needs` from the server
// ("grid", "detail": data.js ensureData asks for what is missing), optionally `need(state)` (its
// own questions, answers.js `question`: data.js askNeeded asks them before each render),
// `focus` (fields a long text's head is asked with for it), `hidden` (its tab starts hidden),
// `route` (the url of its own request where that route takes no image: textonly.js), `state`
// (its own fields and their defaults, merged into the page state by state.js createState),
// `link` ({read(params, out), write(state, params)}: its part of the URL hash), `draw(state, els)`
// (render.js calls it for the visible view: it draws from the answers in hand and asks nothing),
// `install(app)` (its own controls, wired once) and `was` (ids it had before, which old links
// still name: state.js parseHash).
//
// A new view is its module (views/, named as its id), one line here, and its panel in index.html.

import * as head from "./views/head.js";
import * as scaling from "./views/scaling.js";
import * as pipeline from "./views/pipeline.js";
import * as variance from "./views/variance.js";
import * as roles from "./views/roles.js";
import * as rollout from "./views/rollout.js";
import * as twotexts from "./views/twotexts.js";
import * as twomodels from "./views/twomodels.js";
import * as qk from "./views/qk.js";
import * as lines from "./views/lines.js";
import * as atlas from "./views/atlas.js";
import * as lens from "./views/lens.js";
import * as attribution from "./views/attribution.js";
import * as patching from "./views/patching.js";
import * as image from "./views/image.js";
import * as speech from "./views/speech.js";

// the tabs' order (and the arrow keys') is this one; the lessons page teaches the steps one by one
export const GROUPS = [
  { id: "head", label: "Look at a head", views: [head, lines, scaling, pipeline, variance, qk, image, speech] },
  { id: "explain", label: "Explain a prediction", views: [rollout, lens, attribution, patching] },
  { id: "pairs", label: "Side by side", views: [twotexts, twomodels] },
  { id: "survey", label: "Survey the heads", views: [roles, atlas] },
];

export const VIEWS = GROUPS.flatMap((g) => g.views);

export const VIEW_IDS = VIEWS.map((v) => v.id);

/** The view with this id (the head view for an unknown one). */
export const viewById = (id) => VIEWS.find((v) => v.id === id) ?? head;
