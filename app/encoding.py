"""Step 3 of ``POST /api/attention``: the answer (:func:`~.compute.attention.answer_of`) as JSON bytes.

Only encoding happens here, of the answer (a dict of numpy arrays and plain values) and of the masks
it is written by, passed as arrays; nothing of the forward pass or its capture is known here.
:func:`~.compute.attention.attention_json` calls it.

Two encodings of its matrices: ``json``, numbers (pattern weights to 5 decimals through the fast
writer of :mod:`.jsonfast`, scores and q/k/v to 4, masked scores ``null``), and ``b64``, every
matrix a typed array ``{"dtype", "bdata", "shape"}`` in the form Plotly.js reads. The answer is
written as pieces joined once at the end; ``timing_ms`` is always its last field.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..model.fields import DECIMALS, PART_FIELDS, ROW_FIELDS, WEIGHT_FIELDS
from . import jsonfast
from .compute.rounding import PATTERN_DECIMALS, SCORE_DECIMALS
from .responses import dumps


def typed_array(a: np.ndarray, dtype: str) -> dict[str, Any]:
    """numpy -> ``{"dtype", "bdata", "shape"}``, Plotly.js's typed-array form (shape "r, c")."""
    a = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<"))
    return {"dtype": dtype, "bdata": base64.b64encode(a.data).decode("ascii"), "shape": ", ".join(map(str, a.shape))}


class Encoder:
    """How numbers go on the wire: ``json`` (rounded numbers) or ``b64`` (typed arrays)."""

    def __init__(
        self, encoding: str, precision: str, causal_layout: jsonfast.WeightLayout | None, signed: bool = False
    ):
        self.b64 = encoding == "b64"
        self.float_dtype = precision
        self.layout = causal_layout
        self.signed = signed  # differential attention: `pattern` is first − λ·second, not in [0, 1]

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
        """A head's matrix at full resolution (weights over ``mask``, or scores), or a per-row field."""
        if name in ROW_FIELDS:
            return self.rows(a)
        if name == "pattern" and self.signed:  # as numbers: the fast writer knows only [0, 1]
            return self.matrix(a, DECIMALS[name])
        if name in PART_FIELDS:  # [2][T][T]: two softmax matrices
            first, second = self.weights(a[0], mask), self.weights(a[1], mask)
            if self.b64:
                return [first, second]
            return b"[" + _json(first) + b"," + _json(second) + b"]"
        if name in WEIGHT_FIELDS:
            return self.weights(a, mask)
        return self.matrix(a, DECIMALS[name])

    def pooled(self, name: str, a: np.ndarray) -> Any:
        """A max-pooled or cut-out matrix: rounded as its kind, no mask to write by (two for ``pattern_parts``)."""
        if name in PART_FIELDS:
            return [self.matrix(a[0], DECIMALS[name]), self.matrix(a[1], DECIMALS[name])]
        return self.matrix(a, DECIMALS[name])

    def stats(self, stats: dict[str, Any]) -> dict[str, Any]:
        return {name: self.rows(v) if isinstance(v, np.ndarray) else v for name, v in stats.items()}

    def with_levels(self, obj: dict[str, Any], *names: str) -> dict[str, Any]:
        """``obj`` with its masks or thumbnails ``names`` encoded, where present."""
        return {key: self.levels(v) if key in names else v for key, v in obj.items()}


def _json(value: Any) -> bytes:
    return value if isinstance(value, bytes) else dumps(value)


def _pieces(obj: dict[str, Any]) -> list[bytes]:
    """``obj``'s fields as JSON pieces ``,"name":value``; a value already bytes goes in as it is."""
    parts: list[bytes] = []
    for name, value in obj.items():
        parts += (b',"', name.encode(), b'":', value if isinstance(value, bytes) else dumps(value))
    return parts


def encode_answer(
    answer: dict[str, Any],
    precision: str,
    masks: list[np.ndarray],
    focus_mask: np.ndarray | None = None,
    signed: bool = False,
) -> list[bytes]:
    """The answer as pieces to join, without its closing brace (``model`` and ``timing_ms`` come
    next). ``masks``: each of ``answer["layers"]``'s (T, T) boolean mask, by which the json encoding
    writes the masked weights; ``focus_mask``: the focus head's layer's; ``signed``: a differential
    model, whose ``pattern`` (first − λ·second) goes as numbers rounded like weights, not through
    the [0, 1] fast writer."""
    layout = None
    if masks and _holds_weights(answer["layers"]):
        layout = jsonfast.WeightLayout(masks[0])
    enc = Encoder(answer["encoding"], precision, layout, signed)
    top = {key: value for key, value in answer.items() if key not in ("layers", "focus", "predictions")}
    top = enc.with_levels(top, "mask")
    if "thumbnail" in top:
        top["thumbnail"] = enc.with_levels(top["thumbnail"], "mask")
    parts = [dumps(top)[:-1], b',"layers":[']
    for i, (layer, mask) in enumerate(zip(answer["layers"], masks, strict=True)):
        about = enc.with_levels({k: v for k, v in layer.items() if k != "heads"}, "mask", "thumbnail_mask")
        parts.append((b"," if i else b"") + dumps(about)[:-1] + b',"heads":[')
        for j, h in enumerate(layer["heads"]):
            if layer.get("implicit"):  # M and its thumbnail, signed: as numbers rounded like weights
                fields = {name: _implicit_field(enc, name, value) for name, value in h.items() if name != "head"}
            else:
                fields = {name: _head_field(enc, name, value, mask) for name, value in h.items() if name != "head"}
            parts.append(b'%s{"head":%d' % (b"," if j else b"", h["head"]))
            parts += _pieces(fields)
            parts.append(b"}")
        parts.append(b"]}")
    parts.append(b"]")
    if "focus" in answer:
        parts += _focus(enc, answer["focus"], focus_mask)
    parts += (b',"predictions":', dumps(answer["predictions"]))
    return parts


def _holds_weights(layers: list[dict[str, Any]]) -> bool:
    """Whether a head of ``layers`` holds a softmax matrix at full resolution (worth a
    :class:`~.jsonfast.WeightLayout`, shared by the layers whose mask is the first's)."""
    return any(name in WEIGHT_FIELDS for layer in layers for head in layer["heads"] for name in head)


def _focus(enc: Encoder, focus: dict[str, Any], mask: np.ndarray | None) -> list[bytes]:
    """The focus head's pieces: max-pooled matrices (it has a ``thumbnail``) and a region's cells
    rounded as their kind, matrices at full resolution as a layer's head (weights over ``mask``)."""
    pooled = "thumbnail" in focus
    fields: dict[str, Any] = {}
    for name, value in focus.items():
        if name == "thumbnail":
            fields[name] = enc.with_levels(value, "mask")
        elif name == "region":
            fields[name] = {k: v if k == "bounds" else enc.pooled(k, v) for k, v in value.items()}
        elif name == "stats":
            fields[name] = enc.stats(value)
        elif name not in ("layer", "head"):
            fields[name] = enc.pooled(name, value) if pooled else enc.field(name, value, mask)
    return [b',"focus":{"layer":%d,"head":%d' % (focus["layer"], focus["head"]), *_pieces(fields), b"}"]


def _implicit_field(enc: Encoder, name: str, value: Any) -> Any:
    """One field of an implicit head: M or its signed thumbnail as numbers, or its statistics."""
    return enc.stats(value) if name == "stats" else enc.matrix(value, DECIMALS["pattern"])


def _head_field(enc: Encoder, name: str, value: Any, mask: np.ndarray) -> Any:
    """One field of a head in a layer."""
    if name == "thumbnail":
        return enc.levels(value)
    if name == "stats":
        return enc.stats(value)
    return enc.field(name, value, mask)
