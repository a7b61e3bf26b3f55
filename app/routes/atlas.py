"""``GET /api/atlas``, ``GET /api/atlas/heads/{layer}/{head}`` and ``GET /api/atlas/heads/{layer}/{head}/qk``:
the head atlases the server was started with (``--atlas DIR``, one or two), their maps, one head's card
and its queries and keys drawn together."""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from ..compute.atlas import atlas_head, atlas_index
from ..compute.atlas_qk import atlas_qk
from ..deps import ERRORS_GET, ServiceDep, StateDep
from ..schemas.atlas import AtlasHeadResponse, AtlasQKResponse, AtlasResponse
from ..schemas.common import ErrorResponse

ERRORS = {
    404: {"model": ErrorResponse, "description": "no atlas is served (start with --atlas DIR)"},
    422: {"model": ErrorResponse, "description": "an unknown atlas, layer or head; detail names it"},
    **ERRORS_GET,
}
AtlasId = Annotated[str | None, Query(max_length=200, description="which atlas (its id); default the first")]


def make_router(max_text_chars: int) -> APIRouter:
    """The routes of this resource (every route module is built alike: ``max_text_chars`` is the
    server's text limit, which the request models of routes that take a text hold)."""
    router = APIRouter(tags=["atlas"])

    @router.get("/api/atlas", response_model=AtlasResponse, responses=ERRORS)
    async def atlas_route(
        state: StateDep,
        atlas: AtlasId = None,
        compare: Annotated[
            str | None, Query(max_length=200, description="a second atlas: `difference` = atlas − compare")
        ] = None,
    ):
        """The atlases served, one's maps per metric ([layer][head], the atlas's means), and with
        `compare` their difference; an empty list where the server has no atlas."""
        return atlas_index(state.atlases, atlas, compare)

    @router.get("/api/atlas/heads/{layer}/{head}", response_model=AtlasHeadResponse, responses=ERRORS)
    async def atlas_head_route(
        state: StateDep,
        layer: Annotated[int, Path(ge=0, le=4095, description="the model's own number of an attention layer")],
        head: Annotated[int, Path(ge=0, le=4095)],
        atlas: AtlasId = None,
    ):
        """One head of an atlas: per metric its histogram, mean and spread, and the exemplar contexts
        where the metric was highest, each with the token the explorer opens it at."""
        tokenizer = state.service.loaded.tokenizer if state.service is not None else None
        return await state.run(atlas_head, state.atlases, atlas, layer, head, tokenizer)  # tokenizes every exemplar

    @router.get("/api/atlas/heads/{layer}/{head}/qk", response_model=AtlasQKResponse, responses=ERRORS)
    async def atlas_qk_route(
        state: StateDep,
        svc: ServiceDep,
        layer: Annotated[int, Path(ge=0, le=4095, description="the model's own number of an attention layer")],
        head: Annotated[int, Path(ge=0, le=4095)],
        atlas: AtlasId = None,
    ):
        """The head's queries and keys at the positions of its exemplar contexts, projected together
        to two dimensions (keys moved onto the queries' mean, then PCA), as AttentionViz draws them."""
        return await state.run(atlas_qk, state.atlases, atlas, layer, head, svc)

    return router
