// What each head's write says at the chosen token (POST /api/lens with `heads`): a layer × head table,
// each cell the top token of the head's write read by the lens (W_U · norm(J_l · write), or the logit
// lens's W_U · norm(write)), shaded by its probability, or (`shade` "final") by the probability the
// reading gives the model's own guess there (the answer's `final_prob`): how much the head's write moves
// the final guess. The answer's top k in its title. A layer the Jacobian lens has no J for is a row of
// dashes. And the captions of the Jacobian lens and of the heads.

import { shortToken } from "./figures.js";

/** The Jacobian lens's caption: what J is, and that it is fitted, not this text's own. */
export const JACOBIAN_ABOUT = (jlens) =>
  "The Jacobian lens: the residual stream after each block carried to the last block by J, the average " +
  `Jacobian of the last block's output over the ${jlens.n_prompts} prompt${jlens.n_prompts === 1 ? "" : "s"} ` +
  "it was fitted on (a linear " +
  "stand-in for the blocks after it, fixed, not this text's own), then the final norm and unembedding. " +
  "The last row is the model's own prediction.";

export const HEADS_ABOUT =
  "Below each table: what each head's write into the residual stream at the chosen token says when read the " +
  "same way, what that head pushes the model towards. A reading of the write alone (the final norm applied " +
  "to it), not a share of the logit: Attribution splits the logit into parts that add up.";

/** The table for the token at `position`: a row per layer, a cell per head, shaded as `shade` says. */
export function headWritesTable(response, position, shade = "own") {
  const table = document.createElement("table");
  table.className = "lens-table lens-heads";
  table.dataset.testid = "lens-heads-table";
  table.dataset.shade = shade;
  const guess = response.residuals.at(-1).top[position][0].token; // the model's own guess there
  const by = shade === "final" ? `shaded by how likely each makes the model's guess “${guess}”` : "";
  table.createCaption().textContent =
    `each head's write at token ${position} (${response.tokens[position]})${by ? `, ${by}` : ""}`;
  const heads = response.heads;
  const n = Math.max(...heads.map((row) => row?.length ?? 0));
  const top = table.createTHead().insertRow();
  top.append(document.createElement("th"));
  for (let h = 0; h < n; h++) top.append(Object.assign(document.createElement("th"), { textContent: `H${h}` }));
  const body = table.createTBody();
  heads.forEach((row, layer) => {
    const tr = body.insertRow();
    tr.append(Object.assign(document.createElement("th"), { scope: "row", textContent: `L${layer}` }));
    for (let h = 0; h < n; h++) {
      const td = tr.insertCell();
      const guesses = row?.[h]?.top[position];
      if (!guesses) {
        td.textContent = "—";
        td.title = `L${layer}: the lens has no J for this block`;
        td.style.setProperty("--p", "0");
        continue;
      }
      const final = row[h].final_prob[position];
      const prob = shade === "final" ? final : guesses[0].prob;
      td.textContent = shortToken(guesses[0].token, 10);
      td.style.setProperty("--p", String(prob));
      td.dataset.prob = String(prob);
      td.title = `L${layer} H${h} writes:\n` + guesses.map((p) => `${p.token} ${p.prob.toFixed(3)}`).join("\n") +
        `\nthe model's guess “${guess}”: ${final.toFixed(3)}`;
    }
  });
  return table;
}
