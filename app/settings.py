"""Service settings, read from ``ATTNSCOPE_*`` environment variables (pydantic-settings).

| variable | default | meaning |
| --- | --- | --- |
| ``ATTNSCOPE_CHECKPOINT`` | the shipped model | checkpoint directory, or a ``.gguf`` file (or a folder holding one) |
| ``ATTNSCOPE_MODEL`` | unset | a model by its Hugging Face name, ``ORG/NAME[@REVISION]`` (the Hub cache first; \
the checkpoint wins when both are set) |
| ``ATTNSCOPE_DEVICE`` | auto | ``cpu``, ``cuda``, ``cuda:1``, ``auto`` (CUDA when present) |
| ``ATTNSCOPE_DTYPE`` | fp32 | ``fp32``; on a GPU also ``bf16`` or ``fp16`` |
| ``ATTNSCOPE_DEVICE_MAP`` | unset | ``auto``, ``balanced`` or JSON ``{module: 0 | "cpu" | "disk"}`` (accelerate) |
| ``ATTNSCOPE_MAX_MEMORY`` | unset | with a device map: the most per device, ``0=20GiB,cpu=60GiB`` or JSON |
| ``ATTNSCOPE_OFFLOAD_FOLDER`` | unset | with a device map: where the layers put on ``"disk"`` are written |
| ``ATTNSCOPE_HOST`` | ``127.0.0.1`` | address to bind; ``0.0.0.0`` only when asked (the container) |
| ``ATTNSCOPE_PORT`` | 8000 | |
| ``ATTNSCOPE_MAX_TEXT_CHARS`` | 8 per token of context, ≥ 16000 | longest ``text`` accepted \
(the limit is the context in tokens) |
| ``ATTNSCOPE_MAX_BODY_BYTES`` | 4 per text character, ≥ 65536 | larger request bodies get 413 |
| ``ATTNSCOPE_MAX_IMAGE_BYTES`` | 16777216 (16 MiB) | largest image (image-text models), encoded; \
the body limit of the routes taking an image grows by it |
| ``ATTNSCOPE_MAX_IMAGE_PIXELS`` | 40000000 | most pixels of an image, read from its header \
before decoding (more: 422) |
| ``ATTNSCOPE_MAX_AUDIO_BYTES`` | 33554432 (32 MiB) | largest recording (speech models), encoded; \
the body limit of the routes taking audio grows by it |
| ``ATTNSCOPE_MAX_MATRIX_CELLS`` | 134217728 (2²⁷) | most cells of whole T×T matrices in one answer (more: 422) |
| ``ATTNSCOPE_MAX_CONCURRENCY`` | 0 = auto | model computations running at once; the rest wait |
| ``ATTNSCOPE_TORCH_THREADS`` | 0 = auto | torch intra-op threads |
| ``ATTNSCOPE_CORS_ORIGINS`` | empty = no CORS | comma-separated origins (or a JSON list) |
| ``ATTNSCOPE_MODELS_DIR`` | unset | a folder of models (transformers folders, ``.gguf`` files) that \
``GET /api/models`` lists and ``/api/compare-models`` and ``POST /api/model`` open by name |
| ``ATTNSCOPE_ATLAS`` | none | one or two head atlases (``attnscope atlas --out DIR``), \
comma-separated: the Atlas view |
| ``ATTNSCOPE_JLENS`` | none | a Jacobian lens (``attnscope jlens --out LENS.pt``), or ``ORG/NAME:FILE`` in the \
local Hugging Face cache: ``POST /api/lens`` with ``"lens": "jacobian"`` |
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..model.ours.checkpoint import SHIPPED
from ..model.registry import Placement, context_tokens
from ..model.sources.hub import resolve_hub
from .schemas.attention import MAX_AUDIO_BYTES, MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, MAX_MATRIX_CELLS

CHARS_PER_TOKEN = 8  # the text guard per token of context: English runs 3-5 characters a token


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, which containers set), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSCOPE_", env_ignore_empty=True, extra="ignore")

    checkpoint: Path | None = Field(None, description="checkpoint directory or .gguf file; unset = the shipped model")
    model: str | None = Field(None, description="ORG/NAME[@REVISION] on the Hugging Face Hub (its cache first)")
    device: str | None = Field(None, description="cpu, cuda, cuda:N or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="weights and activations; half only on a GPU")
    device_map: str | None = Field(None, description='auto, balanced, or a JSON object {module: 0 | "cpu" | "disk"}')
    max_memory: str | None = Field(None, description="with a device map: most per device, 0=20GiB,cpu=60GiB or JSON")
    offload_folder: Path | None = Field(None, description="with a device map: the folder for the layers put on disk")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_text_chars: int | None = Field(
        None,
        ge=1,
        le=4_000_000,
        description=f"unset = {CHARS_PER_TOKEN} per token of the model's context, at least 16000",
    )
    max_body_bytes: int | None = Field(
        None, ge=1024, description="unset = 4 bytes per character of text, at least 64 KiB"
    )
    max_image_bytes: int = Field(MAX_IMAGE_BYTES, ge=1024, description="largest image, in encoded bytes")
    max_image_pixels: int = Field(MAX_IMAGE_PIXELS, ge=1, description="most pixels of an image (width × height)")
    max_audio_bytes: int = Field(MAX_AUDIO_BYTES, ge=1024, description="largest recording, in encoded bytes")
    max_matrix_cells: int = Field(
        MAX_MATRIX_CELLS, ge=1024, description="most cells of whole T×T matrices in one answer; more is a 422"
    )
    max_concurrency: int = Field(0, ge=0, description="0 = one per group of torch threads, at least 2")
    torch_threads: int = Field(0, ge=0, description="0 = the CPUs available, at most 8")
    compile: bool = Field(
        False, description="compile the statistics' block passes (torch.compile): fewer GPU kernel launches"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    models_dir: Path | None = Field(
        None,
        description="a folder whose model folders and .gguf files GET /api/models lists and requests open by name",
    )
    atlas: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, max_length=2, description="head atlases to serve (attnscope atlas --out DIR), one or two"
    )

    jlens: str | None = Field(
        None, description="a Jacobian lens file (attnscope jlens --out), or ORG/NAME:FILE in the local Hub cache"
    )

    @field_validator("atlas", mode="before")
    @classmethod
    def _split_atlases(cls, value):
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value):
        if isinstance(value, str):
            value = value.strip()
            if value.startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("device_map", "max_memory")
    @classmethod
    def _placement_parses(cls, value, info):
        """``device_map`` and ``max_memory`` are kept as written once they parse (else the parser's error)."""
        if value is not None:
            (parse_device_map if info.field_name == "device_map" else parse_max_memory)(value)
        return value

    def placement(self) -> Placement | None:
        """Where accelerate puts the layers (``--device-map``), or None: all on ``device``."""
        if self.device_map is None:
            return None
        return Placement(
            device_map=parse_device_map(self.device_map),
            max_memory=parse_max_memory(self.max_memory) if self.max_memory else None,
            offload_folder=str(self.offload_folder) if self.offload_folder else None,
        )

    _resolved: Path | None = PrivateAttr(None)

    @property
    def checkpoint_path(self) -> Path:
        """The folder or file to open: the checkpoint, else the Hub model's folder in the cache
        (found, or downloaded, once; :class:`~model.ours.checkpoint.CheckpointError` if neither),
        else the shipped model."""
        if self.checkpoint is not None:
            return self.checkpoint
        if self.model:
            if self._resolved is None:
                self._resolved = resolve_hub(self.model)
            return self._resolved
        return SHIPPED

    def text_limit(self) -> int:
        """The longest ``text`` accepted, in characters: a guard only, since the real limit is the
        model's context in tokens (checked after tokenizing). It leaves room for
        :data:`CHARS_PER_TOKEN` characters per token of context, and never less than 16000."""
        if self.max_text_chars is not None:
            return self.max_text_chars
        return max(16000, CHARS_PER_TOKEN * (context_tokens(self.checkpoint_path) or 0))

    def body_limit(self) -> int:
        """The largest request body, in bytes: room for the text limit in UTF-8 (4 bytes a character)."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return max(65536, 4 * self.text_limit())

    def image_limits(self) -> dict[str, int]:
        """An image-text model's image limits, as ``/api/model`` shows them."""
        return {"max_bytes": self.max_image_bytes, "max_pixels": self.max_image_pixels}

    def image_body_limit(self) -> int | None:
        """The body limit of a request that may carry an image: the text's, plus the image's bytes in
        base64 and a data: URL's prefix; ``None`` for a model that reads text only (its config has no
        ``vision_config``), whose every request keeps :meth:`body_limit`. The base64 may be wrapped
        in lines of 76 characters: room for a line break each, CRLF escaped in JSON (4 bytes)."""
        if not self.reads_images():
            return None
        return self._with_upload(self.max_image_bytes)

    def audio_body_limit(self) -> int | None:
        """As :meth:`image_body_limit`, for a speech model's recording (``None`` for any other model)."""
        return self._with_upload(self.max_audio_bytes) if self.reads_audio() else None

    def _with_upload(self, max_bytes: int) -> int:
        encoded = 4 * (max_bytes + 2) // 3
        return self.body_limit() + encoded + 4 * (encoded // 76 + 1) + 1024

    def upload(self) -> tuple[str, int | None, int]:
        """The part of a request that raises its body limit on this model: ``("audio", body limit, max_bytes)``
        on a speech model, else the image's (body limit ``None`` on a text model)."""
        if self.reads_audio():
            return "audio", self.audio_body_limit(), self.max_audio_bytes
        return "image", self.image_body_limit(), self.max_image_bytes

    def _config(self) -> dict:
        try:
            from ..model.ours.checkpoint import read_config

            return read_config(self.checkpoint_path)
        except Exception:  # no config.json (ours is read the same way; a GGUF file has none): text only
            return {}

    def reads_images(self) -> bool:
        """Whether the checkpoint is an image-text model (its config has a ``vision_config``), read
        from its config alone, before any weights load."""
        return "vision_config" in self._config()

    def reads_audio(self) -> bool:
        """Whether the checkpoint is a speech-to-text model (Whisper's kind), read from its config alone."""
        from ..model.speech.audio import hears

        return hears(self._config())

    @property
    def threads(self) -> int:
        """torch intra-op threads to use."""
        return self.torch_threads or min(8, cpu_count())

    @property
    def concurrency(self) -> int:
        """How many model computations may run at once."""
        return self.max_concurrency or max(2, cpu_count() // self.threads)


DEVICE_MAP_NAMES = ("auto", "balanced", "balanced_low_0", "sequential")


def _device(value):
    """A device of a device map or memory limit: a GPU number (``0``, ``"0"``), ``"cpu"``, ``"disk"``, ``"cuda:N"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, str) and (value in ("cpu", "disk", "mps") or value.startswith("cuda:")):
        return value
    raise ValueError(f"{value!r} is not a device (a GPU number, cpu, disk or cuda:N)")


def parse_device_map(value: str) -> str | dict:
    """``auto``, ``balanced`` (accelerate's names) or a JSON object {module name: device}; ValueError otherwise."""
    value = value.strip()
    if value in DEVICE_MAP_NAMES:
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(f"use {', '.join(DEVICE_MAP_NAMES)} or a JSON object {{module: device}}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError("a device map in JSON is an object {module name: device}, not empty")
    return {str(k): _device(v) for k, v in parsed.items()}


def parse_max_memory(value: str) -> dict:
    """``0=20GiB,cpu=60GiB`` or a JSON object of the same: {device: size}; ValueError otherwise."""
    value = value.strip()
    if value.startswith("{"):
        pairs = list(json.loads(value).items())
    else:
        pairs = [part.split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValueError("use DEVICE=SIZE pairs, comma-separated (0=20GiB,cpu=60GiB), or a JSON object")
    out = {}
    for key, size in pairs:
        size = str(size).strip()
        if not size or not (size[0].isdigit()):
            raise ValueError(f"{size!r} is not a size (20GiB, 500MB, or bytes)")
        out[_device(key.strip() if isinstance(key, str) else key)] = int(size) if size.isdigit() else size
    return out
