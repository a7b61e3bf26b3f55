// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.
// Each lesson is its own module (its controls, its request, its drawing); this entry wires the
// error banner and the reader of the server's limits they share, and starts them.

import { getJSON } from "../api.js";
import * as bagOfWords from "./bow.js";
import * as softmax from "./softmax.js";
import * as variance from "./variance.js";
import { createSchemaReader } from "./openapi.js";
import { createErrorBanner } from "./parts.js";

/** The page: its banner and its one read of /openapi.json, handed to each lesson as it is installed. */
function startLessons() {
  const page = { banner: createErrorBanner(), requestSchema: createSchemaReader() };
  for (const lesson of [bagOfWords, softmax, variance]) lesson.install(page);
  pointAtModel(document.getElementById("bow-model"));
}

/** Lesson 1's decoder or encoder, said of the model the server has loaded (its /api/model `architecture`). */
async function pointAtModel(el) {
  const m = await getJSON("/api/model").catch(() => null);
  if (!el || !m?.architecture) return;
  el.textContent =
    m.architecture === "encoder"
      ? `The model loaded now, ${m.name}, is an encoder: it has no such triangle. Every token sees every ` +
        "other, the later ones too (BERT's way), so its patterns in the Head view fill the whole square."
      : `The model loaded now, ${m.name}, is a decoder: every one of its layers has this triangle, so a token ` +
        "sees only itself and the tokens before it.";
  el.hidden = false;
}

startLessons();
