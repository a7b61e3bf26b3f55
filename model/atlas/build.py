"""A head atlas: what every attention head does, measured over a whole corpus.

    from attnscope.model.atlas.build import atlas
    atlas(["notes.txt", "more.jsonl"], "atlas/", checkpoint=None, seq_len=256, batch_size=8)

The corpus (:mod:`model.atlas.corpus`) is checked first, then cut into windows of ``seq_len``
tokens, ``batch_size`` windows a forward pass. Each pass runs the explicit attention path into an
:class:`~model.atlas.stats.AtlasSink`, which reduces every block of query rows to per-head sums,
histograms and top rows on the model's device, and the batch's :class:`~model.atlas.metrics.Tally`
is added to the corpus's, batch after batch in corpus order: float64 sums in a fixed order, so a
resumed run ends with the same bits as an uninterrupted one. Induction is measured once on the
probe of :mod:`model.heads` (a seeded random sequence repeated twice).

Ctrl+C (``KeyboardInterrupt``) lands between batches: the atlas so far is written (``complete``
false in its metadata) with ``atlas-state.npz`` beside it, and ``resume=True`` goes on from the
next batch (the corpus, model and settings must be the same: the state file says what they were).
``engine="ray"`` runs the batches on a Ray cluster (:mod:`model.atlas.ray_engine`) and merges the same
tallies in the same order. The files written are those of :mod:`model.atlas.read`; the metadata and
the state file, and the checks that a resumed run is the same job, are :mod:`model.atlas.meta`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

from ..heads import induction_tokens, probe_prefix, random_pool
from .corpus import Corpus, batches, check_conversations, open_corpus, token_stream, windows
from .divergence import DIVERGENCE, check_same
from .implicit import implicit_induction, shape
from .meta import N_INDUCTION, STATE_FILE, AtlasError, load_state, metadata, save_state, with_progress
from .metrics import CONTEXT_AFTER, CONTEXT_BEFORE, METRICS, Tally
from .read import write_atlas
from .stacks import stack_facts, stack_of
from .tally import batch_tally

DEFAULT_SEQ_LEN = 512  # tokens per window, or the model's context if shorter
SAVE_EVERY_S = 300.0  # the state and the partial atlas are also written this often during a run


@torch.inference_mode()
def induction_rows(backend, n_induction: int = N_INDUCTION, compared: bool = False, stack=None) -> np.ndarray:
    """(La, nh, R) float32: on :mod:`model.heads`'s induction probe (seeded random tokens after the
    model's BOS, repeated twice), each second-copy token's weight on the token after its first
    occurrence, R = probe batch × (n − 1) rows; their mean is :func:`model.heads.induction_score`.
    A hybrid's implicit heads (:mod:`.implicit`) read p = |M| normalised per row, in the model's layer order.
    ``stack``: an encoder-decoder's stack, the probe its source and its target (:mod:`.stacks`)."""
    facts, tokenizer = stack_facts(backend.facts, stack), backend.tokenizer
    prefix = probe_prefix(tokenizer)
    n = min(n_induction, (facts.block_size - 1) // 2)
    rand = induction_tokens(facts.vocab_size, n=n, pool=random_pool(tokenizer, facts.vocab_size))  # (B, n)
    start = prefix or tokenizer.encode_ids("")[:1]
    bos = torch.tensor(start, dtype=torch.long).expand(rand.size(0), len(start))
    probe = torch.cat([bos, rand, rand], dim=1)
    p = backend.patterns(probe) if stack is None else backend.patterns(probe, stack=stack)  # (B, La, nh, T, T)
    j = torch.arange(n - 1)
    rows = p[..., len(start) + n + j, len(start) + j + 1]  # (B, La, nh, n - 1): the cells induction_score averages
    own = rows.permute(1, 2, 0, 3).reshape(p.shape[1], p.shape[2], -1).float().numpy()
    layers, implicit, heads = shape(facts, compared)
    if not implicit:
        return own
    cells = (len(start) + n + j).numpy(), (len(start) + j + 1).numpy()
    mixed = implicit_induction(backend, implicit, probe, *cells, heads)
    out = np.zeros((len(layers), heads, own.shape[-1]), dtype=np.float32)
    for i, layer in enumerate(layers):
        at = [m["layer"] for m in implicit]
        part = mixed[at.index(layer)] if layer in at else own[list(facts.attention_layers).index(layer)]
        out[i, : part.shape[0]] = part
    return out


@contextlib.contextmanager
def _interrupts_held():
    """Ctrl+C held back while the tally and the state change: it lands after, between batches."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def atlas(
    corpus: str | Path | Iterable[str | Path] | Corpus,
    out: str | Path,
    checkpoint: str | Path | None = None,
    model=None,
    *,
    compare_model=None,
    seq_len: int | None = None,
    batch_size: int = 8,
    max_tokens: int | None = None,
    local_window: int = 8,
    exemplars: int = 8,
    device: str | None = "cpu",
    dtype: str = "fp32",
    engine: str = "local",
    address: str | None = None,
    concurrency: int | None = None,
    resume: bool = False,
    progress: bool | None = None,
    after_batch: Callable[[Tally], None] | None = None,
    stack: str | None = None,
) -> Path:
    """Measure every head over ``corpus`` (file paths, or a checked :class:`~model.atlas.corpus.Corpus`)
    and write the atlas to the folder ``out``.

    The model: ``model`` (a :class:`~model.backends.LoadedModel`, e.g. ``attnscope.load_model()``),
    else ``checkpoint`` (a folder or ``.gguf`` file; None: the shipped model) on ``device`` in
    ``dtype``. ``compare_model`` (a :class:`~model.backends.LoadedModel`, or a path loaded as
    ``checkpoint`` is): a second model run on every batch too, adding the metric ``divergence``
    (:mod:`model.atlas.divergence`); :class:`~model.atlas.divergence.ModelMismatch` where its layers,
    heads or token ids differ. ``seq_len`` tokens per window (default 512 or the model's context, never more than
    it), ``batch_size`` windows per forward pass, at most ``max_tokens`` tokens; ``local_window`` is
    the ``local`` metric's w, ``exemplars`` the rows kept per head and metric. ``engine``:
    ``"local"`` or ``"ray"`` (``address`` of the cluster, ``concurrency`` actors). ``progress``: a
    tqdm bar on stderr (None: only on a terminal). ``after_batch(tally)`` is called after each batch
    is merged (a test hook). ``stack``: the attention stack measured (:mod:`.stacks`; None: the decoder where
    the model has one, else its one stack; an encoder-decoder's window is its source and its target).
    Raises :class:`~model.atlas.corpus.CorpusError` for a bad corpus (before anything is written),
    :class:`AtlasError` for bad settings (a stack the model lacks among them); a ``KeyboardInterrupt``
    leaves a partial atlas and its state file, then propagates. Returns ``out``.
    """
    from ..registry import load_model

    if isinstance(corpus, Corpus):
        data = corpus
    else:
        data = open_corpus([corpus] if isinstance(corpus, (str, Path)) else list(corpus))
    out = Path(out)
    _check_settings(out, resume, engine, batch_size=batch_size, local_window=local_window, exemplars=exemplars,
                    max_tokens=max_tokens)
    lm = model if model is not None else load_model(checkpoint, device=device, dtype=dtype)
    stack = _measurable(lm, stack)
    other = _compare_model(lm, compare_model, data, max_tokens, device, dtype)
    context = lm.facts.block_size
    seq_len = seq_len or min(DEFAULT_SEQ_LEN, context)
    if not 2 <= seq_len <= context:
        raise AtlasError(f"seq_len {seq_len}: must be between 2 and the model's context, {context} tokens")
    settings = {"seq_len": seq_len, "batch_size": batch_size, "max_tokens": max_tokens, "local_window": local_window,
                "exemplars": exemplars, "context_before": CONTEXT_BEFORE, "context_after": CONTEXT_AFTER,
                "engine": engine, "stack": stack}
    meta = metadata(lm, data, settings, other)
    if resume:
        tally, induction = load_state(out, meta)
    else:
        metrics = (*METRICS, DIVERGENCE) if other is not None else METRICS
        layers, _, heads = shape(stack_facts(lm.facts, stack), other is not None)
        tally = Tally.empty(layers, heads, exemplars, metrics)
        induction = induction_rows(lm.backend, compared=other is not None, stack=_own(lm, stack))

    todo, messages = _batches(data, lm, seq_len, max_tokens, batch_size, tally.batches)
    if engine == "ray":
        from .ray_engine import ray_tallies

        parts = ray_tallies(lm, todo, local_window, exemplars, device=device, dtype=dtype, address=address,
                            concurrency=concurrency, other=other, stack=_own(lm, stack))
    else:
        backend, second = lm.backend, getattr(other, "backend", None)
        parts = (batch_tally(backend, b, local_window, exemplars, second, _own(lm, stack)) for b in todo)
    _run(parts, tally, induction, meta, out, (lm.tokenizer, messages), max_tokens, progress, after_batch)
    return out


def _measurable(lm, stack: str | None) -> str:
    """The stack the atlas measures (:func:`.stacks.stack_of`), after refusing a model it cannot measure."""
    if lm.facts.differential:  # signed maps: no entropy, no share of a row
        raise AtlasError(
            f"{lm.facts.name} uses differential attention (a head's map is first − λ·second, with negative cells); "
            "the atlas's metrics are defined for softmax rows, so it cannot measure it yet"
        )
    if hasattr(lm.backend, "ear"):  # Whisper: its encoder hears a recording, and a corpus is text
        raise AtlasError(f"{lm.facts.name} is a speech model (its source is audio): an atlas's corpus is text")
    return stack_of(lm.facts, stack)


def _own(lm, stack: str):
    """``stack`` where the model has more than one to choose from (an encoder-decoder), else None."""
    return stack if len(lm.facts.stacks) > 1 else None


def _batches(data: Corpus, lm, seq_len: int, max_tokens: int | None, batch_size: int, done: int):
    """The batches still to run (after the first ``done``), and where the corpus's messages fall as they are read."""
    messages = check_conversations(data, lm.backend.chat_template)
    stream = token_stream(data.documents(), lm.tokenizer, lm.backend.chat_template, messages)
    return (b for b in batches(windows(stream, seq_len, max_tokens), batch_size) if b.index >= done), messages


def _compare_model(lm, compare_model, data: Corpus, max_tokens: int | None, device, dtype: str):
    """The compare model, loaded (from a path) and checked against ``lm`` (:func:`.divergence.check_same`); or None."""
    from ..registry import load_model

    if compare_model is None:
        return None
    other = compare_model if hasattr(compare_model, "backend") else load_model(compare_model, device, dtype)
    if other.facts.differential:
        raise AtlasError(f"the compare model {other.facts.name} uses differential attention, which the atlas "
                         "cannot measure yet")
    check_same(lm, other, data, max_tokens)
    return other


def _check_settings(out: Path, resume: bool, engine: str, **lows: int | None) -> None:
    """Settings refused before anything loads: resuming without a state file (or not resuming over one), an
    unknown engine, a count below its least value."""
    has_state = (out / STATE_FILE).is_file()
    if resume and not has_state:
        raise AtlasError(f"nothing to resume in {out}: no {STATE_FILE} (an interrupted atlas leaves one)")
    if has_state and not resume:
        raise AtlasError(f"{out} holds an interrupted atlas: --resume to continue it, or remove {out / STATE_FILE}")
    if engine not in ("local", "ray"):
        raise AtlasError(f"unknown engine {engine!r} (use local or ray)")
    least = {"batch_size": 1, "local_window": 1, "exemplars": 0, "max_tokens": 2}
    for name, value in lows.items():
        if value is not None and value < least[name]:
            raise AtlasError(f"{name} must be at least {least[name]}, got {value}")


def _run(parts: Iterator[Tally], tally: Tally, induction, meta, out: Path, labels, max_tokens, progress, hook):
    """Merge the batches' tallies in order; write the atlas at the end, or the partial one and the state on Ctrl+C."""
    from tqdm import tqdm

    bar = tqdm(total=max_tokens, initial=tally.tokens, unit="tok", unit_scale=True, file=sys.stderr,
               disable=None if progress is None else not progress, desc="atlas", dynamic_ncols=True)
    saved = time.monotonic()
    try:
        for part in parts:
            with _interrupts_held():
                tally.add(part)
            bar.update(part.tokens)
            if hook is not None:
                hook(tally)
            if time.monotonic() - saved > SAVE_EVERY_S:
                with _interrupts_held():
                    save_state(out, tally, induction, meta)
                    write_atlas(out, tally, induction, with_progress(meta, tally, False), *labels)
                saved = time.monotonic()
    except KeyboardInterrupt:
        with _interrupts_held():
            save_state(out, tally, induction, meta)
            write_atlas(out, tally, induction, with_progress(meta, tally, False), *labels)
        bar.close()
        print(f"attnscope: interrupted after {tally.tokens} tokens; partial atlas in {out} "
              f"(--resume continues it)", file=sys.stderr)
        raise
    bar.close()
    if tally.batches == 0:
        raise AtlasError("the corpus gave no window of 2 tokens or more: nothing to measure")
    write_atlas(out, tally, induction, with_progress(meta, tally, True), *labels)
    (out / STATE_FILE).unlink(missing_ok=True)
