// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.
// Each lesson is its own module (its controls, its request, its drawing); this entry wires the
// error banner they share and starts them.

import * as bagOfWords from "./lesson_bow.js";
import * as softmax from "./lesson_softmax.js";
import * as variance from "./lesson_variance.js";
import { installErrorBanner } from "./lessonparts.js";

installErrorBanner();
for (const lesson of [bagOfWords, softmax, variance]) lesson.install();
