// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.
// Each lesson is its own module (its controls, its request, its drawing); this entry wires the
// error banner and the reader of the server's limits they share, and starts them.

import * as bagOfWords from "./bow.js";
import * as softmax from "./softmax.js";
import * as variance from "./variance.js";
import { createSchemaReader } from "./openapi.js";
import { createErrorBanner } from "./parts.js";

/** The page: its banner and its one read of /openapi.json, handed to each lesson as it is installed. */
function startLessons() {
  const page = { banner: createErrorBanner(), requestSchema: createSchemaReader() };
  for (const lesson of [bagOfWords, softmax, variance]) lesson.install(page);
}

startLessons();
