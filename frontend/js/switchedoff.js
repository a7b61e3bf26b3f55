// The set of switched-off heads (issue 18), `state.ablate`: [{layer, head}], sorted, no
// duplicates. Every /api/attention request carries it (requests.js) and the URL keeps it as
// `off=2.1,0.3`. Pure functions; the toggles and the card that change it are in ablation.js.

/** "2.1,0.3" -> [{layer: 0, head: 3}, {layer: 2, head: 1}] (sorted, no duplicates, bad parts dropped). */
export function parseOff(value) {
  const seen = new Map();
  for (const part of String(value ?? "").split(",")) {
    const m = /^(\d{1,4})\.(\d{1,4})$/.exec(part.trim());
    if (m) seen.set(`${m[1]}.${m[2]}`, { layer: Number(m[1]), head: Number(m[2]) });
  }
  return sortHeads([...seen.values()]);
}

/** The URL form of a switched-off set: "0.3,2.1"; "" when none. */
export const offParam = (ablate) => ablate.map((a) => `${a.layer}.${a.head}`).join(",");

export const sortHeads = (heads) => [...heads].sort((a, b) => a.layer - b.layer || a.head - b.head);

export const isOff = (ablate, layer, head) => ablate.some((a) => a.layer === layer && a.head === head);

/** The set with (layer, head) switched the other way. */
export function toggled(ablate, layer, head) {
  return isOff(ablate, layer, head)
    ? ablate.filter((a) => !(a.layer === layer && a.head === head))
    : sortHeads([...ablate, { layer, head }]);
}

/** Switch off `heads` ([{layer, head}] sorted, every /api/attention request carries them); [] switches all on. */
export function switchOff(state, heads) {
  state.ablate = heads;
}
