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

/** Links into the explorer's head view at each of an encoder–decoder's stacks (GET /api/model `stacks`), by name. */
function stackLinks(m) {
  const words = { encoder: "its encoder", decoder: "its decoder", cross: "its cross-attention" };
  const link = (name) =>
    Object.assign(document.createElement("a"), { href: `./#view=head&stack=${name}`, textContent: words[name] });
  return Object.fromEntries(m.stacks.filter((s) => words[s.name]).map((s) => [s.name, link(s.name)]));
}

/**
 * Lesson 1's decoder or encoder, said of the model the server has loaded (its /api/model `architecture`); an
 * encoder–decoder's note has both, and self- against cross-attention, each a link to that stack in the explorer.
 */
async function pointAtModel(el) {
  const m = await getJSON("/api/model").catch(() => null);
  if (!el || !m?.architecture) return;
  if (m.architecture === "encoder-decoder" && m.stacks?.length > 1) {
    const { encoder: enc, decoder: dec, cross } = stackLinks(m);
    el.replaceChildren(
      `The model loaded now, ${m.name}, is an encoder–decoder. Encoder vs decoder: `,
      enc ?? "",
      " has no such triangle (every source token sees every other), ",
      dec ?? "",
      " has it (a target token sees only itself and the target before it). Self vs cross: those two are " +
        "self-attention, queries and keys from one text; ",
      cross ?? "",
      " takes its queries from the target and its keys and values from the source, the encoder's output.",
    );
  } else {
    el.textContent =
      m.architecture === "encoder"
        ? `The model loaded now, ${m.name}, is an encoder: it has no such triangle. Every token sees every ` +
          "other, the later ones too (BERT's way), so its patterns in the Head view fill the whole square."
        : `The model loaded now, ${m.name}, is a decoder: every one of its layers has this triangle, so a token ` +
          "sees only itself and the tokens before it.";
  }
  el.hidden = false;
}

startLessons();
