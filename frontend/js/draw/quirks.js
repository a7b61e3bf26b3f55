// Every family's quirk, drawn from its row of /api/model `fields` (model/fields.py `Drawn`) and the answer alone:
// per-query strips beside the pattern (`sits: "row"`), numbers beside the head (`"head"`), the parts of a head
// (`"parts"`: panels under the pattern and terms of each cell's hover), and the words each quirk says where it
// stands (`words`). No other page file names a family's quirk: a new quirk is a row of the server's table.
// The token-axis bands (`"band"`) are quirkbands.js.

import { SIGNED_SCALE, WEIGHT_SCALE, baseLayout, maskNull, signedRange, tokenAxis, tokenMargins } from "./figures.js";
import { weightColorbar } from "./headframe.js";

/** The model's quirks: the rows of its field table that say how they are drawn. */
export const quirks = (model) => (model?.fields ?? []).filter((f) => f.sits);

/** `template` with its `{name}`s filled from `values`: a number to 3 decimals, a word as it is; others kept. */
export function fill(template, values) {
  return template.replace(/\{(\w+)\}/g, (whole, name) => {
    const v = values[name];
    if (v == null) return whole;
    return typeof v === "number" ? v.toFixed(3) : String(v);
  });
}

/** The layer's quirk numbers by name (a per-head list: head `head`'s), as the answer's `layer` holds them. */
export function layerNumbers(model, layer, head) {
  const out = {};
  for (const f of quirks(model)) {
    const v = f.at === "layer" ? layer?.[f.name] : null;
    if (v == null) continue;
    out[f.name] = f.kind === "heads" ? v[head ?? layer.heads?.[0]?.head ?? 0] : v;
  }
  return out;
}

/** The quirks a layer (and a head's fields, `fields`) holds, in the table's order. */
function present(model, layer, fields) {
  return quirks(model).filter((f) => (f.at === "layer" ? layer?.[f.name] != null : fields?.[f.name] != null));
}

/** A row field's own numbers for its words: its smallest and largest value. */
function ownNumbers(f, fields) {
  if (f.kind !== "rows" || !fields?.[f.name]) return {};
  const values = Array.from(fields[f.name]);
  return { min: Math.min(...values), max: Math.max(...values) };
}

/**
 * The sentences the quirks present say at `context` (a key of their `words`: rows, pooled, sums, steps, stats,
 * grid, lines, cell, ...), filled with the layer's numbers, joined; "" where none says anything there.
 * `fields`: the chosen head's fields (its rows); `head`: its number (a per-head list's entry).
 */
export function quirkWords(model, context, { layer, fields = null, head = null } = {}) {
  const numbers = layerNumbers(model, layer, head);
  return present(model, layer, fields)
    .filter((f) => f.words?.[context])
    .map((f) => fill(f.words[context], { ...numbers, ...ownNumbers(f, fields) }))
    .join("");
}

/** The same sentences over every layer of an answer (the grid's caption): each quirk's once. */
export function layersWords(model, context, layers) {
  const said = quirks(model).filter((f) => f.words?.[context] && layers.some((l) => l[f.name] != null));
  return said.map((f) => fill(f.words[context], {})).join("");
}

/** Whether the layer's pattern is signed (a quirk of it, `signed`, says so). */
export const signedLayer = (model, layer) =>
  quirks(model).some((f) => f.signed && f.at === "layer" && layer?.[f.name] != null);

/** Whether the model's patterns are signed: a signing quirk's `/api/model` flag is set. */
export const signedModel = (model) => quirks(model).some((f) => f.signed && f.flag && model?.[f.flag]);

/** What the model's heads are called in its badge ("heads", or a quirk's word for them). */
export const headsNoun = (model) =>
  quirks(model).find((f) => f.words?.heads && f.flag && model?.[f.flag])?.words.heads ?? "heads";

/** What a cell of the layer's grid thumbnail is ("weight", or a quirk's word: a signed map's |weight|). */
export const cellWord = (model, layer) => quirkWords(model, "cell", { layer }) || "weight";

/** The colour bar's title of the layer's map: a quirk's, or null (the plain weights'). */
export function colorbarTitle(model, layer, head) {
  return quirkWords(model, "colorbar", { layer, head }) || null;
}

/** What more every row's softmax sees than the keys (the layer's quirks' `keys`). */
export const extraKeys = (model, layer) =>
  present(model, layer, null)
    .map((f) => f.words?.keys)
    .filter(Boolean);

/**
 * The head's quirk numbers as its title writes them: the layer's ("label 0.812"). An answer's own numbers beside
 * the head (a conversation's share of each message, `span_mass`) are not repeated here: head/spans.js draws them in
 * their box under the map, in their roles' colours.
 */
export function headNumbers(model, layer, head) {
  const numbers = layerNumbers(model, layer, head);
  return quirks(model)
    .filter((f) => f.sits === "head" && f.at === "layer" && numbers[f.name] != null)
    .map((f) => `${f.label} ${fill("{v}", { v: numbers[f.name] })}`);
}

/**
 * The head's per-query strips (`sits: "row"`, those its fields hold): `{name, label, values, hover}`, the hover a
 * Plotly template of the strip's cell (its value `%{z}`), each on the weights' colours.
 */
export function rowStrips(model, fields) {
  return quirks(model)
    .filter((f) => f.sits === "row" && fields?.[f.name] != null)
    .map((f) => ({
      name: f.label,
      values: fields[f.name],
      hover: `<b>%{customdata[0]}</b> ${fill(f.words?.hover ?? f.label, { value: "%{z:.4f}" })}`,
    }));
}

/**
 * What the head's parts add to each cell's hover, the cell's customdata being [query, key, raw, scaled, ...]:
 * `matrices` to push after those (score parts only with the scores, `raw`), `split` after the raw score (its
 * parts as terms), `weight` the weight's line (a pair's two softmaxes), `scores` after the raw score's name.
 */
export function cellHover(model, layer, fields, { raw, head = null }) {
  const numbers = layerNumbers(model, layer, head);
  const out = { matrices: [], split: "", weight: null, scores: "" };
  const parts = quirks(model).filter((f) => f.sits === "parts" && fields?.[f.name] != null);
  const terms = [];
  for (const f of parts.filter((p) => p.score_part && raw)) {
    terms.push(fill(f.words?.hover ?? f.label, { value: `%{customdata[${4 + out.matrices.length}]:.3f}` }));
    out.matrices.push(fields[f.name]);
  }
  if (terms.length) out.split = ` = ${terms.join(" + ")}`;
  for (const f of parts.filter((p) => p.kind === "parts")) {
    const at = 4 + out.matrices.length;
    out.matrices.push(...fields[f.name]);
    const cells = { ...numbers, value: "%{z:+.4f}", 0: `%{customdata[${at}]:.4f}`, 1: `%{customdata[${at + 1}]:.4f}` };
    if (f.words?.hover) out.weight = fill(f.words.hover, cells);
    out.scores += f.words?.scores ?? "";
  }
  return out;
}

/** The head's parts as panels (`sits: "parts"`): `{title, z, scale}`, a pair's two or each score part. */
export function partPanels(model, layer, fields, head = null) {
  const numbers = layerNumbers(model, layer, head);
  return quirks(model)
    .filter((f) => f.sits === "parts" && fields?.[f.name] != null)
    .flatMap((f) =>
      f.kind === "parts"
        ? f.parts.map((t, n) => ({ title: fill(t, numbers), z: fields[f.name][n], scale: f.scale }))
        : [{ title: f.label, z: fields[f.name], scale: f.scale }],
    );
}

/** The title over one panel, centred at `x` (paper units). */
const panelTitle = (text, x) => ({
  text,
  x,
  xanchor: "center",
  y: 1.01,
  yanchor: "bottom",
  xref: "paper",
  yref: "paper",
  showarrow: false,
  font: { size: 12 },
});

/**
 * The head's parts side by side (partPanels), each on its quirk's scale: a pair's softmaxes on the weights' 0..1,
 * score parts on the diverging scale, symmetric about 0. Keys below, queries left, masked cells empty.
 */
export function partsFigure({ tokens, panels, mask, layer, head, maxTicks = 20 }) {
  const labels = tokens.map((t, i) => `${i} ${t}`);
  const customdata = labels.map((q) => labels.map((k) => [q, k]));
  const m = tokenMargins(tokens, maxTicks);
  const width = 0.98 / panels.length;
  const layout = baseLayout({
    margin: { l: m.l, r: 10, t: 28, b: m.t }, // the key labels below: the titles above
    yaxis: tokenAxis(tokens, { reversed: true, title: "query", maxTicks }),
    annotations: panels.map((p, n) => panelTitle(p.title, width * (n + 0.5))),
  });
  const zs = panels.map((p) => maskNull(p.z, mask));
  const isWeights = (p) => p.scale === "weights" || p.scale === "share";
  // the signed panels share one range, so that their colours compare
  const signed = Math.max(0, ...zs.filter((_, n) => !isWeights(panels[n])).map((z) => signedRange(z)));
  const data = panels.map((p, n) => {
    const z = zs[n];
    const weights = isWeights(p);
    const range = weights ? 1 : signed;
    layout[`xaxis${n ? n + 1 : ""}`] = {
      ...tokenAxis(tokens, { maxTicks, angle: -55 }),
      domain: [width * n + (n ? 0.03 : 0), width * (n + 1) - 0.03],
    };
    return {
      type: "heatmap",
      xaxis: n ? `x${n + 1}` : "x",
      yaxis: "y",
      z,
      customdata,
      colorscale: weights ? WEIGHT_SCALE : SIGNED_SCALE,
      zmin: weights ? 0 : -range,
      zmax: range,
      ...(weights ? {} : { zmid: 0 }),
      showscale: n === panels.length - 1,
      hoverongaps: false,
      hovertemplate:
        `<b>%{customdata[0]}</b> → %{customdata[1]}<br>${p.title} %{z:.4f}<extra>L${layer} · H${head}</extra>`,
      colorbar: weightColorbar(weights ? "weight" : "score", 10),
    };
  });
  return { data, layout };
}
