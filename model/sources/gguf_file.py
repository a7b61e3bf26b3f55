"""What a GGUF file is before it is loaded: found, readable by transformers, and small enough.

:func:`preflight` tells, from the header alone (:func:`~model.sources.gguf_header.read_header`), each
reason a file cannot be opened in one line (:class:`~model.ours.checkpoint.CheckpointError`), not a
traceback from deep inside a loader:

* not a GGUF file, a corrupt header, or a truncated file (:mod:`model.sources.gguf_header`);
* an architecture transformers cannot read from GGUF (named, with the ones it can);
* a tensor type transformers cannot dequantize (named, with the file's quantization);
* the ``gguf``/``accelerate`` packages missing;
* not enough memory for the dequantized weights (parameters × bytes of the dtype), against
  ``MemAvailable`` in ``/proc/meminfo`` or the free memory of the GPU.

:func:`model.sources.gguf_load.load_gguf` then opens it. ``/api/model`` says ``"source_format": "gguf"``
and ``"quantization"``: the file's type as llama.cpp names it (``general.file_type``:
``Q4_K_M``, ``Q8_0``, ``F16``), else the type most of its weights are stored in.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..ours.checkpoint import CheckpointError
from .gguf_header import GGML_TYPES, GGUFHeader, read_header
from .ollama import ollama_name_of

INSTALL = 'pip install "attnscope[gguf]"'

# GGUF architecture names transformers spells differently (its load_gguf_checkpoint does the same)
_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_NOT_CAUSAL = {"t5": "an encoder-decoder", "t5encoder": "an encoder", "umt5": "an encoder-decoder"}
_NO_ATTENTION = {"mamba", "mamba2", "rwkv6", "rwkv7"}


# ------------------------------------------------------------------ finding a file


def find_gguf(path: str | Path) -> Path | None:
    """The GGUF file ``path`` names: the file itself, or the one ``.gguf`` in a directory that has
    no ``config.json``; None when ``path`` is a model directory (or missing, not ending in .gguf)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        found = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(found) > 1:
            names = ", ".join(p.name for p in found[:6]) + (", ..." if len(found) > 6 else "")
            raise CheckpointError(f"{path} holds {len(found)} .gguf files ({names}); name one: --checkpoint {found[0]}")
        return found[0] if found else None
    if path.suffix.lower() == ".gguf":
        raise CheckpointError(f"GGUF file not found: {path}")
    return None


# ------------------------------------------------------------------ what transformers can read


def readable_architectures() -> list[str]:
    """GGUF architectures transformers turns into a model (``general.architecture`` names)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    names = set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"}
    try:
        from transformers.integrations.gguf.gguf_conversion_mapping import GGUF_ARCHS

        names |= set(GGUF_ARCHS)
    except ImportError:
        pass
    back = {v: k for k, v in _ALIASES.items()}
    return sorted(back.get(n, n) for n in names)


def _native(arch: str) -> bool:
    """Whether transformers' own GGUF reader handles ``arch`` (else its loader needs the gguf package)."""
    try:
        from transformers.integrations.gguf.gguf_conversion_mapping import GGUF_ARCHS
    except ImportError:
        return False
    return arch in GGUF_ARCHS


def dequantizable(arch: str) -> set[str] | None:
    """The ggml type names transformers can dequantize for ``arch``; None if that cannot be told
    (the gguf package missing)."""
    floats = {"F32", "F16", "BF16"}
    if _native(arch):
        from transformers.integrations.gguf.dequant import GGML_NAME

        return floats | set(GGML_NAME.values())
    try:
        from gguf import quants
    except ImportError:
        return None
    traits = getattr(quants, "_type_traits", None)
    if traits is None:
        return None
    return {"F32", "F16"} | {t.name for t in traits}


def _missing_packages(arch: str) -> list[str]:
    import importlib.util

    wanted = ["transformers", "accelerate"] + ([] if _native(arch) else ["gguf"])
    return [name for name in wanted if importlib.util.find_spec(name) is None]


def check_readable(header: GGUFHeader) -> None:
    """Architecture, packages and tensor types: :class:`CheckpointError` naming what is wrong."""
    path, arch = header.path, header.architecture
    if arch in _NOT_CAUSAL:
        raise CheckpointError(
            f"{path} holds {_NOT_CAUSAL[arch]} model ({arch}); attnscope shows decoder-only causal LMs"
        )
    if arch in _NO_ATTENTION:
        raise CheckpointError(
            f"{path} holds a {arch} model, which has no softmax attention for attnscope to show (state-space "
            "and linear-attention models are not supported)"
        )
    try:
        import transformers
    except ImportError as e:
        raise CheckpointError(
            f"{path} is a GGUF model; opening it needs transformers, gguf and accelerate: {INSTALL}"
        ) from e
    known = readable_architectures()
    if arch not in known and _ALIASES.get(arch, arch) not in known:
        raise CheckpointError(
            f"{path}: transformers {transformers.__version__} cannot read the GGUF architecture {arch!r}; "
            f"it reads {', '.join(a for a in known if a not in _NOT_CAUSAL and a not in _NO_ATTENTION)}. "
            "If the model is on the Hugging Face Hub, its safetensors directory opens with --checkpoint DIR"
        )
    missing = _missing_packages(arch)
    if missing:
        raise CheckpointError(f"{path} is a GGUF model; opening it needs {' and '.join(missing)}: {INSTALL}")
    ok = dequantizable(arch)
    if ok is not None:
        bad = sorted({t.type_name for t in header.tensors} - ok)
        if bad:
            where = next(t.name for t in header.tensors if t.type_name in bad)
            raise CheckpointError(
                f"{path} ({header.quantization}) stores tensors as {', '.join(bad)} (e.g. {where}), which "
                f"transformers cannot dequantize; files in {', '.join(sorted(ok - {'BF16'}, key=_type_order))} open"
            )


def _type_order(name: str) -> int:
    return next((i for i, (n, _, _) in GGML_TYPES.items() if n == name), 999)


# ------------------------------------------------------------------ memory


def available_memory(device: torch.device) -> int | None:
    """Bytes free for the weights: the GPU's free memory, or ``MemAvailable`` on the host; None if unknown."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001 -- no driver, a busy device: not knowing is no reason to refuse
            return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_memory(header: GGUFHeader, device: torch.device, dtype: str) -> None:
    """Refuse in one line, before loading, a file whose dequantized weights do not fit."""
    from ..backends import DTYPES

    itemsize = DTYPES[dtype].itemsize
    need = header.parameters * itemsize
    places = [("this machine", torch.device("cpu"))] + ([(str(device), device)] if device.type == "cuda" else [])
    for where, dev in places:
        free = available_memory(dev)
        if free is not None and need > free:
            hint = " (--dtype bf16 on a GPU halves it)" if dtype == "fp32" else ""
            raise CheckpointError(
                f"{header.path.name} ({header.quantization}, {header.parameters / 1e9:.2f} B parameters) needs about "
                f"{gib(need)} dequantized to {dtype}{hint}; {where} has {gib(free)} available"
            )


# ------------------------------------------------------------------ before loading


def preflight(path: str | Path, device: torch.device | str = "cpu", dtype: str = "fp32") -> GGUFHeader:
    """Everything that can be told without loading: readable header, architecture, tensor types,
    packages, memory. Returns the header; :class:`CheckpointError` otherwise."""
    header = read_header(path)
    header.ollama_name = ollama_name_of(header.path)
    check_readable(header)
    check_memory(header, torch.device(device), dtype)
    return header


def describe(header: GGUFHeader) -> dict:
    """A short description for ``attnscope models``."""
    md = header.metadata
    return {
        "architecture": header.architecture,
        "name": md.get("general.name"),
        "quantization": header.quantization,
        "parameters": header.parameters,
        "context": md.get(f"{header.architecture}.context_length"),
        "bytes": header.file_size,
    }
