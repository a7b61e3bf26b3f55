// Taking the picture away: the chosen head as CSV, the /api/attention answer as JSON, the grid
// as PNG, and a link that reopens the same view; and the toast that says what happened.

import { errorText, postJSON } from "../api.js";
import { downloadBlob, setProp } from "../dom.js";
import { blockSpan, headData } from "../draw/pooled.js";
import { detailRequest, exactHeadRequest, exportRequest, exportTitle } from "../requests.js";
import { currentDetail, currentGrid, toHash } from "../state.js";
import { VIEWS } from "../views.js";

/**
 * Every number of a CSV: the server's float32, written to the 9 significant digits that give it back exactly.
 * Said in the file's name and the button's title, never in the file: a CSV is a header row, then data, as a
 * spreadsheet or `pandas.read_csv` reads it.
 */
export const CSV_PRECISION = "numbers: the server's float32, 9 significant digits (exact)";
const num = (v) => (v === null || v === undefined ? "" : String(Number(v.toPrecision(9))));

const csvField = (v) => {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

/** Most (query, key) pairs a CSV of one head holds: past it, the CSV is the blocks the heatmap shows. */
const EXACT_CSV_PAIRS = 1 << 20;

/**
 * The chosen head as long-format CSV: one line per (query, key) pair with the mask, the
 * weights, scaled and unscaled, and the raw and scaled scores; the first line is the header.
 */
export function headCsv({ tokens, mask, pattern, patternUnscaled, raw, scaled, layer, head }) {
  const columns = [
    "layer",
    "head",
    "query_index",
    "query_token",
    "key_index",
    "key_token",
    "mask",
    "pattern",
    "pattern_unscaled",
    "attn_scores_raw",
    "attn_scores",
  ];
  const lines = [columns.join(",")];
  const T = tokens.length;
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      lines.push(
        [
          layer,
          head,
          i,
          csvField(tokens[i]),
          j,
          csvField(tokens[j]),
          mask[i][j],
          num(pattern[i][j]),
          patternUnscaled ? num(patternUnscaled[i][j]) : "",
          raw ? num(raw[i][j]) : "",
          scaled ? num(scaled[i][j]) : "",
        ].join(","),
      );
    }
  }
  return lines.join("\n") + "\n";
}

/**
 * A long text's chosen head as the heatmap shows it: one line per block of `block` queries ×
 * `block` keys, each value the largest in its block (the mask: 1 where any pair may attend).
 */
export function pooledCsv({ T, block, mask, pattern, raw, scaled, layer, head }) {
  const columns = [
    "layer",
    "head",
    "query_start",
    "query_end",
    "key_start",
    "key_end",
    "mask",
    "pattern_max",
    "attn_scores_raw_max",
    "attn_scores_max",
  ];
  const lines = [columns.join(",")];
  pattern.forEach((row, i) => {
    const [q0, q1] = blockSpan(T, block, i);
    row.forEach((w, j) => {
      const [k0, k1] = blockSpan(T, block, j);
      lines.push(
        [
          layer,
          head,
          q0,
          q1,
          k0,
          k1,
          mask[i][j],
          num(w),
          raw ? num(raw[i][j]) : "",
          scaled ? num(scaled[i][j]) : "",
        ].join(","),
      );
    });
  });
  return lines.join("\n") + "\n";
}

/**
 * What the CSV button gives for the chosen head: every pair as drawn, every pair fetched exactly, or the pooled
 * blocks.
 */
export function csvKind(state) {
  const d = headData(currentDetail(state));
  if (!d) return null;
  if (d.block === 1 && d.pattern_unscaled) return "exact";
  // the exact head is fetched: its four T×T fields, counted as the server counts them, within its limit
  const pairs = d.tokens.length ** 2;
  const cells = 4 * pairs;
  const limit = state.model?.limits?.max_matrix_cells ?? Infinity;
  return pairs <= EXACT_CSV_PAIRS && cells <= limit ? "fetch" : d.block === 1 ? "exact" : "pooled";
}

const CSV_TITLES = {
  exact: "CSV of the chosen head: every (query, key) pair, as drawn",
  fetch: "CSV of the chosen head: every (query, key) pair, fetched exactly (the heatmap shows max-pooled blocks)",
  pooled:
    "CSV of the chosen head as the heatmap shows it: one line per max-pooled block (every pair of a text this " +
    "long would be too many lines)",
};

/** The export buttons as the state allows them, each titled with what it gives. */
export function renderExport(state, els) {
  const kind = csvKind(state);
  setProp(els.downloadCsv, "disabled", kind === null);
  setProp(els.downloadCsv, "title", kind ? `${CSV_TITLES[kind]} (${CSV_PRECISION})` : "");
  if (els.downloadCsv.dataset.kind !== (kind ?? "")) els.downloadCsv.dataset.kind = kind ?? "";
  // the request's fields come from the model's description
  setProp(els.downloadJson, "disabled", !currentGrid(state) || !state.model);
  setProp(els.downloadJson, "title", exportTitle(state));
}

/** The CSV of one head's data (`headData`'s shape), exact or pooled as the data is. */
function csvOf(d, layer, head) {
  const mask = d.block === 1 ? (d.layer.mask ?? d.mask) : d.mask;
  if (d.block > 1) {
    return pooledCsv({
      T: d.tokens.length,
      block: d.block,
      mask,
      pattern: d.pattern,
      raw: d.attn_scores_raw,
      scaled: d.attn_scores,
      layer,
      head,
    });
  }
  return headCsv({
    tokens: d.tokens,
    mask,
    pattern: d.pattern,
    patternUnscaled: d.pattern_unscaled,
    raw: d.attn_scores_raw,
    scaled: d.attn_scores,
    layer,
    head,
  });
}

/** Wire the export and share buttons; `app`: {state, els}. */
export function installExport({ state, els }) {
  const download = (name, text, type) => downloadBlob(name, new Blob([text], { type }));
  const toast = (message) => {
    els.toast.textContent = message;
    els.toast.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (els.toast.hidden = true), 2200);
  };

  els.downloadCsv.addEventListener("click", async () => {
    const kind = csvKind(state);
    if (!kind) return;
    const { layer, head } = state;
    try {
      // fetched at float32 whatever the page holds (f2 for a long text): one precision in every CSV
      const request =
        kind === "pooled" ? { ...detailRequest(state), precision: "f4", top_k: 0 } : exactHeadRequest(state);
      const d = headData(await postJSON("/api/attention", request));
      download(
        `attnscope-L${layer}H${head}${kind === "pooled" ? "-pooled" : ""}-float32.csv`,
        csvOf(d, layer, head),
        "text/csv",
      );
      if (kind !== "exact") toast(CSV_TITLES[kind].replace("CSV of the chosen head", `Exported L${layer} · H${head}`));
    } catch (err) {
      toast(`Export failed: ${errorText(err)}`);
    }
  });

  // the JSON export is what its title says (exportTitle): a plain-JSON answer for this text and
  // these what-ifs, whole or at the page's level of detail for a long text, asked for on click
  els.downloadJson.addEventListener("click", async () => {
    if (!currentGrid(state)) return;
    try {
      const answer = await postJSON("/api/attention", exportRequest(state));
      download("attnscope-attention.json", JSON.stringify(answer), "application/json");
    } catch (err) {
      toast(`Export failed: ${errorText(err)}`);
    }
  });

  els.copyLink.addEventListener("click", async () => {
    const url = window.location.href.split("#")[0] + toHash(state, VIEWS);
    window.history.replaceState(null, "", toHash(state, VIEWS));
    try {
      await navigator.clipboard.writeText(url);
      toast("Link copied: it reopens this text, head and view.");
    } catch {
      toast("The address bar now holds the link to this view.");
    }
  });

  els.gridPng.addEventListener("click", () => {
    els.gridCanvas.toBlob((blob) => {
      if (blob) downloadBlob("attnscope-all-heads.png", blob);
    }, "image/png");
  });
}
