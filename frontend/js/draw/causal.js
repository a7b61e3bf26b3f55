// What the "Explain a prediction" views share (Rollout, Lens, Attribution, Patching): the causal
// routes' words about the what-ifs, which these routes never take, a layer × head map on a
// diverging scale centred on 0, and a layers × tokens map's grid (Rollout, Patching). The numbers
// are the answers'; only the colour range is the page's (the largest magnitude drawn, so that 0
// is always the middle colour).

import { SIGNED_SCALE, baseLayout } from "./figures.js";

/**
 * The note a causal view shows while a what-if is on (mask off, scaling off, heads switched off):
 * its numbers are the model as trained, never mixed with the what-ifs; null while none is on.
 */
export function asTrainedWords(state, what) {
  const on = [];
  if (!state.causal) on.push("the causal mask is off");
  if (!state.scaled) on.push("the scaling is off");
  if (state.ablate.length) on.push(`${state.ablate.length === 1 ? "a head is" : "heads are"} switched off`);
  if (!on.length) return null;
  return (
    `${what} the model as trained (causal mask on, its own scaling, every head on): the what-ifs above ` +
    `(${on.join(", ")}) do not apply here.`
  );
}

/** The largest magnitude in a matrix with null rows or cells, at least `floor`: the diverging scale's half range. */
export function signedPeak(matrix, floor = 1e-6) {
  return Math.max(floor, ...matrix.flat().map((v) => Math.abs(v ?? 0)));
}

/** The pixel height of a layer × head map of `L` rows (the head effects card's, so two maps line up). */
export const layerHeadHeight = (L) => Math.max(150, 26 * L + 40);

/**
 * A layer × head heatmap of `matrix[layer][head]` (null rows, a hybrid's layers without heads,
 * are left out), coloured on the diverging scale from −peak to +peak; `label`: the colour bar's
 * title; `hover`: what a cell's number is, after "L2 · H1<br>". Red is positive, as on every signed map.
 */
export function layerHeadFigure(matrix, { label, hover, peak = signedPeak(matrix), digits = 3 }) {
  const layers = matrix.flatMap((row, l) => (row ? [l] : []));
  const z = layers.map((l) => matrix[l]);
  const H = z[0]?.length ?? 0;
  return {
    data: [
      {
        type: "heatmap",
        z,
        x: Array.from({ length: H }, (_, h) => `H${h}`),
        y: layers.map((l) => `L${l}`),
        zmin: -peak,
        zmax: peak,
        zmid: 0,
        colorscale: SIGNED_SCALE, // blue (low) to red (high)
        colorbar: colorBar(label),
        hovertemplate: `%{y} · %{x}<br>${hover} %{z:+.${digits}f}<extra></extra>`,
        xgap: 1,
        ygap: 1,
      },
    ],
    layout: baseLayout({
      margin: { l: 36, r: 8, t: 8, b: 28 },
      height: layerHeadHeight(z.length),
      yaxis: { type: "category", autorange: "reversed", fixedrange: true },
      xaxis: { type: "category", side: "bottom", fixedrange: true },
    }),
  };
}

/** A colour bar on the right titled `text`, as these views' maps draw it. */
export const colorBar = (text, thickness = 10) => ({
  title: { text, side: "right", font: { size: 11 } },
  thickness,
  outlinewidth: 0,
});

/**
 * The grid of a heatmap with a row per layer (`rows`: what each row is after, e.g. "L2" or "block 2", top down) and a
 * column per token: the trace without its colours and hover (`customdata`: [row, "i token"]), and the row axis
 * ("after L2"). The caller adds the colour scale, the hover template and the colour bar.
 */
export function layerTokenGrid(z, tokens, rows) {
  const index = (_, i) => i;
  const trace = {
    type: "heatmap",
    z,
    x: tokens.map(index),
    y: rows.map(index),
    customdata: rows.map((row) => tokens.map((t, i) => [row, `${i} ${t}`])),
    xgap: tokens.length <= 40 ? 1 : 0,
    ygap: 1,
  };
  const ticktext = rows.map((row) => `after ${row}`);
  const yaxis = { tickmode: "array", tickvals: rows.map(index), ticktext, autorange: "reversed", fixedrange: true };
  return { trace, yaxis };
}
