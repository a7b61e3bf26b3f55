"""Service settings, read from ``ATTNSCOPE_*`` environment variables (pydantic-settings).

| variable | default | meaning |
| --- | --- | --- |
| ``ATTNSCOPE_CHECKPOINT`` | the shipped model | checkpoint directory, or a ``.gguf`` file (or a folder holding one) |
| ``ATTNSCOPE_DEVICE`` | auto | ``cpu``, ``cuda``, ``cuda:1``, ``auto`` (CUDA when present) |
| ``ATTNSCOPE_DTYPE`` | fp32 | ``fp32``; on a GPU also ``bf16`` or ``fp16`` |
| ``ATTNSCOPE_HOST`` | ``127.0.0.1`` | address to bind; ``0.0.0.0`` only when asked (the container) |
| ``ATTNSCOPE_PORT`` | 8000 | |
| ``ATTNSCOPE_MAX_TEXT_CHARS`` | 16000 | longest ``text`` accepted (2,000+ tokens of English) |
| ``ATTNSCOPE_MAX_BODY_BYTES`` | 65536 | larger request bodies get 413 |
| ``ATTNSCOPE_MAX_CONCURRENCY`` | 0 = auto | model computations running at once; the rest wait |
| ``ATTNSCOPE_TORCH_THREADS`` | 0 = auto | torch intra-op threads |
| ``ATTNSCOPE_CORS_ORIGINS`` | empty = no CORS | comma-separated origins (or a JSON list) |
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..model.checkpoint import SHIPPED


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, which containers set), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSCOPE_", env_ignore_empty=True, extra="ignore")

    checkpoint: Path | None = Field(None, description="checkpoint directory or .gguf file; unset = the shipped model")
    device: str | None = Field(None, description="cpu, cuda, cuda:N or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="weights and activations; half only on a GPU")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_text_chars: int = Field(16000, ge=1, le=100_000)
    max_body_bytes: int = Field(65536, ge=1024)
    max_concurrency: int = Field(0, ge=0, description="0 = one per group of torch threads, at least 2")
    torch_threads: int = Field(0, ge=0, description="0 = the CPUs available, at most 8")
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value):
        if isinstance(value, str):
            value = value.strip()
            if value.startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def checkpoint_path(self) -> Path:
        return self.checkpoint if self.checkpoint is not None else SHIPPED

    @property
    def threads(self) -> int:
        """torch intra-op threads to use."""
        return self.torch_threads or min(8, cpu_count())

    @property
    def concurrency(self) -> int:
        """How many model computations may run at once."""
        return self.max_concurrency or max(2, cpu_count() // self.threads)
