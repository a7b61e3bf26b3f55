"""``POST /api/lens``: the top tokens of the final norm and unembedding after every block, read
through the logit lens or a fitted Jacobian lens, and (``heads``) each head's write read the same way."""

from __future__ import annotations

from ....model.causal import NotSplittable
from ....model.causal.lens import Unsupported, lens
from ....model.jlens.readout import head_readout, jacobian_lens
from ...errors import ApiError
from ...responses import dumps
from ...schemas.lens import LensRequest
from ...service import Service
from ...subject import Prompt
from ..attention import top_predictions
from ..rounding import floor_sig
from . import elapsed_ms, not_exact


def lens_json(svc: Service, req: LensRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/lens answer: the top tokens of the final norm and unembedding after every block."""
    t0 = prompt.started if started is None else started
    if req.lens == "jacobian" and svc.jlens is None:
        raise ApiError(422, "no Jacobian lens is loaded: start the server with --jlens FILE (attnscope jlens "
                       "fits one), or ask for the logit lens", loc=("body", "lens"), type_="no_jacobian_lens")
    if prompt.stack == "encoder" and svc.loaded.facts.architecture == "encoder-decoder":
        msg = "the lens reads the decoder's residual stream at each target token: ask the decoder or cross stack"
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_unsupported")
    if req.heads:
        _check_heads_size(svc, len(prompt.ids))
    try:
        if req.lens == "jacobian":
            after, got = jacobian_lens(prompt.backend, svc.jlens, prompt.ids, req.top_k)
        else:
            got = lens(prompt.backend, prompt.ids, req.top_k)
            after = ["embed", *range(len(got.values) - 1)]  # an encoder-decoder: the decoder's layers
    except Unsupported as e:
        raise not_exact(e, "text") from None
    residuals = [
        {"after": a, "top": top_predictions(got.values[i], got.indices[i], got.lse[i], svc.displays, 1.0)}
        for i, a in enumerate(after)
    ]
    body = {"tokens": prompt.tokens, **prompt.adds, "lens": req.lens, "residuals": residuals}
    if req.heads:
        body["heads"] = _heads(svc, prompt, req, got.indices[-1][:, 0])  # the model's own guess at each token
    body["timing_ms"] = elapsed_ms(t0)
    return dumps(body)


def _check_heads_size(svc: Service, T: int) -> None:
    """Every head's write at every position is held at once (float64): its numbers are kept within the
    server's ``max_matrix_cells``, else a 422 naming ``heads`` (before anything runs)."""
    facts = svc.loaded.facts
    cells = facts.n_layer * facts.n_head * T * facts.d_model
    if cells > svc.max_matrix_cells:
        most = svc.max_matrix_cells // (facts.n_layer * facts.n_head * facts.d_model)
        raise ApiError(422, f"heads: every head's write at every token is {cells:,} numbers ({T} tokens × "
                       f"{facts.n_head} heads × {facts.n_layer} layers × d_model {facts.d_model}); the limit is "
                       f"{svc.max_matrix_cells:,} per answer, at most {most} tokens on this model",
                       loc=("body", "heads"), type_="answer_too_large",
                       ctx={"limit": svc.max_matrix_cells, "count": cells})


def _heads(svc: Service, prompt, req: LensRequest, final_ids) -> list:
    """``[layer][head]`` of ``{"top": [T][top_k]}``: each head's write read through its layer's J (the
    identity for the logit lens and after the last block), with ``final_prob``: the probability each
    reading gives the model's own guess at each token; a layer the lens has no J for is null."""
    try:
        lens = svc.jlens if req.lens == "jacobian" else None
        got = head_readout(prompt.backend, lens, prompt.ids, req.top_k, final_ids)
    except (NotSplittable, Unsupported) as e:
        raise ApiError(422, f"the heads' writes cannot be split exactly on this model: {e}", loc=("body", "heads"),
                       type_="not_splittable") from None

    def one(layer: int, h: int) -> dict:
        top = top_predictions(got.values[layer, h], got.indices[layer, h], got.lse[layer, h], svc.displays, 1.0)
        return {"top": top, "final_prob": floor_sig(got.final[layer, h].exp().clamp_max(1.0).numpy()).tolist()}

    n_head = got.values.shape[1]
    return [[one(layer, h) for h in range(n_head)] if read else None for layer, read in enumerate(got.read)]
