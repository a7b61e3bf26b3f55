"""The Jacobian lens's fit beyond one machine: shards of prompts on Ray tasks, merged on the driver.

``pip install 'attnscope[ray]'``. The driver cuts the prompts as the local fit does and sends them in
shards of ``shard_size``; each task opens the model from the driver's path (once per Ray worker
process) and returns its shard's :class:`~.fit.JacobianSum`. The driver takes the shards back in order
and merges them, so the sums after each shard are those of a prefix of the prompts: the fit's partial
file stays resumable, and the mean over prompts weighs each shard by its prompt count. As with the
atlas's Ray engine, the model's path must exist on every node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice

from ..atlas.ray_engine import _init, _quiet_ray
from .fit import JacobianSum

_MODELS: dict[tuple, object] = {}  # a Ray worker process's models, by (path, device, dtype)
DTYPE_OPTION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # ModelFacts.dtype -> load_model's


def fit_shard(source: str, device: str, dtype: str, shard: list[list[int]], layers: list[int], skip_first: int,
              dim_batch: int, threads: int) -> dict:
    """One shard's sums, as plain tensors (what Ray sends back)."""
    import torch

    from ..registry import load_model
    from .fit import prompt_jacobians

    if threads:
        torch.set_num_threads(threads)
    key = (source, device, dtype)
    if key not in _MODELS:
        _MODELS[key] = load_model(source, device=device, dtype=dtype)
    lm = _MODELS[key]
    acc = JacobianSum(layers, lm.facts.d_model)
    for ids in shard:
        acc.add(prompt_jacobians(lm.backend, ids, layers, skip_first, dim_batch))
    return {"n_prompts": acc.n_prompts, "total": acc.total}


def ray_sums(lm, shards: Iterable[list[list[int]]], layers: list[int], skip_first: int, dim_batch: int,
             address: str | None = None) -> Iterator[JacobianSum]:
    """Each shard's :class:`JacobianSum`, computed on Ray, yielded in shard order. Uses the running Ray
    instance if there is one, else connects to ``address`` (None: a Ray on this machine, shut down after).
    At most two shards a worker are in flight (the shards are read as they are sent, each result is
    L × d² float64); the ones still running when the fit stops are cancelled."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("the Ray engine needs Ray: pip install 'attnscope[ray]'") from e
    with _quiet_ray():
        started = not ray.is_initialized()
        if started:
            _init(ray, address)
        try:
            gpus = int(ray.cluster_resources().get("GPU", 0))
            task = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(fit_shard)
            device = "cuda" if gpus else "cpu"
            dtype = DTYPE_OPTION.get(lm.facts.dtype, "fp32")
            window = 2 * max(1, gpus or int(ray.cluster_resources().get("CPU", 1)))
            args = (str(lm.path), device, dtype)
            pending: deque = deque()
            todo = iter(shards)
            try:
                while True:
                    for shard in islice(todo, window - len(pending)):
                        pending.append(task.remote(*args, shard, layers, skip_first, dim_batch, 1))
                    if not pending:
                        return
                    got = ray.get(pending.popleft())
                    acc = JacobianSum(layers, lm.facts.d_model, got["n_prompts"])
                    acc.total = got["total"]
                    yield acc
            finally:
                for ref in pending:
                    ray.cancel(ref)
        finally:
            if started:
                ray.shutdown()
