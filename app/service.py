"""What the routes (and ``attnscope inspect``) compute: plain functions over a loaded model.

The heavy one is :func:`attention_json`: tokenize, run the model's explicit attention path
once (:func:`model.inspection.inspect_ids`), then for the requested layers and heads only,
round the requested tensors in numpy and let orjson write the arrays directly (no Python
loops over numbers). Statistics are computed by :func:`head_stats_arrays`, which gives the
numbers of :func:`model.inspection.head_stats` (a test holds them equal) in fewer passes
over the T×T tensors, for the selected heads only.
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

from .errors import ApiError
from .responses import dumps
from .schemas import FIELDS, AttentionRequest

PATTERN_DECIMALS = 5  # rows of T ≤ 256 weights still sum to 1 within 1e-3
SCORE_DECIMALS = 4  # attn_scores_raw, attn_scores, q, k, v
STAT_DIGITS = 6  # significant digits of the statistics and lesson values
PROB_DIGITS = 6  # significant digits of prediction probabilities (floored)


# ------------------------------------------------------------------ rounding


def round_fixed(t: torch.Tensor, decimals: int) -> np.ndarray:
    """Tensor -> C-contiguous float32 array rounded to ``decimals`` (NaN stays NaN)."""
    a = t.detach().to("cpu", torch.float32).numpy()
    return np.ascontiguousarray(np.round(a, decimals))


def _to_sig(a: np.ndarray, digits: int, op) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mag = np.floor(np.log10(np.abs(a)))
        exp = np.where(np.isfinite(mag), digits - 1 - mag, 0).astype(np.int64)
        up = 10.0 ** np.clip(exp, 0, None)  # exact powers of ten
        down = 10.0 ** np.clip(-exp, 0, None)
        out = np.where(exp >= 0, op(a * up) / up, op(a / down) * down)
    return np.where(np.isfinite(a), out, a)


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
    """Per-head statistics of one layer's selected heads (``q, k (H, T, hs)``, the rest ``(H, T, T)``).

    Same definitions as :func:`model.inspection.head_stats`: population variances over
    unmasked entries, row entropies in nats, mean row maxima, ratio ``divisor²`` when the
    scaled scores do not vary.
    """
    var_raw = raw[:, mask].var(dim=-1, correction=0)  # (H,)
    var_scaled = scores[:, mask].var(dim=-1, correction=0)  # the scores the model used, masked -inf
    ratio = torch.where(var_scaled > 0, var_raw / var_scaled.clamp_min(1e-30), torch.full_like(var_raw, divisor**2))
    ent = torch.special.entr(pattern).sum(-1)  # (H, T); entr(0) = 0
    ent_u = torch.special.entr(pattern_unscaled).sum(-1)
    return {
        "var_q": q.var(dim=(-2, -1), correction=0),
        "var_k": k.var(dim=(-2, -1), correction=0),
        "var_scores_raw": var_raw,
        "var_scores": var_scaled,
        "variance_ratio": ratio,
        "entropy": ent.mean(-1),
        "entropy_unscaled": ent_u.mean(-1),
        "max_weight": pattern.amax(-1).mean(-1),
        "max_weight_unscaled": pattern_unscaled.amax(-1).mean(-1),
        "row_entropy": ent,
        "row_entropy_unscaled": ent_u,
    }


_NAN = float("nan")


def _layer_view(
    tr: AttentionTrace,
    layer: int,
    heads: list[int],
    head_idx: torch.Tensor | None,
    include: set[str],
    divisor: float,
) -> dict[str, Any]:
    def sel(x: torch.Tensor) -> torch.Tensor:  # (1, nh, T, ·) -> (H, T, ·)
        x = x[0]
        return x if head_idx is None else x.index_select(0, head_idx)

    mask = tr.mask
    hidden = ~mask
    arrays: dict[str, np.ndarray] = {}
    pattern = sel(tr.pattern) if include & {"pattern", "stats"} else None
    pattern_u = sel(tr.pattern_unscaled) if include & {"pattern_unscaled", "stats"} else None
    raw = sel(tr.attn_scores_raw) if include & {"attn_scores_raw", "stats"} else None
    if "pattern" in include:
        arrays["pattern"] = round_fixed(pattern, PATTERN_DECIMALS)
    if "attn_scores_raw" in include:
        arrays["attn_scores_raw"] = round_fixed(raw.masked_fill(hidden, _NAN), SCORE_DECIMALS)
    if "attn_scores" in include:
        arrays["attn_scores"] = round_fixed(sel(tr.attn_scores).masked_fill(hidden, _NAN), SCORE_DECIMALS)
    if "pattern_unscaled" in include:
        arrays["pattern_unscaled"] = round_fixed(pattern_u, PATTERN_DECIMALS)
    for name in ("q", "k", "v"):
        if name in include:
            arrays[name] = round_fixed(sel(getattr(tr, name)), SCORE_DECIMALS)

    stats: dict[str, Any] | None = None
    if "stats" in include:
        s = head_stats_arrays(sel(tr.q), sel(tr.k), raw, sel(tr.attn_scores), pattern, pattern_u, mask, divisor)
        stats = {}
        for name, value in s.items():
            if value.dim() == 1:  # one number per head
                stats[name] = round_sig(value.detach().double().cpu().numpy()).tolist()
            else:  # one list of T per head
                stats[name] = round_fixed(value, PATTERN_DECIMALS)

    views = []
    for j, h in enumerate(heads):
        view: dict[str, Any] = {"head": h}
        for name in FIELDS:
            if name == "stats" and stats is not None:
                view["stats"] = {key: value[j] for key, value in stats.items()}
            elif name in arrays:
                view[name] = arrays[name][j]
        views.append(view)
    return {"layer": layer, "heads": views}


def top_predictions(
    logits: torch.Tensor, displays: list[str], top_k: int, temperature: float
) -> list[list[dict[str, Any]]]:
    """Top ``top_k`` of ``softmax(logits / temperature)`` (float64) after each position."""
    T = logits.shape[0]
    if top_k == 0:
        return [[] for _ in range(T)]
    probs = torch.softmax(logits.double() / temperature, dim=-1)  # (T, V)
    top = torch.topk(probs, k=min(top_k, probs.shape[-1]), dim=-1)
    p_rows = floor_sig(top.values.cpu().numpy()).tolist()
    i_rows = top.indices.cpu().tolist()
    return [
        [{"token": displays[i], "id": i, "prob": p} for p, i in zip(p_row, i_row)]
        for p_row, i_row in zip(p_rows, i_rows)
    ]


def compute_attention(svc: Service, req: AttentionRequest) -> dict[str, Any]:
    """The response of POST /api/attention without ``model`` and ``timing_ms``."""
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

    traces, logits, divisor = inspect_ids(lm.model, enc.ids, causal=req.causal, scale=req.scale)
    if not bool(torch.isfinite(logits).all()):
        raise ApiError(
            422,
            f"scale {req.scale!r} makes the scores overflow; use a number from 0.001 to 10000",
            loc=("body", "scale"),
            type_="scale_overflow",
        )
    head_idx = None
    if heads != list(range(cfg.n_head)):
        head_idx = torch.tensor(heads, dtype=torch.long, device=logits.device)
    return {
        "tokens": enc.tokens,
        "token_ids": enc.ids,
        "offsets": [[start, end] for start, end in enc.offsets],
        "causal": req.causal,
        "divisor": divisor,
        "mask": traces[0].mask.to("cpu", torch.uint8).numpy(),
        "layers": [_layer_view(traces[i], i, heads, head_idx, include, divisor) for i in layers],
        "predictions": top_predictions(logits, svc.displays, req.top_k, req.temperature),
    }


def attention_json(svc: Service, req: AttentionRequest, started: float | None = None) -> tuple[bytes, dict[str, float]]:
    """The exact bytes of the POST /api/attention response, and the server timings in ms.

    ``timing_ms`` is always the last field, so two answers to the same request are
    byte-identical up to it (``body.rsplit(b',"timing_ms":', 1)[0]``).
    """
    t0 = time.perf_counter() if started is None else started
    t1 = time.perf_counter()
    payload = compute_attention(svc, req)
    t2 = time.perf_counter()
    body = dumps(payload)
    t3 = time.perf_counter()
    total = (t3 - t0) * 1000
    out = b"".join((body[:-1], b',"model":', svc.info_json, b',"timing_ms":', dumps(round(total, 3)), b"}"))
    timings = {"queue": (t1 - t0) * 1000, "compute": (t2 - t1) * 1000, "encode": (t3 - t2) * 1000, "total": total}
    return out, timings


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
