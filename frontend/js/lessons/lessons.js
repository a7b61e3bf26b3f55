// The lessons page: three small, seeded experiments computed by the server's lesson endpoints.
// Each lesson is its own module (its controls, its request, its drawing); this entry wires the
// error banner they share and starts them.

import * as bagOfWords from "./bow.js";
import * as softmax from "./softmax.js";
import * as variance from "./variance.js";
import { installErrorBanner } from "./parts.js";

installErrorBanner();
for (const lesson of [bagOfWords, softmax, variance]) lesson.install();
