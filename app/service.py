"""What the routes (and ``attnscope inspect``) compute: plain functions over a loaded model.

The heavy one is :func:`attention_json`: tokenize, run the model's explicit attention path
once (:func:`model.inspection.inspect_ids`, without stacking the layers), then for the
requested layers and heads only compute and write the requested fields: the T×T weight
matrices through :mod:`app.jsonfast`, other arrays rounded in numpy and written by orjson
directly (no Python loops over numbers). Statistics come from :func:`head_stats_arrays`,
the numbers of :func:`model.inspection.head_stats` (a test holds them equal) in fewer
passes over the T×T tensors. The response is assembled from these pieces in a fixed
order, ``timing_ms`` last.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model import lessons
from model.checkpoint import LoadedModel
from model.gpt import AttentionTrace
from model.heads import ROLES, head_role_scores
from model.inspection import inspect_ids

from . import jsonfast
from .errors import ApiError
from .responses import dumps
from .schemas import FIELDS, AttentionRequest

PATTERN_DECIMALS = 5  # pattern, pattern_unscaled (app.jsonfast) and the row entropies
SCORE_DECIMALS = 4  # attn_scores_raw, attn_scores, q, k, v
STAT_DIGITS = 6  # significant digits of the statistics and lesson values
PROB_DIGITS = 6  # significant digits of prediction probabilities (floored)


# ------------------------------------------------------------------ rounding


def round_fixed(t: torch.Tensor, decimals: int) -> np.ndarray:
    """Tensor -> C-contiguous float32 array rounded to ``decimals`` (NaN stays NaN)."""
    a = t.detach().to("cpu", torch.float32).numpy()
    return np.ascontiguousarray(np.round(a, decimals))


def _to_sig(a, digits: int, op) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    finite = np.isfinite(a)
    safe = np.where(finite & (a != 0), np.abs(a), 1.0)  # no log of 0, inf or NaN
    exp = digits - 1 - np.floor(np.log10(safe)).astype(np.int64)
    scale = 10.0 ** np.abs(exp)  # exact powers of ten
    out = np.where(exp >= 0, op(a * scale) / scale, op(a / scale) * scale)
    return np.where(finite, out, a)


def round_sig(a, digits: int = STAT_DIGITS) -> np.ndarray:
    """Round to ``digits`` significant digits."""
    return _to_sig(a, digits, np.round)


def floor_sig(a, digits: int = PROB_DIGITS) -> np.ndarray:
    """Round down to ``digits`` significant digits: keeps order, never increases a sum."""
    return _to_sig(a, digits, np.floor)


# ------------------------------------------------------------------ the loaded service


@dataclass
class Service:
    """A loaded model plus what is computed once: its description, token labels, head roles."""

    loaded: LoadedModel
    info: dict[str, Any]
    info_json: bytes
    displays: list[str]
    heads_json: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def checkpoint_label(path: Path) -> str:
    """The checkpoint as shown to clients: relative to the working directory, else its name."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def model_info(lm: LoadedModel) -> dict[str, Any]:
    cfg = lm.config
    return {
        "name": cfg.name,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "d_model": cfg.n_embd,
        "head_dim": cfg.head_dim,
        "block_size": cfg.block_size,
        "vocab_size": cfg.vocab_size,
        "device": str(lm.device),
        "parameters": lm.model.num_parameters(),
        "checkpoint": checkpoint_label(lm.path),
        "training": lm.training or {},
    }


def head_roles(lm: LoadedModel) -> dict[str, Any]:
    scores = head_role_scores(lm.model, lm.tokenizer)  # (L, nh, 4)
    return {"roles": list(ROLES), "scores": np.round(scores.double().numpy(), 4).tolist()}


def build_service(lm: LoadedModel, with_heads: bool = True) -> Service:
    info = model_info(lm)
    svc = Service(
        loaded=lm,
        info=info,
        info_json=dumps(info),
        displays=[lm.tokenizer.display(i) for i in range(lm.config.vocab_size)],
    )
    if with_heads:
        svc.heads_json = dumps(head_roles(lm))
    return svc


# ------------------------------------------------------------------ attention


def _indices(values: list[int] | None, n: int, name: str, unit: str) -> list[int]:
    if values is None:
        return list(range(n))
    for i, v in enumerate(values):
        if v >= n:
            raise ApiError(
                422,
                f"{name}[{i}] is {v}; the model has {n} {unit} (0 to {n - 1})",
                loc=("body", name, i),
                type_="index_out_of_range",
                ctx={"limit": n - 1, "value": v},
            )
    return sorted(set(values))


def _var(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Population variance over ``dims`` (centred first; faster than ``Tensor.var`` on CPU)."""
    centred = x - x.mean(dims, keepdim=True)
    return (centred * centred).mean(dims)


def head_stats_arrays(
    q: torch.Tensor,
    k: torch.Tensor,
    raw: torch.Tensor,
    scores: torch.Tensor,
    pattern: torch.Tensor,
    pattern_unscaled: torch.Tensor,
    mask: torch.Tensor,
    divisor: float,
) -> dict[str, torch.Tensor]:
    """Per-head statistics (``q, k (..., T, hs)``, the rest ``(..., T, T)``; ``...`` = heads, or layers and heads).

    The definitions of :func:`model.inspection.head_stats` (a test holds them equal):
    population variances over unmasked entries, row entropies in nats, mean row maxima,
    ratio ``divisor²`` when the scaled scores do not vary. Computed in fewer passes over the
    T×T tensors, all of them on scores centred on each row's top score ``c``:

    * variances from per-row sums over the visible keys of ``y = raw - c`` and ``y²``
      (float64 across rows); the scaled scores are ``raw / divisor``, whose variance is
      ``var(raw) / divisor²`` (the model's float32 division moves it by less than 1e-6);
    * the entropy of a softmax row needs no logarithm per entry: for ``p = softmax(s)`` over
      the visible keys, ``H = logsumexp(s) - Σ p·s`` and ``logsumexp(s) = max s - log max p``,
      so ``H = -log max p - Σ p·(s - max s)``; centring keeps large scores (a small scale)
      from cancelling in float32.
    """
    s_max, top = scores.max(-1)  # (..., T); masked scores are -inf, never the maximum
    c = raw.gather(-1, top[..., None])  # (..., T, 1) the raw score of the row's top key
    raw_centred = raw - c

    visible = mask.to(raw.dtype)  # (T, T) 1 where the query sees the key
    y = raw_centred * visible  # masked entries 0
    s1 = y.sum(-1).double()  # (..., T) per-row sums of the visible centred scores
    s2 = torch.linalg.vecdot(y, raw_centred).double()  # and of their squares
    n_row = visible.sum(-1).double()  # (T,)
    c64 = c[..., 0].double()
    n = n_row.sum()
    mean = (s1 + n_row * c64).sum(-1) / n
    var_raw = ((s2 + 2 * c64 * s1 + n_row * c64 * c64).sum(-1) / n - mean * mean).clamp_min(0)
    var_scaled = var_raw / divisor**2
    ratio = torch.where(var_scaled > 0, var_raw / var_scaled.clamp_min(1e-300), torch.full_like(var_raw, divisor**2))

    p_max, pu_max = pattern.amax(-1), pattern_unscaled.amax(-1)
    # masked keys have p exactly 0 and finite raw scores: they add nothing to the sums
    pu_dot = torch.linalg.vecdot(pattern_unscaled, raw_centred).double()
    if divisor >= 1:
        # s - max s = (raw - c) / divisor up to the float32 rounding of s (|s| 6e-8 at most)
        p_dot = torch.linalg.vecdot(pattern, raw_centred).double() / divisor
    else:  # scores larger than the raw ones: use the model's own (float32) scaled scores
        lowest = torch.finfo(scores.dtype).min
        p_dot = torch.linalg.vecdot(pattern, scores.clamp_min(lowest) - s_max[..., None]).double()
    ent = (-p_max.double().log() - p_dot).clamp_min(0)
    ent_u = (-pu_max.double().log() - pu_dot).clamp_min(0)
    return {
        "var_q": _var(q, (-2, -1)),
        "var_k": _var(k, (-2, -1)),
        "var_scores_raw": var_raw,
        "var_scores": var_scaled,
        "variance_ratio": ratio,
        "entropy": ent.mean(-1),
        "entropy_unscaled": ent_u.mean(-1),
        "max_weight": p_max.mean(-1),
        "max_weight_unscaled": pu_max.mean(-1),
        "row_entropy": ent,
        "row_entropy_unscaled": ent_u,
    }


_NAN = float("nan")
STAT_SCALARS = (
    "var_q",
    "var_k",
    "var_scores_raw",
    "var_scores",
    "variance_ratio",
    "entropy",
    "entropy_unscaled",
    "max_weight",
    "max_weight_unscaled",
)
STAT_ROWS = ("row_entropy", "row_entropy_unscaled")


def _layer_fields(
    traces: list[AttentionTrace],
    layers: list[int],
    heads: list[int],
    head_idx: torch.Tensor | None,
    include: set[str],
    divisor: float,
) -> list[list[list[tuple[str, Any]]]]:
    """``[layer][head]`` -> the included fields in contract order, as ``(name, value)``:
    ``bytes`` already JSON, or values orjson writes (numpy arrays, dicts)."""

    def sel(x: torch.Tensor) -> torch.Tensor:  # (1, nh, T, ·) -> (H, T, ·)
        x = x[0]
        return x if head_idx is None else x.index_select(0, head_idx)

    mask = traces[0].mask
    hidden = ~mask
    layout = None
    if include & {"pattern", "pattern_unscaled"}:
        layout = jsonfast.layout(mask.shape[0], causal=not bool(mask.all()))
    per_layer: list[dict[str, Any]] = []
    for i in layers:
        tr = traces[i]
        values: dict[str, Any] = {}
        for name in ("pattern", "pattern_unscaled"):
            if name in include:
                values[name] = layout.write(sel(getattr(tr, name)).detach().to("cpu", torch.float32).numpy())
        for name in ("attn_scores_raw", "attn_scores"):
            if name in include:
                values[name] = round_fixed(sel(getattr(tr, name)).masked_fill(hidden, _NAN), SCORE_DECIMALS)
        for name in ("q", "k", "v"):
            if name in include:
                values[name] = round_fixed(sel(getattr(tr, name)), SCORE_DECIMALS)
        per_layer.append(values)

    stats: list[dict[str, torch.Tensor]] = []
    if "stats" in include:
        # short texts: all layers in one go (fewer, larger operations); long ones: a layer at a
        # time, which needs no stacked copies of the T×T tensors
        group = max(1, len(layers)) if mask.shape[0] <= 64 else 1
        for start in range(0, len(layers), group):
            chunk = layers[start : start + group]

            def stacked(name: str, chunk=chunk) -> torch.Tensor:  # (layers, H, T, ·)
                if len(chunk) == 1:  # a view, no copy
                    return sel(getattr(traces[chunk[0]], name))[None]
                return torch.stack([sel(getattr(traces[i], name)) for i in chunk])

            names = ("q", "k", "attn_scores_raw", "attn_scores", "pattern", "pattern_unscaled")
            stats.append(head_stats_arrays(*(stacked(name) for name in names), mask, divisor))
    if stats:  # rounded together: one numpy call for all layers' numbers, one per row statistic
        scalars = torch.stack([torch.cat([s[name] for s in stats]).double() for name in STAT_SCALARS], 1)  # (L, S, H)
        scalars_l = round_sig(scalars.cpu().numpy()).tolist()
        rows = {name: round_fixed(torch.cat([s[name] for s in stats]), PATTERN_DECIMALS) for name in STAT_ROWS}
        for li, values in enumerate(per_layer):
            values["stats"] = [
                {
                    **{name: scalars_l[li][si][j] for si, name in enumerate(STAT_SCALARS)},
                    **{name: rows[name][li, j] for name in STAT_ROWS},
                }
                for j in range(len(heads))
            ]
    return [
        [[(name, values[name][j]) for name in FIELDS if name in values] for j in range(len(heads))]
        for values in per_layer
    ]


def top_predictions(
    logits: torch.Tensor, displays: list[str], top_k: int, temperature: float
) -> list[list[dict[str, Any]]]:
    """Top ``top_k`` of ``softmax(logits / temperature)`` after each position.

    Probabilities are floored to 6 significant digits, after scaling a row down in the
    (rounding-error) case where its top ``top_k`` would add up to more than 1: each list is
    sorted and sums to at most 1.
    """
    T = logits.shape[0]
    if top_k == 0:
        return [[] for _ in range(T)]
    top = torch.topk(logits, k=min(top_k, logits.shape[-1]), dim=-1)  # the same order as the probabilities
    scaled = logits / temperature if temperature != 1 else logits
    peak = scaled.gather(-1, top.indices[:, :1])  # (T, 1) the largest scaled logit
    lse = peak.double()[:, 0] + (scaled - peak).exp_().sum(-1).double().log()  # logsumexp(scaled), (T,)
    probs = torch.exp(top.values.double() / temperature - lse[:, None]).clamp_max(1.0)
    total = probs.sum(-1, keepdim=True)
    probs = torch.where(total > 1, probs / total, probs)
    p_rows = floor_sig(probs.cpu().numpy()).tolist()
    i_rows = top.indices.cpu().tolist()
    return [
        [{"token": displays[i], "id": i, "prob": p} for p, i in zip(p_row, i_row)]
        for p_row, i_row in zip(p_rows, i_rows)
    ]


@dataclass
class AttentionResult:
    """POST /api/attention before encoding (without ``model`` and ``timing_ms``)."""

    head: dict[str, Any]  # tokens, token_ids, offsets, causal, divisor, mask
    layers: list[tuple[int, list[tuple[int, list[tuple[str, Any]]]]]]  # (layer, [(head, fields)])
    predictions: list[list[dict[str, Any]]]


def compute_attention(svc: Service, req: AttentionRequest) -> AttentionResult:
    lm = svc.loaded
    cfg = lm.config
    enc = lm.tokenizer.encode(req.text)
    n = len(enc.ids)
    if n == 0:
        raise ApiError(422, "text has no tokens", loc=("body", "text"), type_="text_no_tokens")
    if n > cfg.block_size:
        raise ApiError(
            422,
            f"text is {n} tokens; the model's context is {cfg.block_size} tokens",
            loc=("body", "text"),
            type_="too_many_tokens",
            ctx={"limit": cfg.block_size, "count": n},
        )
    layers = _indices(req.layers, cfg.n_layer, "layers", "layers")
    heads = _indices(req.heads, cfg.n_head, "heads", "heads per layer")
    include = set(req.include)

    # the LM head only when predictions are asked for (the all-heads grid asks for none)
    traces, logits, divisor = inspect_ids(lm.model, enc.ids, causal=req.causal, scale=req.scale, logits=req.top_k > 0)
    # scores that overflow make a softmax row NaN, and its z; the residual stream carries the
    # NaN into every later layer, so the last layer's z tells whether any layer overflowed
    if not bool(torch.isfinite(traces[-1].z).all()):
        raise ApiError(
            422,
            f"scale {req.scale!r} makes the scores overflow; use a number from 0.001 to 10000",
            loc=("body", "scale"),
            type_="scale_overflow",
        )
    head_idx = None
    if heads != list(range(cfg.n_head)):
        head_idx = torch.tensor(heads, dtype=torch.long, device=traces[0].mask.device)
    return AttentionResult(
        head={
            "tokens": enc.tokens,
            "token_ids": enc.ids,
            "offsets": [[start, end] for start, end in enc.offsets],
            "causal": req.causal,
            "divisor": divisor,
            "mask": traces[0].mask.to("cpu", torch.uint8).numpy(),
        },
        layers=list(
            zip(layers, (list(zip(heads, f)) for f in _layer_fields(traces, layers, heads, head_idx, include, divisor)))
        ),
        predictions=[[] for _ in range(n)]
        if logits is None
        else top_predictions(logits, svc.displays, req.top_k, req.temperature),
    )


def encode_attention(result: AttentionResult) -> list[bytes]:
    """The JSON object as pieces to join, without its closing brace (``model`` and
    ``timing_ms`` come next)."""
    parts = [dumps(result.head)[:-1], b',"layers":[']
    for i, (layer, heads) in enumerate(result.layers):
        parts.append(b'%s{"layer":%d,"heads":[' % (b"," if i else b"", layer))
        for j, (head, fields) in enumerate(heads):
            parts.append(b'%s{"head":%d' % (b"," if j else b"", head))
            for name, value in fields:
                parts += (b',"', name.encode(), b'":', value if isinstance(value, bytes) else dumps(value))
            parts.append(b"}")
        parts.append(b"]}")
    parts += (b'],"predictions":', dumps(result.predictions))
    return parts


def attention_json(svc: Service, req: AttentionRequest, started: float | None = None) -> tuple[bytes, dict[str, float]]:
    """The exact bytes of the POST /api/attention response, and the server timings in ms.

    ``timing_ms`` is always the last field, so two answers to the same request are
    byte-identical up to it (``body.rsplit(b',"timing_ms":', 1)[0]``). It covers the wait
    for a slot, the computation and the encoding, all but the final join of the pieces.
    """
    t0 = time.perf_counter() if started is None else started
    t1 = time.perf_counter()
    result = compute_attention(svc, req)
    t2 = time.perf_counter()
    parts = encode_attention(result)
    t3 = time.perf_counter()
    total = (t3 - t0) * 1000
    parts += (b',"model":', svc.info_json, b',"timing_ms":', dumps(round(total, 3)), b"}")
    timings = {"queue": (t1 - t0) * 1000, "compute": (t2 - t1) * 1000, "encode": (t3 - t2) * 1000, "total": total}
    return b"".join(parts), timings


# ------------------------------------------------------------------ lessons

_EXACT = {"T", "C", "seed", "head_size", "samples", "logits", "factor", "agree", "hist_raw", "hist_scaled"}


def _rounded(result: Any) -> dict[str, Any]:
    """A lesson dataclass as a dict, its computed floats to ``STAT_DIGITS`` significant digits."""
    out = {}
    for key, value in asdict(result).items():
        if key in _EXACT or isinstance(value, (bool, int)):
            out[key] = value
        elif isinstance(value, float):
            out[key] = float(round_sig(value))
        else:
            out[key] = round_sig(np.asarray(value, dtype=np.float64)).tolist()
    return out


def lesson_bag_of_words(T: int, C: int, seed: int) -> dict[str, Any]:
    return _rounded(lessons.bag_of_words(T, C, seed))


def lesson_softmax_scaling(logits: list[float], factor: float) -> dict[str, Any]:
    return _rounded(lessons.softmax_scaling(logits, factor))


def lesson_variance(head_size: int, T: int, seed: int, samples: int) -> dict[str, Any]:
    return _rounded(lessons.variance(head_size, T, seed, samples))
