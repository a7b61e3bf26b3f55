"""Request and response models of the lessons: ``POST /api/lessons/*`` (the notebooks' small experiments)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...model import lessons
from .common import Matrix, Strict

LOGIT_ABS_MAX = 1e6
FACTOR_MAX = 1e6


class BagOfWordsRequest(Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"T": 8, "C": 2, "seed": 1337}, {"draw": "randn", "seed": 42}]},
    )
    T: int = Field(8, ge=1, le=lessons.MAX_T, description="tokens")
    C: int = Field(2, ge=1, le=lessons.MAX_C, description="channels")
    seed: int = Field(1337, ge=0, le=lessons.MAX_SEED, description="torch.manual_seed(seed) before the draw")
    draw: Literal["rand", "randn"] = Field(
        "rand", description="x = torch.rand(B, T, C) (uniform, notebook 000) or torch.randn(B, T, C) (normal)"
    )
    B: int = Field(4, ge=1, le=lessons.MAX_B, description="batch drawn, as in the notebooks; x[0] is returned")


FiniteLogit = Annotated[float, Field(ge=-LOGIT_ABS_MAX, le=LOGIT_ABS_MAX, allow_inf_nan=False)]


class SoftmaxScalingRequest(Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"logits": [0.1, -0.2, 0.3, -0.2, 0.5], "factor": 8}]},
    )
    logits: list[FiniteLogit] = Field(
        default_factory=lambda: [0.1, -0.2, 0.3, -0.2, 0.5], min_length=1, max_length=lessons.MAX_LOGITS
    )
    factor: float = Field(8.0, gt=0, le=FACTOR_MAX, allow_inf_nan=False, description="the logits are multiplied by it")


class VarianceRequest(Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"head_size": 16, "T": 8, "seed": 1337, "samples": 4}]},
    )
    head_size: int = Field(16, ge=1, le=lessons.MAX_HEAD_SIZE)
    T: int = Field(8, ge=1, le=lessons.MAX_T)
    seed: int = Field(1337, ge=0, le=lessons.MAX_SEED)
    samples: int = Field(4, ge=1, le=lessons.MAX_SAMPLES, description="independent (T, head_size) draws of q and k")


# ------------------------------------------------------------------ responses


class BagOfWordsResponse(BaseModel):
    T: int
    C: int
    seed: int
    draw: str
    B: int
    x: Matrix = Field(description="x[0], (T, C)")
    loop: Matrix
    matmul: Matrix
    softmax: Matrix
    weights: Matrix
    agree: bool
    max_abs_diff: float


class SoftmaxScalingResponse(BaseModel):
    logits: list[float]
    factor: float
    softmax: list[float]
    softmax_scaled: list[float]
    var: float
    var_scaled: float
    entropy: float
    entropy_scaled: float


class VarianceResponse(BaseModel):
    head_size: int
    T: int
    seed: int
    samples: int
    var_q: float
    var_k: float
    var_scores_raw: float
    var_scores: float
    ratio: float
    bin_edges: list[float]
    hist_raw: list[int]
    hist_scaled: list[int]
