"""The atlas beyond one machine: the same batches through Ray Data, merged exactly on the driver.

``pip install 'attnscope[ray]'``. The driver cuts the corpus into batches of windows as the local
engine does (:mod:`model.atlas.corpus`), makes them a dataset (``ray.data.from_items``, one item
per batch: its number, its first window's number and its token ids) and maps it with
:class:`AtlasWorker`, a callable class run by a pool of actors: each loads the model once, on a
GPU of its own (``num_gpus=1``) where the cluster has GPUs, and turns each batch into its
:class:`~model.atlas.metrics.Tally`, the batch's partial statistics (sums, counts, histograms, top
rows). The driver takes the tallies back in batch order (Ray Data's ``preserve_order``, and a
reorder buffer besides) and merges them exactly as the local engine does, so the atlas is the
local engine's up to the float rounding of the forward passes themselves.

Every actor opens the model from the same path the driver did (:attr:`LoadedModel.path`): on a
cluster that path (a checkpoint folder, a ``.gguf`` file, a Hub cache) must exist on every node,
and attnscope must be installed there (the same image; ``deploy/`` and ``docs/ATLAS.md``). The
token ids of all batches are put in Ray's object store at once (4 bytes a token).

Ray is kept to the lines that matter (:func:`_quiet_ray`, :func:`_init`): its INFO lines, the
notice that the atlas turned Ray Data's progress bars off (the atlas's own bar counts the tokens),
the notice that a new local Ray has token authentication on (Ray's default, left as it is) and,
where the atlas starts Ray, the C++ core worker's lines below fatal (``RAY_BACKEND_LOG_LEVEL=fatal``
unless the environment sets it: Ray Data's actor pool logs an error-level line about restarting
actors on every run; a failure still reaches the atlas as an exception) are not printed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterable, Iterator

import numpy as np

from .corpus import Batch
from .metrics import Tally


def _pack(tally: Tally) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **tally.to_arrays())
    return buf.getvalue()


def _unpack(blob: bytes) -> Tally:
    with np.load(io.BytesIO(blob)) as arrays:
        return Tally.from_arrays(arrays)


class AtlasWorker:
    """A Ray Data callable class: the model (and the compare model, if any) loaded once per actor; each
    batch of windows -> its tally."""

    def __init__(self, source: str, device: str | None, dtype: str, local_window: int, exemplars: int, threads: int,
                 compare: str | None = None, stack: str | None = None):
        import torch

        from ..registry import load_model

        if threads:
            torch.set_num_threads(threads)
        self.lm = load_model(source, device=device, dtype=dtype)
        self.other = load_model(compare, device=device, dtype=dtype) if compare is not None else None
        self.local_window, self.exemplars, self.stack = local_window, exemplars, stack

    def __call__(self, items: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .tally import batch_tally

        numbers, blobs = [], []
        for index, window0, rows, cols, ids in zip(
            items["batch"], items["window0"], items["rows"], items["cols"], items["ids"]
        ):
            tokens = np.frombuffer(ids, dtype=np.int32).reshape(int(rows), int(cols)).astype(np.int64)
            batch = Batch(int(index), int(window0), tokens)
            numbers.append(int(index))
            other = self.other.backend if self.other is not None else None
            tally = batch_tally(self.lm.backend, batch, self.local_window, self.exemplars, other, self.stack)
            blobs.append(_pack(tally))
        return {"batch": np.asarray(numbers, dtype=np.int64), "tally": np.asarray(blobs, dtype=object)}


QUIET = {
    "ray": logging.WARNING,
    "ray.data": logging.WARNING,
    "ray.data._internal.progress": logging.ERROR,  # "progress bars disabled": the atlas turned them off
    "ray._private.authentication": logging.ERROR,  # "token authentication is enabled" (Ray's default)
}


@contextlib.contextmanager
def _quiet_ray():
    """Ray's loggers at :data:`QUIET` (never lower than they were) while the atlas runs on Ray."""
    loggers = {name: logging.getLogger(name) for name in QUIET}
    was = {name: lg.level for name, lg in loggers.items()}
    for name, lg in loggers.items():
        lg.setLevel(max(lg.getEffectiveLevel(), QUIET[name]))
    try:
        yield
    finally:
        for name, lg in loggers.items():
            lg.setLevel(was[name])


def _init(ray, address: str | None) -> None:
    """``ray.init`` for the atlas: a Ray on this machine (``address`` None) or the cluster at ``address``."""
    added = "RAY_BACKEND_LOG_LEVEL" not in os.environ
    if added:
        os.environ["RAY_BACKEND_LOG_LEVEL"] = "fatal"
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    finally:  # what Ray started has it; this process's environment keeps no log level of ours
        if added:
            del os.environ["RAY_BACKEND_LOG_LEVEL"]


def ray_tallies(
    lm,
    todo: Iterable[Batch],
    local_window: int,
    exemplars: int,
    device: str | None = None,
    dtype: str = "fp32",
    address: str | None = None,
    concurrency: int | None = None,
    other=None,
    stack: str | None = None,
) -> Iterator[Tally]:
    """The tallies of ``todo``'s batches, computed by Ray actors, yielded in batch order.

    Uses the running Ray instance if there is one (``ray.init`` already called), else connects to
    ``address`` (None: a Ray on this machine, started here and shut down after). ``concurrency``
    actors (default: one per GPU of the cluster, else one per CPU); ``device`` is the actors'
    (default: ``cuda`` where the cluster has GPUs). ``other``: the compare model, which each actor
    loads from its path too (both models on the actor's device); ``stack``: an encoder-decoder's stack measured."""
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ImportError("the Ray engine needs Ray: pip install 'attnscope[ray]'") from e

    with _quiet_ray():  # for as long as the batches run
        yield from _tallies(ray, lm, todo, local_window, exemplars, device, dtype, address, concurrency, other, stack)


def _tallies(
    ray, lm, todo, local_window, exemplars, device, dtype, address, concurrency, other, stack=None
) -> Iterator[Tally]:
    started = not ray.is_initialized()
    if started:
        _init(ray, address)
    try:
        items = [
            {"batch": b.index, "window0": b.window0, "rows": b.ids.shape[0], "cols": b.ids.shape[1],
             "ids": b.ids.astype(np.int32).tobytes()}
            for b in todo
        ]
        if not items:
            return
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        size = concurrency or max(1, gpus or int(resources.get("CPU", 1)))
        cpus = 1 if gpus else max(1, int(resources.get("CPU", 1)) // size)
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False  # the atlas's own bar counts the tokens
        ds = ray.data.from_items(items, override_num_blocks=min(len(items), 4 * size))
        out = ds.map_batches(
            AtlasWorker,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=size),
            num_gpus=1 if gpus else 0,
            num_cpus=cpus,
            fn_constructor_kwargs=dict(
                source=str(lm.path),
                device=device if device not in (None, "auto") else ("cuda" if gpus else "cpu"),
                dtype=dtype,
                local_window=local_window,
                exemplars=exemplars,
                threads=cpus,
                compare=str(other.path) if other is not None else None,
                stack=stack,
            ),
        )
        waiting: dict[int, bytes] = {}
        following = items[0]["batch"]
        for row in out.iter_rows():
            waiting[int(row["batch"])] = row["tally"]
            while following in waiting:
                yield _unpack(waiting.pop(following))
                following += 1
        if waiting:
            raise RuntimeError(f"Ray returned batches {sorted(waiting)} but not batch {following}")
    finally:
        if started:
            ray.shutdown()
