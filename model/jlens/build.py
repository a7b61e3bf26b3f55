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


def _one(lm, ids: list[int], layers: list[int], skip_first: int, dim_batch: int) -> JacobianSum:
    part = JacobianSum(layers, lm.facts.d_model)
    part.add(prompt_jacobians(lm.backend, ids, layers, skip_first, dim_batch))
    return part


def _settings(lm, corpus: Corpus, seq_len: int | None, skip_first: int, dim_batch: int, layers) -> dict:
    """The fit's settings, checked (:class:`JLensError` naming the bad one); what a resume must match."""
    facts = lm.facts
    seq_len = min(DEFAULT_SEQ_LEN, facts.block_size) if seq_len is None else seq_len
    try:
        source_layers = check_settings(facts, seq_len, skip_first, dim_batch, layers)
    except ValueError as e:
        raise JLensError(str(e)) from None
    return {"model": facts.name, "corpus": corpus.sha256, "seq_len": seq_len, "skip_first": skip_first,
            "source_layers": source_layers, "d_model": facts.d_model, "dim_batch": dim_batch, "dtype": facts.dtype}


def _start(out: Path, settings: dict, resume: bool) -> JacobianSum:
    """The sums to start from: an interrupted fit's (``resume``), else none (``out``'s folder made)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if resume and _partial(out).is_file():
        return _load_partial(out, settings)
    if _partial(out).is_file():
        raise JLensError(f"{_partial(out)} holds an interrupted fit: pass --resume to continue it, or remove it")
    return JacobianSum(settings["source_layers"], settings["d_model"])


def _parts(lm, todo, settings: dict, engine: str, shard: int, address: str | None):
    """Each prompt's sums (local), or each shard's (Ray), in the prompts' order."""
    layers, skip, nb = settings["source_layers"], settings["skip_first"], settings["dim_batch"]
    if engine == "local":
        return (_one(lm, ids, layers, skip, nb) for ids in todo)
    from .ray_engine import ray_sums

    shards = iter(lambda: list(islice(todo, shard)), [])  # read as they are sent
    return ray_sums(lm, shards, layers, skip, nb, address)


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
    engine: str = "local",
    address: str | None = None,
    after_prompt=None,
) -> Path:
    """Fit J over the corpus's first ``max_prompts`` prompts (all by default) and write ``out``.

    ``seq_len``: tokens a prompt keeps (default 128, or the model's context if shorter).
    ``progress``: a tqdm bar on stderr (None: only on a terminal). ``engine``: ``"local"`` or ``"ray"``
    (shards of ``checkpoint_every`` prompts on Ray tasks, ``address`` the cluster's; :mod:`.ray_engine`).
    ``after_prompt(acc)``: a test hook. An exception (a Ctrl+C among them) leaves the partial file and propagates."""
    from tqdm import tqdm

    out = Path(out)
    if engine not in ("local", "ray"):
        raise JLensError(f"--engine {engine}: use local or ray")
    settings = _settings(lm, corpus, seq_len, skip_first, dim_batch, layers)
    acc = _start(out, settings, resume)
    todo = prompts(token_stream(corpus.documents(), lm.tokenizer), settings["seq_len"], skip_first)
    todo = islice(todo, acc.n_prompts, max_prompts)  # the prompts a resumed fit already has are skipped
    bar = tqdm(total=max_prompts, initial=acc.n_prompts, unit="prompt", file=sys.stderr, desc="jlens",
               disable=None if progress is None else not progress, dynamic_ncols=True)
    started, done = time.perf_counter(), 0
    try:
        for part in _parts(lm, todo, settings, engine, checkpoint_every, address):
            before = acc.n_prompts
            acc.merge(part)
            done += part.n_prompts
            bar.update(part.n_prompts)
            bar.set_postfix_str(f"{done / (time.perf_counter() - started):.2f} prompts/s", refresh=False)
            if acc.n_prompts // checkpoint_every > before // checkpoint_every:
                _save_partial(out, acc, settings)
            if after_prompt is not None:
                after_prompt(acc)
    except BaseException:  # Ctrl+C, an out-of-memory, a failed Ray task: the prompts merged so far are kept
        _save_partial(out, acc, settings)
        raise
    finally:
        bar.close()
    try:
        J = acc.mean()
    except ValueError as e:
        raise JLensError(str(e)) from None
    meta = {
        "model": lm.facts.name,
        "corpus": {"sha256": corpus.sha256, "files": [f.path.name for f in corpus.files]},
        "settings": {k: settings[k] for k in ("seq_len", "skip_first", "dim_batch", "dtype")},
        "backward_passes_per_prompt": backward_passes(lm.facts.d_model, dim_batch),
    }
    save_lens(out, J, acc.n_prompts, meta)
    _partial(out).unlink(missing_ok=True)
    return out
