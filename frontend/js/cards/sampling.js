// Continue's sampling settings (cards/generate.js): read from a link (`sample=1&topk=40&topp=0.9&seed=7`, state.js
// parseHash) and checked as typed, each bad value named in words.

/** Continue's sampling settings from a link (`sample=1&topk=40&topp=0.9&seed=7`); what is bad is left out. */
export function parseSampling(params) {
  const raw = {};
  for (const [key, name] of [
    ["topk", "top_k"],
    ["topp", "top_p"],
    ["seed", "seed"],
  ])
    if (params.has(key)) raw[name] = params.get(key);
  return checkSampling(raw).sampling;
}

const SAMPLING_RULES = {
  top_k: {
    parse: (v) => Number(v),
    ok: (v) => Number.isInteger(v) && v >= 1 && v <= 2 ** 31 - 1,
    words: "a whole number from 1 to 2147483647",
  },
  top_p: {
    parse: (v) => Number(v),
    ok: (v) => Number.isFinite(v) && v > 0 && v <= 1,
    words: "a number above 0 and at most 1",
  },
  seed: {
    parse: (v) => Number(v),
    ok: (v) => Number.isInteger(v) && v >= 0 && v <= Number.MAX_SAFE_INTEGER,
    words: "a whole number from 0 to 9007199254740991",
  },
};

/**
 * Sampling settings as typed (strings; "" or absent: not set) -> `{sampling, problems}`: each
 * valid value kept, each bad one left out and named in `problems`, e.g. "top-p 1.5 is not a
 * number above 0 and at most 1" (Continue refuses to start while there is one).
 */
export function checkSampling(raw) {
  const sampling = { on: true, top_k: null, top_p: null, seed: null };
  const problems = [];
  for (const [name, rule] of Object.entries(SAMPLING_RULES)) {
    const text = String(raw[name] ?? "").trim();
    if (text === "") continue;
    const value = rule.parse(text);
    if (rule.ok(value)) sampling[name] = value;
    else problems.push(`${name.replace("_", "-")} ${text} is not ${rule.words}`);
  }
  return { sampling, problems };
}
