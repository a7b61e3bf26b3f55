"""``POST /api/lessons/*``: the notebooks' small experiments, computed on the server for the lessons page."""

from __future__ import annotations

from fastapi import APIRouter

from ..compute import lessons
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute
from ..responses import ORJSONResponse
from ..schemas.lessons import (
    BagOfWordsRequest,
    BagOfWordsResponse,
    SoftmaxScalingRequest,
    SoftmaxScalingResponse,
    VarianceRequest,
    VarianceResponse,
)

# each route waits for the model like the others (ServiceDep: 503 before it is loaded)


def make_router(max_text_chars: int) -> APIRouter:
    """The routes of this resource (every route module is built alike: ``max_text_chars`` is the
    server's text limit, which the request models of routes that take a text hold)."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["lessons"], responses=ERRORS_POST)

    @router.post("/api/lessons/bag-of-words", response_model=BagOfWordsResponse)
    async def bag_of_words(body: BagOfWordsRequest, svc: ServiceDep, state: StateDep) -> ORJSONResponse:
        """Causal running mean three ways (loop, `tril` matmul, masked softmax): all agree."""
        return ORJSONResponse(
            await state.run(lessons.lesson_bag_of_words, body.T, body.C, body.seed, body.draw, body.B)
        )

    @router.post("/api/lessons/softmax-scaling", response_model=SoftmaxScalingResponse)
    async def softmax_scaling(body: SoftmaxScalingRequest, svc: ServiceDep, state: StateDep) -> ORJSONResponse:
        """Softmax of the logits and of the logits × factor: larger spread, peakier weights."""
        return ORJSONResponse(await state.run(lessons.lesson_softmax_scaling, body.logits, body.factor))

    @router.post("/api/lessons/variance", response_model=VarianceResponse)
    async def variance(body: VarianceRequest, svc: ServiceDep, state: StateDep) -> ORJSONResponse:
        """Variance of q·kᵀ for unit-variance q and k: about head_size, about 1 once scaled."""
        return ORJSONResponse(await state.run(lessons.lesson_variance, body.head_size, body.T, body.seed, body.samples))

    return router
