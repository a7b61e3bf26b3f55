"""What the routes (and ``attnscope inspect``) compute: plain functions over a loaded model.

``POST /api/attention`` is three steps:

1. **selection**: the request checked against the model (:func:`select`): token count,
   layer and head indices, the focus head; the result is a :class:`model.capture.Selection`;
2. **compute**: one forward pass with a :class:`model.capture.Capture` as the trace sink,
   which takes statistics, thumbnails and the selected heads' matrices inside the pass
   (typed numpy arrays, nothing encoded yet), then the predictions;
3. **encode**: plain JSON (numbers; masked scores ``null``) or ``"b64"``: every matrix a
   typed array ``{"dtype", "bdata", "shape"}`` in the form Plotly.js reads.

``timing_ms`` is always the response's last field.
"""

from __future__ import annotations

import base64
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..model import lessons
from ..model.backends import LoadedModel, ModelFacts, top_logits
from ..model.capture import MATRIX_FIELDS, Capture, Selection, thumbnail_block
from ..model.gpt import AttentionOptions
from ..model.heads import ROLES, role_scores
from ..model.inspection import scale_divisor
from ..model.stats import STAT_ROWS, STAT_SCALARS
from . import jsonfast
from .errors import ApiError
from .responses import dumps
from .schemas import FIELDS, MAX_MATRIX_CELLS, REGION_MAX, AttentionRequest
from .settings import CHARS_PER_TOKEN

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
    # below 1e-290 the power of ten would overflow float64: such values come out as 0
    exp = np.minimum(digits - 1 - np.floor(np.log10(safe)).astype(np.int64), 290)
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

    @property
    def max_matrix_cells(self) -> int:
        return self.info["limits"]["max_matrix_cells"]


def checkpoint_label(path: Path) -> str:
    """The checkpoint as shown to clients: relative to the working directory, else its name
    (a model blob of Ollama's: the model's ``NAME:TAG``)."""
    if Path(path).parent.name == "blobs":
        from ..model.gguf_file import ollama_name_of

        name = ollama_name_of(Path(path))
        if name:
            return f"ollama:{name}"
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def model_info(lm: LoadedModel) -> dict[str, Any]:
    """The model's facts (family, heads, key/value heads, divisor, context, dtype, device, ...)."""
    return {
        **lm.facts.to_dict(),
        "checkpoint": checkpoint_label(lm.path),
        "training": lm.training or {},
    }


def head_roles(lm: LoadedModel) -> dict[str, Any]:
    facts = lm.facts
    scores = role_scores(lm.backend.patterns, lm.tokenizer, facts.vocab_size, facts.block_size)  # (L, nh, 4)
    return {"roles": list(ROLES), "scores": np.round(scores.double().numpy(), 4).tolist()}


def build_service(lm: LoadedModel, with_heads: bool = True, limits: dict[str, int] | None = None) -> Service:
    """The model and what is computed once. ``limits``: the server's (``max_text_chars``,
    ``max_matrix_cells``), shown in the model's description; unset: the defaults."""
    info = model_info(lm)
    text_chars = max(16000, CHARS_PER_TOKEN * lm.facts.block_size)  # as Settings.text_limit() for this model
    info["limits"] = {"max_text_chars": text_chars, "max_matrix_cells": MAX_MATRIX_CELLS, **(limits or {})}
    tok = lm.tokenizer
    svc = Service(
        loaded=lm,
        info=info,
        info_json=dumps(info),
        displays=[tok.display(i) if i < tok.vocab_size else f"<{i}>" for i in range(lm.facts.vocab_size)],
    )
    if with_heads:
        svc.heads_json = dumps(head_roles(lm))
    return svc


# ------------------------------------------------------------------ 1. selection


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


def _check_index(value: int, n: int, loc: tuple, unit: str) -> None:
    if value >= n:
        raise ApiError(
            422,
            f"{'.'.join(str(p) for p in loc[1:])} is {value}; the model has {n} {unit} (0 to {n - 1})",
            loc=loc,
            type_="index_out_of_range",
            ctx={"limit": n - 1, "value": value},
        )


def ablate_set(heads, facts: ModelFacts) -> frozenset[tuple[int, int]]:
    """The request's ``ablate`` list checked against the model: a set of (layer, head), or a 422 naming the entry."""
    for i, ref in enumerate(heads):
        _check_index(ref.layer, facts.n_layer, ("body", "ablate", i, "layer"), "layers")
        _check_index(ref.head, facts.n_head, ("body", "ablate", i, "head"), "heads per layer")
    return frozenset((ref.layer, ref.head) for ref in heads)


def select(svc: Service, req: AttentionRequest, n_tokens: int) -> Selection:
    """The request checked against the model: a :class:`Selection`, or an :class:`ApiError` naming the field."""
    facts = svc.loaded.facts
    if n_tokens == 0:
        raise ApiError(422, "text has no tokens", loc=("body", "text"), type_="text_no_tokens")
    if n_tokens > facts.block_size:
        raise ApiError(
            422,
            f"text is {n_tokens} tokens; the model's context is {facts.block_size} tokens",
            loc=("body", "text"),
            type_="too_many_tokens",
            ctx={"limit": facts.block_size, "count": n_tokens},
        )
    layers = _indices(req.layers, facts.n_layer, "layers", "layers")
    heads = _indices(req.heads, facts.n_head, "heads", "heads per layer")
    focus = None
    focus_fields: frozenset[str] = frozenset()
    focus_region = None
    if req.focus is not None:
        _check_index(req.focus.layer, facts.n_layer, ("body", "focus", "layer"), "layers")
        _check_index(req.focus.head, facts.n_head, ("body", "focus", "head"), "heads per layer")
        focus = (req.focus.layer, req.focus.head)
        focus_fields = frozenset(req.focus.include)
        focus_region = _region(req.focus.region, n_tokens)
    include = set(req.include)
    _check_cells(svc, req, include, len(layers) * len(heads), n_tokens)
    return Selection(
        layers=layers,
        heads=heads,
        fields=frozenset(include - {"stats"}),
        stats="stats" in include,
        thumbnail=req.thumbnail,
        focus=focus,
        focus_fields=focus_fields,
        focus_thumbnail=req.focus.thumbnail if req.focus is not None else None,
        focus_region=focus_region,
    )


def _check_cells(svc: Service, req: AttentionRequest, include: set[str], n_heads: int, T: int) -> None:
    """Whole T×T matrices grow with T²: an answer holding more than the server's
    ``max_matrix_cells`` of them is refused before any computing, naming what to ask instead."""
    limit = svc.max_matrix_cells
    matrices = set(MATRIX_FIELDS)
    if svc.loaded.facts.softcap is None:  # attn_scores_uncapped comes only from layers with a softcap
        matrices.discard("attn_scores_uncapped")
    grid = n_heads * len(include & matrices) * T * T
    focus = 0
    if req.focus is not None and req.focus.thumbnail is None and req.focus.region is None:
        focus = len(set(req.focus.include) & matrices) * T * T
    if grid + focus <= limit:
        return
    if grid > limit:
        loc, what = ("body", "include"), f"include asks for {grid:,} cells of whole matrices"
        instead = "ask for fewer layers or heads, or a thumbnail of each head (thumbnail) with the matrices of one head (focus)"
    else:
        loc, what = ("body", "focus"), f"focus asks for {focus:,} cells of whole matrices"
        instead = "ask for focus.thumbnail (max-pooled) or focus.region (the exact cells of one block)"
    raise ApiError(
        422,
        f"{what} ({T} tokens: {T * T:,} cells per matrix); the limit is {limit:,} per answer: {instead}",
        loc=loc,
        type_="answer_too_large",
        ctx={"limit": limit, "count": grid + focus},
    )


def _region(region: list[int] | None, T: int) -> tuple[int, int, int, int] | None:
    """``focus.region`` checked against the text: rows and columns inside it, at most REGION_MAX each."""
    if region is None:
        return None
    q0, q1, k0, k1 = region
    loc = ("body", "focus", "region")
    if not (q0 < q1 <= T and k0 < k1 <= T):
        raise ApiError(
            422,
            f"focus.region is {region}; it needs q0 < q1 <= {T} and k0 < k1 <= {T} (the text is {T} tokens)",
            loc=loc,
            type_="region_out_of_range",
            ctx={"limit": T, "value": region},
        )
    if q1 - q0 > REGION_MAX or k1 - k0 > REGION_MAX:
        raise ApiError(
            422,
            f"focus.region is {q1 - q0}×{k1 - k0} cells; at most {REGION_MAX}×{REGION_MAX}",
            loc=loc,
            type_="region_too_large",
            ctx={"limit": REGION_MAX, "value": region},
        )
    return (q0, q1, k0, k1)


# ------------------------------------------------------------------ 2. compute


def top_predictions(
    values: torch.Tensor, indices: torch.Tensor, lse: torch.Tensor, displays: list[str], temperature: float
) -> list[list[dict[str, Any]]]:
    """The top logits ``values``/``indices`` (T, k) and ``lse = logsumexp(logits / temperature)``
    (:func:`model.backends.top_logits`) as probabilities of ``softmax(logits / temperature)``.

    Probabilities are floored to 6 significant digits, after scaling a row down in the
    (rounding-error) case where its top k would add up to more than 1: each list is sorted
    and sums to at most 1.
    """
    probs = torch.exp(values.double() / temperature - lse[:, None]).clamp_max(1.0)
    total = probs.sum(-1, keepdim=True)
    probs = torch.where(total > 1, probs / total, probs)
    p_rows = floor_sig(probs.cpu().numpy()).tolist()
    i_rows = indices.cpu().tolist()
    return [
        [{"token": displays[i], "id": i, "prob": p} for p, i in zip(p_row, i_row)]
        for p_row, i_row in zip(p_rows, i_rows)
    ]


def _predictions(svc: Service, hidden: torch.Tensor, top_k: int, temperature: float) -> list:
    """Top ``top_k`` next tokens after each position; the LM head runs only when they are asked for
    (the all-heads grid asks for none), a chunk of positions at a time."""
    values, indices, lse = top_logits(svc.loaded.backend, hidden, top_k, temperature)
    return top_predictions(values, indices, lse, svc.displays, temperature)


@dataclass
class AttentionResult:
    """POST /api/attention before encoding (without ``model`` and ``timing_ms``)."""

    tokens: list[str]
    token_ids: list[int]
    offsets: list[list[int]]
    causal: bool
    divisor: float
    sel: Selection
    capture: Capture
    predictions: list[list[dict[str, Any]]]


def compute_attention(svc: Service, req: AttentionRequest) -> AttentionResult:
    lm = svc.loaded
    enc = lm.tokenizer.encode(req.text)
    sel = select(svc, req, len(enc.ids))
    capture = Capture(sel)
    opts = AttentionOptions(
        causal=req.causal,
        divisor=scale_divisor(req.scale, lm.facts.head_dim),
        ablate=ablate_set(req.ablate, lm.facts),
    )
    hidden = lm.backend.hidden(enc.ids, opts, capture)  # (T, C)
    capture.finish()
    if not capture.finite():
        raise ApiError(
            422,
            f"scale {req.scale!r} makes the scores overflow; use a number from 0.001 to 10000",
            loc=("body", "scale"),
            type_="scale_overflow",
        )
    divisor = capture.layers[0].divisor if capture.layers else opts.divisor_for(lm.facts.divisor)
    return AttentionResult(
        tokens=enc.tokens,
        token_ids=enc.ids,
        offsets=[[start, end] for start, end in enc.offsets],
        causal=req.causal,
        divisor=divisor,
        sel=sel,
        capture=capture,
        predictions=_predictions(svc, hidden, req.top_k, req.temperature) if req.top_k else [[] for _ in enc.ids],
    )


def divisor_rule(scale: str | float, divisor: float, layer: int, facts: ModelFacts) -> str:
    """How a layer's divisor came about, as an expression the page puts in words:
    ``"sqrt(head_dim)"``, ``"sqrt(query_pre_attn_scalar)"``, ``"sqrt(head_dim) * (layer + 1)"``,
    ``"1"`` (scale "none"), ``"scale"`` (a number asked for), or ``"<value> (set by the model)"``."""
    if scale == "none":
        return "1"
    if scale == "sqrt_dk":
        return "sqrt(head_dim)"
    if not isinstance(scale, str):
        return "scale"
    root = math.sqrt(facts.head_dim)
    if math.isclose(divisor, facts.divisor, rel_tol=1e-6):
        return facts.divisor_rule.removeprefix("per layer: ")
    if math.isclose(divisor, root, rel_tol=1e-6):
        return "sqrt(head_dim)"
    if math.isclose(divisor, root * (layer + 1), rel_tol=1e-6):
        return "sqrt(head_dim) * (layer + 1)"
    return f"{divisor:g} (set by the model)"


# ------------------------------------------------------------------ 3. encode


def typed_array(a: np.ndarray, dtype: str) -> dict[str, Any]:
    """numpy -> ``{"dtype", "bdata", "shape"}``, Plotly.js's typed-array form (shape "r, c")."""
    a = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<"))
    return {"dtype": dtype, "bdata": base64.b64encode(a.data).decode("ascii"), "shape": ", ".join(map(str, a.shape))}


class Encoder:
    """How numbers go on the wire: ``json`` (rounded numbers) or ``b64`` (typed arrays)."""

    def __init__(self, encoding: str, precision: str, causal_layout: jsonfast.WeightLayout | None):
        self.b64 = encoding == "b64"
        self.float_dtype = precision
        self.layout = causal_layout

    def weights(self, a: np.ndarray, mask: np.ndarray) -> Any:
        """A (T, T) softmax matrix."""
        if self.b64:
            return typed_array(a, self.float_dtype)
        if self.layout is not None and np.array_equal(self.layout.mask, mask):
            return self.layout.write(a[None])[0]
        return jsonfast.weight_matrices(a[None], mask)[0]

    def matrix(self, a: np.ndarray, decimals: int = SCORE_DECIMALS) -> Any:
        """Scores (NaN where masked) or q/k/v."""
        if self.b64:
            return typed_array(a, self.float_dtype)
        return np.ascontiguousarray(np.round(a, decimals))

    def levels(self, a: np.ndarray) -> Any:
        """uint8 thumbnails and masks."""
        return typed_array(a, "u1") if self.b64 else a

    def rows(self, a: np.ndarray) -> Any:
        return typed_array(a, "f4") if self.b64 else np.round(a, PATTERN_DECIMALS)

    def field(self, name: str, a: np.ndarray, mask: np.ndarray) -> Any:
        if name in ("pattern", "pattern_unscaled"):
            return self.weights(a, mask)
        return self.matrix(a)


def _head_stats(stats: dict[str, np.ndarray], scalars: list, j: int, enc: Encoder, rows: bool) -> dict[str, Any]:
    out = {name: scalars[si][j] for si, name in enumerate(STAT_SCALARS)}
    if rows:
        out.update({name: enc.rows(stats[name][j]) for name in STAT_ROWS})
    return out


def encode_attention(result: AttentionResult, req: AttentionRequest, facts: ModelFacts) -> list[bytes]:
    """The JSON object as pieces to join, without its closing brace (``model`` and
    ``timing_ms`` come next). ``facts`` (the model's) name each layer's ``divisor_rule``."""
    cap, sel = result.capture, result.sel
    first_mask = cap.layers[0].mask if cap.layers else None
    layout = None
    if first_mask is not None and sel.fields & {"pattern", "pattern_unscaled"}:
        layout = jsonfast.WeightLayout(first_mask)
    enc = Encoder(req.encoding, req.precision, layout)
    T = len(result.token_ids)
    head: dict[str, Any] = {
        "tokens": result.tokens,
        "token_ids": result.token_ids,
        "offsets": result.offsets,
        "causal": result.causal,
        "scale": req.scale,
        "divisor": result.divisor,
        "encoding": req.encoding,
        "ablate": [{"layer": ref.layer, "head": ref.head} for ref in req.ablate],
    }
    # the T×T masks go with T×T matrices; an answer of thumbnails has them pooled (thumbnail.mask) instead
    full_matrices = bool(sel.fields & set(MATRIX_FIELDS)) or bool(cap.focus and not sel.focus_thumbnail)
    full_masks = not sel.thumbnail or full_matrices
    if first_mask is not None and full_masks:
        head["mask"] = enc.levels(first_mask.astype(np.uint8))
    if sel.thumbnail and cap.layers:
        n = cap.layers[0].thumbnail_mask.shape[0]
        block = thumbnail_block(T, sel.thumbnail)
        head["thumbnail"] = {"size": n, "block": block, "mask": enc.levels(cap.layers[0].thumbnail_mask)}
    parts = [dumps(head)[:-1], b',"layers":[']
    for i, lc in enumerate(cap.layers):
        layer_obj: dict[str, Any] = {"layer": lc.layer, "divisor": lc.divisor}
        layer_obj["divisor_rule"] = divisor_rule(req.scale, lc.divisor, lc.layer, facts)
        layer_obj["softcap"] = lc.softcap
        layer_obj["window"] = lc.window
        if first_mask is not None and lc.mask is not first_mask and not np.array_equal(lc.mask, first_mask):
            if full_masks:
                layer_obj["mask"] = enc.levels(lc.mask.astype(np.uint8))
            if lc.thumbnail_mask is not None:
                layer_obj["thumbnail_mask"] = enc.levels(lc.thumbnail_mask)
        parts.append((b"," if i else b"") + dumps(layer_obj)[:-1] + b',"heads":[')
        scalars = None
        if lc.stats:
            scalars = round_sig(np.stack([lc.stats[name] for name in STAT_SCALARS])).tolist()  # (S, H)
        for j, h in enumerate(sel.heads):
            fields: list[tuple[str, Any]] = []
            if lc.thumbnail is not None:
                fields.append(("thumbnail", enc.levels(lc.thumbnail[j])))
            for name in FIELDS:
                if name == "stats" and scalars is not None:
                    fields.append(("stats", _head_stats(lc.stats, scalars, j, enc, req.stats_rows)))
                elif name in lc.fields:
                    fields.append((name, enc.field(name, lc.fields[name][j], lc.mask)))
            parts.append(b'%s{"head":%d' % (b"," if j else b"", h))
            for name, value in fields:
                parts += (b',"', name.encode(), b'":', value if isinstance(value, bytes) else dumps(value))
            parts.append(b"}")
        parts.append(b"]}")
    parts.append(b"]")
    if sel.focus is not None and cap.focus is not None:
        layer, h = sel.focus
        mask = cap.focus_mask if cap.focus_mask is not None else np.ones((T, T), bool)
        parts.append(b',"focus":{"layer":%d,"head":%d' % (layer, h))
        if cap.focus_pooled is not None:
            k = thumbnail_block(T, sel.focus_thumbnail)
            pooled_mask = cap.focus_pooled_mask
            info = {"size": pooled_mask.shape[0], "block": k, "mask": enc.levels(pooled_mask)}
            parts += (b',"thumbnail":', dumps(info))
        for name in FIELDS:
            if name == "stats" and cap.focus_stats is not None:
                stats = {k: v[None] for k, v in cap.focus_stats.items()}
                scalars = round_sig(np.stack([stats[n] for n in STAT_SCALARS])).tolist()
                parts += (b',"stats":', dumps(_head_stats(stats, scalars, 0, enc, True)))
            elif cap.focus_pooled is not None and name in cap.focus_pooled:
                value = enc.matrix(cap.focus_pooled[name], PATTERN_DECIMALS if "pattern" in name else SCORE_DECIMALS)
                parts += (b',"', name.encode(), b'":', value if isinstance(value, bytes) else dumps(value))
            elif name in cap.focus:
                value = enc.field(name, cap.focus[name], mask)
                parts += (b',"', name.encode(), b'":', value if isinstance(value, bytes) else dumps(value))
        if cap.focus_region is not None:
            q0, q1, k0, k1 = sel.focus_region
            region: dict[str, Any] = {"bounds": [q0, q1, k0, k1]}
            for name in FIELDS:
                if name in cap.focus_region:
                    decimals = PATTERN_DECIMALS if "pattern" in name else SCORE_DECIMALS
                    region[name] = enc.matrix(cap.focus_region[name], decimals)
            parts += (b',"region":', dumps(region))
        parts.append(b"}")
    parts += (b',"predictions":', dumps(result.predictions))
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
    parts = encode_attention(result, req, svc.loaded.facts)
    t3 = time.perf_counter()
    total = (t3 - t0) * 1000
    parts += (b',"model":', svc.info_json, b',"timing_ms":', dumps(round(total, 3)), b"}")
    timings = {"queue": (t1 - t0) * 1000, "compute": (t2 - t1) * 1000, "encode": (t3 - t2) * 1000, "total": total}
    return b"".join(parts), timings


# ------------------------------------------------------------------ lessons

_EXACT = {"T", "C", "B", "seed", "draw", "head_size", "samples", "logits", "factor", "agree", "hist_raw", "hist_scaled"}


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


def lesson_bag_of_words(T: int, C: int, seed: int, draw: str = "rand", B: int = 4) -> dict[str, Any]:
    return _rounded(lessons.bag_of_words(T, C, seed, draw, B))


def lesson_softmax_scaling(logits: list[float], factor: float) -> dict[str, Any]:
    return _rounded(lessons.softmax_scaling(logits, factor))


def lesson_variance(head_size: int, T: int, seed: int, samples: int) -> dict[str, Any]:
    return _rounded(lessons.variance(head_size, T, seed, samples))
