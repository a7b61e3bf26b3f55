"""``attnscope jlens``: fit a Jacobian lens over a corpus, resumably, and write the published file.

Every ``checkpoint_every`` prompts the sums so far go to ``LENS.pt.partial`` (written atomically) with
the settings and the corpus's hash; ``resume=True`` continues from it after checking it was this same
job, and the partial file is removed once the lens is written. See :mod:`.fit` for the definition.
"""

from __future__ import annotations

import os
import sys
import time
from itertools import islice
from pathlib import Path

import torch

from ..atlas.corpus import Corpus, token_stream
from .fit import JacobianSum, backward_passes, check_settings, prompt_jacobians, prompts
from .lensfile import save_lens

DEFAULT_SEQ_LEN = 128
SAME_ON_RESUME = ("model", "corpus", "seq_len", "skip_first", "source_layers", "dtype")


class JLensError(ValueError):
    """Settings or a partial file that stop a fit; the message is one line."""


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def _save_partial(out: Path, acc: JacobianSum, settings: dict) -> None:
    tmp = out.with_name(f".{out.name}.partial.tmp")
    body = {"total": acc.total, "n_prompts": acc.n_prompts, "settings": settings}
    torch.save(body, tmp)
    os.replace(tmp, _partial(out))


def _load_partial(out: Path, settings: dict) -> JacobianSum:
    saved = torch.load(_partial(out), map_location="cpu", weights_only=True)
    for key in SAME_ON_RESUME:
        if saved["settings"].get(key) != settings[key]:
            raise JLensError(
                f"cannot resume the lens {out}: its {key} was {saved['settings'].get(key)!r}, now {settings[key]!r}"
            )
    acc = JacobianSum(settings["source_layers"], settings["d_model"], int(saved["n_prompts"]))
    acc.total = {int(k): v for k, v in saved["total"].items()}
    return acc


def fit_lens(
    lm,
    corpus: Corpus,
    out: str | Path,
    *,
    seq_len: int | None = None,
    skip_first: int = 16,
    max_prompts: int | None = None,
    dim_batch: int = 32,
    layers: list[int] | None = None,
    resume: bool = False,
    checkpoint_every: int = 8,
    progress: bool | None = None,
    after_prompt=None,
) -> Path:
    """Fit J over the corpus's first ``max_prompts`` prompts (all by default) and write ``out``.

    ``seq_len``: tokens a prompt keeps (default 128, or the model's context if shorter).

    ``progress``: a tqdm bar on stderr (None: only on a terminal). ``after_prompt(acc)``: a test hook.
    A ``KeyboardInterrupt`` leaves the partial file and propagates."""
    from tqdm import tqdm

    out = Path(out)
    facts = lm.facts
    seq_len = min(DEFAULT_SEQ_LEN, facts.block_size) if seq_len is None else seq_len
    try:
        source_layers = check_settings(facts, seq_len, skip_first, dim_batch, layers)
    except ValueError as e:
        raise JLensError(str(e)) from None
    settings = {
        "model": facts.name,
        "corpus": corpus.sha256,
        "seq_len": seq_len,
        "skip_first": skip_first,
        "source_layers": source_layers,
        "d_model": facts.d_model,
        "dim_batch": dim_batch,
        "dtype": facts.dtype,
    }
    if resume and _partial(out).is_file():
        acc = _load_partial(out, settings)
    elif _partial(out).is_file() and not resume:
        raise JLensError(f"{_partial(out)} holds an interrupted fit: pass --resume to continue it, or remove it")
    else:
        acc = JacobianSum(source_layers, facts.d_model)
    todo = prompts(token_stream(corpus.documents(), lm.tokenizer), seq_len, skip_first)
    todo = islice(todo, acc.n_prompts, max_prompts)  # the prompts a resumed fit already has are skipped
    total = None if max_prompts is None else max_prompts
    bar = tqdm(total=total, initial=acc.n_prompts, unit="prompt", file=sys.stderr, desc="jlens",
               disable=None if progress is None else not progress, dynamic_ncols=True)
    started, done = time.perf_counter(), 0
    try:
        for ids in todo:
            acc.add(prompt_jacobians(lm.backend, ids, source_layers, skip_first, dim_batch))
            done += 1
            bar.update(1)
            bar.set_postfix_str(f"{done / (time.perf_counter() - started):.2f} prompts/s", refresh=False)
            if acc.n_prompts % checkpoint_every == 0:
                _save_partial(out, acc, settings)
            if after_prompt is not None:
                after_prompt(acc)
    except KeyboardInterrupt:
        _save_partial(out, acc, settings)
        raise
    finally:
        bar.close()
    try:
        J = acc.mean()
    except ValueError as e:
        raise JLensError(str(e)) from None
    meta = {
        "model": facts.name,
        "corpus": {"sha256": corpus.sha256, "files": [f.path.name for f in corpus.files]},
        "settings": {k: settings[k] for k in ("seq_len", "skip_first", "dim_batch", "dtype")},
        "backward_passes_per_prompt": backward_passes(facts.d_model, dim_batch),
    }
    save_lens(out, J, acc.n_prompts, meta)
    _partial(out).unlink(missing_ok=True)
    return out
