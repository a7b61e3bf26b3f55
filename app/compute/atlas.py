"""What ``GET /api/atlas`` and ``GET /api/atlas/heads/{layer}/{head}`` compute: a head atlas's
maps (and, with two atlases of the same shape, their difference), and one head's histograms and
exemplar contexts, each exemplar with the token the explorer opens it at.

Atlases are read once, when the server starts (:func:`load_atlases`, from ``--atlas DIR``);
the numbers are the atlas's own (:func:`model.atlas.read.read_atlas`), only arranged here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...model.atlas.read import META_FILE, Atlas, read_atlas
from ..errors import ApiError


class AtlasFolderError(Exception):
    """An atlas folder that cannot be served: one line naming the folder."""


def load_atlases(paths: list[Path]) -> dict[str, Atlas]:
    """``--atlas`` folders by id (the folder's name; ``-2`` after it where two share a name)."""
    atlases: dict[str, Atlas] = {}
    for path in paths:
        path = Path(path)
        if not (path / META_FILE).is_file():
            raise AtlasFolderError(
                f"{path}: not an atlas folder (no {META_FILE}; make one with attnscope atlas --out {path})"
            )
        try:
            atlas = read_atlas(path)
        except (OSError, ValueError, KeyError) as e:
            raise AtlasFolderError(f"{path}: cannot read the atlas ({type(e).__name__}: {e})") from None
        name = path.resolve().name or "atlas"
        atlases[name if name not in atlases else f"{name}-2"] = atlas
    return atlases


def _grid(a: np.ndarray) -> list[list[float | None]]:
    """(layers, heads) -> [layer][head] to 6 decimals, or 6 significant digits below 1 (a divergence of 1e-7
    bits stays one); NaN (not measured) as null."""
    return [[None if math.isnan(v) else float(f"{v:.6g}") if abs(v) < 1 else round(float(v), 6) for v in row]
            for row in a]


def _pick(atlases: dict[str, Atlas], atlas_id: str | None, field: str = "atlas") -> tuple[str, Atlas]:
    if not atlases:
        raise ApiError(
            404,
            "no atlas is served: start the server with --atlas DIR (make one with attnscope atlas)",
            loc=("query", field),
        )
    if atlas_id is None:
        atlas_id = next(iter(atlases))
    if atlas_id not in atlases:
        raise ApiError(
            422, f"{field} {atlas_id!r} is not served; the atlases are {sorted(atlases)}", loc=("query", field)
        )
    return atlas_id, atlases[atlas_id]


def _corpus(corpus: dict[str, Any]) -> dict[str, Any]:
    """The atlas's corpus as sent: each file by its name, not where it lay when the atlas was made
    (no absolute path of the server leaves it)."""
    files = [{**f, "path": Path(f["path"]).name} if f.get("path") else f for f in corpus.get("files", [])]
    return {**corpus, "files": files}


def about(atlas_id: str, atlas: Atlas) -> dict[str, Any]:
    """One atlas as ``GET /api/atlas`` lists it."""
    meta = atlas.meta
    return {
        "id": atlas_id,
        "model": meta["model"]["name"],
        "corpus": _corpus(meta["corpus"]),
        "tokens": int(meta.get("tokens_seen", 0)),
        "complete": bool(meta.get("complete", True)),
        "metrics": atlas.metrics,
        "definitions": {m: meta["metrics"][m]["definition"] for m in atlas.metrics if m in meta.get("metrics", {})},
        "layers": atlas.layers,
        "n_head": atlas.n_head,
        "settings": meta.get("settings", {}),
    }


def atlas_index(atlases: dict[str, Atlas], atlas_id: str | None, compare: str | None) -> dict[str, Any]:
    """Every atlas served, and the maps of one (``atlas``): ``{metric: [layer][head]}``; with
    ``compare``, ``difference`` = the atlas's maps minus ``compare``'s, over their shared metrics.
    No atlas served: an empty list (the page hides its Atlas tab), unless one was named."""
    if not atlases and atlas_id is None and compare is None:
        return {"atlases": [], "atlas": None, "layers": [], "maps": {}}
    atlas_id, atlas = _pick(atlases, atlas_id)
    out: dict[str, Any] = {
        "atlases": [about(i, a) for i, a in atlases.items()],
        "atlas": atlas_id,
        "layers": atlas.layers,
        "maps": {m: _grid(atlas.maps[m]) for m in atlas.metrics},
    }
    if compare is not None:
        compare, other = _pick(atlases, compare, "compare")
        if (other.layers, other.n_head) != (atlas.layers, atlas.n_head):
            raise ApiError(
                422,
                f"compare {compare!r} has layers {other.layers} × {other.n_head} heads, "
                f"{atlas_id!r} {atlas.layers} × "
                f"{atlas.n_head}: a difference needs models of the same shape",
                loc=("query", "compare"),
            )
        shared = [m for m in atlas.metrics if m in other.maps]
        out["compare"] = compare
        out["difference"] = {m: _grid(atlas.maps[m] - other.maps[m]) for m in shared}
    return out


def pick_head(atlases: dict[str, Atlas], atlas_id: str | None, layer: int, head: int) -> tuple[str, Atlas]:
    """The atlas asked for, checked to hold ``layer`` (an attention layer of it) and ``head``: 422s naming them."""
    atlas_id, atlas = _pick(atlases, atlas_id)
    if layer not in atlas.layers:
        raise ApiError(
            422,
            f"layer {layer} is not an attention layer of this atlas; its layers are {atlas.layers}",
            loc=("path", "layer"),
        )
    if not 0 <= head < atlas.n_head:
        raise ApiError(
            422, f"head {head} is out of range: this atlas has {atlas.n_head} heads per layer", loc=("path", "head")
        )
    return atlas_id, atlas


def atlas_head(
    atlases: dict[str, Atlas], atlas_id: str | None, layer: int, head: int, tokenizer=None
) -> dict[str, Any]:
    """One head: per metric its mean, std, count, histogram and bin edges, and its exemplars,
    each with ``query``, the index of its query token in ``text`` as ``tokenizer`` (the model
    being served) splits it, so the explorer opens at that token; null where no token starts there."""
    atlas_id, atlas = pick_head(atlases, atlas_id, layer, head)
    per_metric = atlas.head(layer, head)
    exemplars = []
    for metric, about_metric in per_metric.items():
        for row in about_metric.pop("exemplars"):
            exemplars.append(
                {
                    "metric": metric,
                    "value": row["value"],
                    "text": row["text"],
                    "query": _query_token(tokenizer, row),
                    "query_start": row["query_start"],
                    "query_end": row["query_end"],
                    "token": row["token"],
                    "window": row["window"],
                    "position": row["position"],
                    **({"message": row["message"], "role": row["role"]} if row.get("role") is not None else {}),
                }
            )
    for about_metric in per_metric.values():
        about_metric["mean"] = None if math.isnan(about_metric["mean"]) else about_metric["mean"]
        about_metric["std"] = None if math.isnan(about_metric["std"]) else about_metric["std"]
    return {"atlas": atlas_id, "layer": layer, "head": head, "metrics": per_metric, "exemplars": exemplars}


def _query_token(tokenizer, row: dict) -> int | None:
    """The index of the exemplar's query among the tokens of its ``text``: the token with its id and
    its span (the atlas cut the text so that its model's tokenizer reads it so, an earlier byte
    piece of a character having an empty span); for another model's tokenizer the token that
    covers the query's first character (a BOS, covering nothing, skipped)."""
    if tokenizer is None:
        return None
    enc = tokenizer.encode(row["text"])
    span = (row["query_start"], row["query_end"])
    for i, (token_id, offsets) in enumerate(zip(enc.ids, enc.offsets)):
        if token_id == row["token_id"] and tuple(offsets) == span:
            return i
    for i, (a, b) in enumerate(enc.offsets):
        if a <= span[0] < b:
            return i
    return None
