"""``GET /api/atlas/heads/{layer}/{head}/qk``: one head's queries and keys drawn together, as
AttentionViz draws them (Yeh et al., 2023). The positions are those of the head's exemplar
contexts in the atlas; their ``q`` and ``k`` come from the model being served (the atlas's own
model, else a 422), one forward pass per context, as ``POST /api/attention`` computes them.

Keys are moved so that their mean is the queries' mean (a softmax row does not change when the
same vector is added to every key, so only the keys' spread says where queries look), then
queries and keys are projected together onto their first two principal components.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...model.atlas.read import Atlas
from ..errors import ApiError
from ..schemas.attention import AttentionRequest
from ..service import Service
from ..subject import subject_of
from .atlas import pick_head
from .attention import compute_attention

MAX_CONTEXTS = 64  # contexts (each one forward pass) one answer projects


def _qk(svc: Service, text: str, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(T, hs) q and k of one head for ``text``, and its tokens."""
    body = AttentionRequest.model_construct(
        text=text, layers=[layer], heads=[head], include=["q", "k"], top_k=0, causal=True, scale="model", ablate=[]
    )
    result = compute_attention(svc, body, subject_of(svc, body))
    fields = result.capture.layers[0].fields
    return fields["q"][0], fields["k"][0], result.tokens


def atlas_qk(atlases: dict[str, Atlas], atlas_id: str | None, layer: int, head: int, svc: Service) -> dict[str, Any]:
    """The head's queries and keys over its exemplar contexts, projected to 2-D together."""
    atlas_id, atlas = pick_head(atlases, atlas_id, layer, head)
    measured = atlas.meta["model"]["name"]
    if measured != svc.info["name"]:
        raise ApiError(
            422,
            f"atlas {atlas_id!r} measured {measured}; the server runs {svc.info['name']}: queries and keys "
            "come from the model being served",
            loc=("query", "atlas"),
        )
    per_metric = atlas.exemplars.get((layer, head), {})
    texts = list(dict.fromkeys(row["text"] for rows in per_metric.values() for row in rows))[:MAX_CONTEXTS]
    if not texts:
        raise ApiError(
            422, f"atlas {atlas_id!r} kept no exemplar contexts (made with --exemplars 0): no positions to project",
            loc=("query", "atlas"),
        )
    qs, ks, rows = [], [], []
    for t, text in enumerate(texts):
        q, k, tokens = _qk(svc, text, layer, head)
        qs.append(q)
        ks.append(k)
        rows += [(t, i, tok) for i, tok in enumerate(tokens)]
    q, k = np.concatenate(qs).astype(np.float64), np.concatenate(ks).astype(np.float64)  # (n, hs) each
    k = k - k.mean(0) + q.mean(0)  # the keys' mean onto the queries': the same softmax rows
    both = np.concatenate([q, k])  # (2n, hs)
    centred = both - both.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    xy = centred @ vt[:2].T  # (2n, 2)
    variance = s**2
    n = len(rows)
    points = [
        {
            "kind": kind,
            "x": round(float(xy[j, 0]), 5),
            "y": round(float(xy[j, 1]), 5),
            "context": t,
            "position": i,
            "token": tok,
        }
        for kind, offset in (("q", 0), ("k", n))
        for j, (t, i, tok) in ((offset + m, row) for m, row in enumerate(rows))
    ]
    return {
        "atlas": atlas_id,
        "layer": layer,
        "head": head,
        "texts": texts,
        "points": points,
        "explained": [round(float(v / variance.sum()), 5) for v in variance[:2]],
    }
