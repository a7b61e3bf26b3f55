"""Measure a checkpoint the way an outside user would: through its transformers export.

Exports the checkpoint with ``model.ours.gpt2_format.export_hf``, loads it with
``transformers.GPT2LMHeadModel`` and ``PreTrainedTokenizerFast`` (offline), then reports

* bits per byte on held-out everyday sentences (each scored on its own after
  ``<|endoftext|>``), and
* every head's role scores (previous-token, first-token, induction, self) computed from
  transformers' ``output_attentions``,

with the largest logit difference between our model and the export as a sanity figure.

Run: ``python scripts/check_via_transformers.py [CHECKPOINT] [--sentences FILE]...``
(default: the corpus builder's held-out ``data/corpus/sentences_val.txt``, when it has been
built, and the 100 hand-written ``model/ours/evalsets/everyday.txt``).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import torch
import transformers
from attnscope.model.heads import PROBE_SENTENCES, ROLES, role_scores
from attnscope.model.ours.evaluate import EVERYDAY, read_sentences
from attnscope.model.ours.gpt2_format import export_hf
from attnscope.model.registry import load_model
from torch.nn import functional as F


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", nargs="?", default=None)
    ap.add_argument("--sentences", type=Path, action="append", help="a sentence file (repeatable); default: both sets")
    args = ap.parse_args()

    lm = load_model(args.checkpoint, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(lm.model, lm.tokenizer, tmp)
        hf = transformers.GPT2LMHeadModel.from_pretrained(tmp, attn_implementation="eager").eval()
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(Path(tmp) / "tokenizer.json"))
    eot = lm.tokenizer.eot_id

    with torch.inference_mode():
        # bits per byte on held-out sentences
        sentence_sets = {}
        defaults = [p for p in (Path("data/corpus/sentences_val.txt"), EVERYDAY) if p.is_file()]
        for path in args.sentences or defaults:
            sentences = read_sentences(path)
            nats, nbytes, ntok = 0.0, 0, 0
            for s in sentences:
                ids = [eot] + tok(s)["input_ids"]
                logits = hf(torch.tensor([ids])).logits[0]
                nats += F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="sum").item()
                ntok += len(ids) - 1
                nbytes += len(s.encode("utf-8"))
            sentence_sets[str(path)] = {
                "sentences": len(sentences),
                "bits_per_byte": round(nats / math.log(2) / nbytes, 4),
                "nats_per_token": round(nats / ntok, 4),
            }

        # our logits against the export's on one sentence
        ids = [eot] + tok(PROBE_SENTENCES[0])["input_ids"]
        ours, _ = lm.model(torch.tensor([ids]))
        max_diff = (ours[0] - hf(torch.tensor([ids])).logits[0]).abs().max().item()

        # head roles from transformers' attentions
        roles = role_scores(
            lambda idx: torch.stack(hf(idx, output_attentions=True).attentions, dim=1),  # (B, L, nh, T, T)
            lm.tokenizer,
            lm.config.vocab_size,
            lm.config.block_size,
        )

    report = {
        "checkpoint": str(lm.path),
        "transformers": transformers.__version__,
        "max_abs_logit_diff_ours_vs_hf": float(f"{max_diff:.2e}"),
        "sentences": sentence_sets,
        "head_roles": {
            role: [[round(float(x), 3) for x in row] for row in roles[..., r]] for r, role in enumerate(ROLES)
        },
        "best": {role: round(float(roles[..., r].max()), 3) for r, role in enumerate(ROLES)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
