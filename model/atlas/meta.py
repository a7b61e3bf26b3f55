"""What an atlas says of itself: its ``meta.json`` (the model, the corpus, the settings, each
metric's definition and bins: :func:`metadata`) and the state file an interrupted run leaves
(:func:`save_state`), which a resumed run reads back after checking it is the same job
(:func:`load_state`). :mod:`.build` writes both as it goes; :mod:`.read` writes the files beside them.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np

from .corpus import Corpus
from .divergence import DEFINITION as DIVERGENCE_DEFINITION
from .divergence import DIVERGENCE
from .implicit import implicit_layers
from .metrics import BIN_EDGES, METRICS, Tally, first_rows

STATE_FILE = "atlas-state.npz"
N_INDUCTION = 40  # tokens of the induction probe's random sequence (as model.heads)
FORMAT_VERSION = 2  # 2: rows where a metric is at its maximum by construction left out
# the settings a resumed run must share with the run it continues
SAME_ON_RESUME = ("seq_len", "batch_size", "max_tokens", "local_window", "exemplars", "stack")
# meta.json's word for the target of an encoder-decoder's decoder and cross stacks (model.atlas.stacks)
STACK_TARGET = (
    "the window itself: the encoder reads the window as the source and the decoder reads the same tokens "
    "teacher-forced as the target (no decoder start token first), so rows and keys are the window's tokens"
)

# what meta.json says of each metric and of the bins
DEFINITIONS = {
    "first_token": "p[t, 0]: weight on the window's first token",
    "sink_mass": "1 - sum_j p[t, j]: weight taken by the layer's learned attention sink (layers with sinks only)",
    "previous_token": "p[t, t-1]: weight on the token just before the query",
    "self": "p[t, t]: weight on the query's own token",
    "entropy": "-sum_j p[t, j] ln p[t, j], in nats",
    "mean_distance": "sum_j p[t, j] (t - j): mean distance attended back, in tokens",
    "local_fraction": "sum_{t-w < j <= t} p[t, j]: weight on the w tokens ending at the query (w = local_window)",
    "induction": "on a random token sequence repeated twice, weight from each token of the second copy to the "
    "token after its first occurrence (model.heads.induction_score); one score per head",
}
BINS_NOTE = (
    "bin i holds values in [edges[i], edges[i+1]); values below the first edge count in the first bin, "
    "values at or above the last inner edge in the last bin"
)


class AtlasError(ValueError):
    """An atlas that cannot be made as asked (bad settings, nothing to resume); one line."""


def about_model(lm) -> dict:
    """The compare model as ``meta.json`` names it."""
    facts = lm.facts
    return {"name": facts.name, "path": str(lm.path), "family": facts.family, "dtype": facts.dtype,
            "device": facts.device}


def metadata(lm, corpus: Corpus, settings: dict, other=None) -> dict:
    """What ``meta.json`` says (every key but the progress ones, filled in when written); ``other``
    the compare model, or None."""
    from .. import __version__

    facts = lm.facts
    name = facts.name
    first = first_rows(settings["local_window"])
    definitions = dict(DEFINITIONS)
    if other is not None:
        definitions[DIVERGENCE] = DIVERGENCE_DEFINITION.format(compare=other.facts.name)
    ours = not hasattr(lm.backend, "trunk")
    return {
        "format": "attnscope-atlas",
        "format_version": FORMAT_VERSION,
        "attnscope_version": __version__,
        "model": {
            "name": name,
            "revision": name.split("@", 1)[1] if "@" in name else None,
            "path": str(lm.path),
            "family": facts.family,
            "architecture": facts.architecture,  # decoder, encoder or encoder-decoder
            # the attention stack measured (model.atlas.stacks): the model's one, or the one of an encoder-decoder's
            # three asked for (default its decoder), whose target is then the window itself
            "stack": settings["stack"],
            "target": STACK_TARGET if len(facts.stacks) > 1 and settings["stack"] != "encoder" else None,
            "dtype": facts.dtype,
            "device": facts.device,
            "attention_implementation": "model.gpt explicit path (eager arithmetic)"
            if ours
            else "transformers attn_implementation='attnscope' (eager arithmetic, model.families.attention)",
            "n_layer": facts.n_layer,
            "n_head": facts.n_head,
            "attention_layers": list(facts.attention_layers),
            "block_size": facts.block_size,
            "implicit_layers": implicit_layers(facts, other is not None),
        },
        "corpus": {"sha256": corpus.sha256, "files": [f.to_dict() for f in corpus.files]},
        "settings": settings,
        "rows": "query rows t >= first_row of every window (row 0 sees only itself; first_token and previous_token "
        "from t = 2, where the previous token is no longer the first; local_fraction from t = local_window, where "
        "a row has keys outside the window)",
        "metrics": {m: {"definition": definitions[m], "bin_edges": list(BIN_EDGES.get(m, BIN_EDGES["self"]))}
                    | ({"first_row": first[METRICS.index(m)]} if m in METRICS else {})
                    | ({"first_row": 1} if m == DIVERGENCE else {})
                    for m in (*METRICS, *([DIVERGENCE] if other is not None else []), "induction")},
        "compare_model": about_model(other) if other is not None else None,
        "bins": BINS_NOTE,
        "induction_probe": {"n": min(N_INDUCTION, (facts.block_size - 1) // 2), "seed": 0, "source": "model.heads"},
    }


def with_progress(meta: dict, tally: Tally, complete: bool) -> dict:
    """``meta`` with how far the run got: ``complete``, and the tokens, windows and batches counted."""
    return meta | {
        "complete": complete,
        "tokens_seen": tally.tokens,
        "windows": tally.windows,
        "batches": tally.batches,
    }


def save_state(out: Path, tally: Tally, induction: np.ndarray, meta: dict) -> None:
    """The tally so far, the induction rows and the run's metadata, in one file (written atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, induction=induction, meta=np.asarray(json.dumps(meta)), **tally.to_arrays())
    tmp = out / f".{STATE_FILE}.tmp"
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, out / STATE_FILE)


def load_state(out: Path, meta: dict) -> tuple[Tally, np.ndarray]:
    """The tally and induction rows an interrupted run left, after checking it was this same job."""
    with np.load(out / STATE_FILE) as state:
        saved = json.loads(str(state["meta"]))
        tally = Tally.from_arrays(state)
        induction = np.array(state["induction"])
    checks = {
        "corpus": (saved["corpus"]["sha256"], meta["corpus"]["sha256"]),
        "model": (saved["model"]["path"], meta["model"]["path"]),
        "dtype": (saved["model"]["dtype"], meta["model"]["dtype"]),
        "device": (saved["model"]["device"], meta["model"]["device"]),
        "compare model": ((saved.get("compare_model") or {}).get("path"), (meta["compare_model"] or {}).get("path")),
        **{k: (saved["settings"].get(k, meta["settings"][k]), meta["settings"][k]) for k in SAME_ON_RESUME},
    }
    for what, (was, now) in checks.items():
        if was != now:
            raise AtlasError(f"cannot resume the atlas in {out}: its {what} was {was!r}, now {now!r}")
    return tally, induction
