// The server's own limits on what a request may hold, read from the OpenAPI document it serves
// at /openapi.json (`maxItems`, `maximum`, … of each request schema), so the page copies none.

import { getJSON } from "../api.js";

/**
 * The page's reader of /openapi.json, fetched once for every caller: `(name)` resolves to the JSON schema of the
 * request model `name` (e.g. "SoftmaxScalingRequest"); null when the document cannot be had or does not name it:
 * the server's 422 answer then names the limit.
 */
export function createSchemaReader() {
  let asked = null; // the one fetch of /openapi.json
  return async function requestSchema(name) {
    asked ??= getJSON("/openapi.json").catch(() => null);
    const spec = await asked;
    return spec?.components?.schemas?.[name] ?? null;
  };
}
