// Taking the picture away: the chosen head as CSV, the /api/attention answer as JSON, the grid
// as PNG, and a link that reopens the same view; and the toast that says what happened.

import { errorText, postJSON } from "./api.js";
import { downloadBlob } from "./dom.js";
import { exportRequest, exportTitle } from "./requests.js";
import { currentDetail, currentGrid, toHash } from "./state.js";

const csvField = (v) => {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

/**
 * The chosen head as long-format CSV: one line per (query, key) pair with the mask, the
 * weights, scaled and unscaled, and the raw and scaled scores.
 */
export function headCsv({ tokens, mask, pattern, patternUnscaled, raw, scaled, layer, head }) {
  const columns = ["layer", "head", "query_index", "query_token", "key_index", "key_token", "mask", "pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores"];
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
          pattern[i][j],
          patternUnscaled ? patternUnscaled[i][j] : "",
          raw ? csvField(raw[i][j]) : "",
          scaled ? csvField(scaled[i][j]) : "",
        ].join(","),
      );
    }
  }
  return lines.join("\n") + "\n";
}

/** The export buttons as the state allows them: the CSV needs every (query, key) pair, the JSON a current grid. */
export function renderExport(state, els) {
  // not from a long text's max-pooled cells
  const pooledHead = (currentDetail(state)?.focus?.thumbnail?.block ?? 1) > 1;
  els.downloadCsv.disabled = !currentDetail(state) || pooledHead;
  els.downloadJson.disabled = !currentGrid(state);
  els.downloadJson.title = exportTitle(state);
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

  els.downloadCsv.addEventListener("click", () => {
    const detail = currentDetail(state);
    if (!detail) return;
    const h = detail.layers[0].heads[0];
    const csv = headCsv({
      tokens: detail.tokens,
      mask: detail.mask,
      pattern: h.pattern,
      patternUnscaled: h.pattern_unscaled,
      raw: h.attn_scores_raw,
      scaled: h.attn_scores,
      layer: state.layer,
      head: state.head,
    });
    download(`attnscope-L${state.layer}H${state.head}.csv`, csv, "text/csv");
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
    const url = window.location.href.split("#")[0] + toHash(state);
    window.history.replaceState(null, "", toHash(state));
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
