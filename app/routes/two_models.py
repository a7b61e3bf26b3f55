"""The two-models view's route, URL ``POST /api/compare-models``: see :mod:`attnscope.app.compute.two_models`."""


from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..compute.models import machine_models
from ..compute.two_models import check_head, one_sequence, second_service, two_models_json
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.two_models import TwoModelsLoading, TwoModelsRequest, TwoModelsResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(TwoModelsRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)  # in the served model; model_b's is laid out when it is loaded

    @router.post(
        "/api/compare-models",
        response_model=TwoModelsResponse,
        responses={
            **ERRORS_POST,
            202: {"model": TwoModelsLoading, "description": "model_b is loading beside the served model: ask again"},
            409: {"description": "another model is loading (a switch, or another model_b)"},
            507: {"description": "model_b does not fit in memory beside the served model"},
        },
    )
    async def two_models_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ):
        """Two models on one text, head by head: per head the Jensen-Shannon divergence of their rows
        (bits, mean over queries), the largest |difference| of a weight and the share of rows whose
        heaviest key agrees; the chosen head's two patterns. ``model_b`` is any model of ``GET
        /api/models``: the first request loads it beside the served one and answers 202."""
        from ..lifespan import load_service

        one_sequence(svc)
        check_head(svc, body)
        settings = state.settings
        models = machine_models(state)

        def load(path):
            return load_service(settings.model_copy(update={"checkpoint": path, "model": None, "jlens": None}))

        second = second_service(state, models, body.model_b, load)
        if second is None:
            return JSONResponse({"model_b": body.model_b, "status": "loading"}, status_code=202)
        return RawJSONResponse(await state.run(two_models_json, svc, second, body, prompt))

    return router
