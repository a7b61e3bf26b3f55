"""GGUF files (llama.cpp, Ollama, LM Studio) opened through transformers' GGUF loader.

transformers reads a ``.gguf`` file's metadata as the config and the tokenizer and dequantizes
its tensors to full precision (``from_pretrained(dir, gguf_file=file)``, with the ``gguf`` and
``accelerate`` packages: ``pip install "attnscope[gguf]"``); the model then runs through our
attention function like any other transformers family (:mod:`model.hf_backend`).

Before anything heavy, the file's header is read here (a few KB, no ``gguf`` package needed)
so that a bad file is one line, not a traceback from deep inside a loader:

* not a GGUF file, a corrupt header, or a truncated file (its tensors end past the file's end);
* an architecture transformers cannot read from GGUF (named, with the ones it can);
* a tensor type transformers cannot dequantize (named, with the file's quantization);
* the ``gguf``/``accelerate`` packages missing;
* not enough memory for the dequantized weights (parameters × bytes of the dtype), against
  ``MemAvailable`` in ``/proc/meminfo`` or the free memory of the GPU.

``/api/model`` then says ``"source_format": "gguf"`` and ``"quantization"``: the file's type as
llama.cpp names it (``general.file_type``: ``Q4_K_M``, ``Q8_0``, ``F16``), else the type most
of its weights are stored in.
"""

from __future__ import annotations

import logging
import math
import mmap
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checkpoint import CheckpointError

log = logging.getLogger(__name__)

MAGIC = b"GGUF"
INSTALL = 'pip install "attnscope[gguf]"'

# ggml tensor types: id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

# general.file_type (llama.cpp's LlamaFileType) -> the name a user sees on the file
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
    18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
    25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
    32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}  # fmt: skip

# metadata value types: fixed-size ones as struct formats; 8 is a string, 9 an array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_KEEP = 64  # arrays up to this long are kept as lists; longer ones (vocabularies) as their length

# GGUF architecture names transformers spells differently (its load_gguf_checkpoint does the same)
_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_NOT_CAUSAL = {"t5": "an encoder-decoder", "t5encoder": "an encoder", "umt5": "an encoder-decoder"}
_NO_ATTENTION = {"mamba", "mamba2", "rwkv6", "rwkv7"}


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # torch order (ggml stores the fastest dimension first)
    ggml_type: int
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        _, block, size = GGML_TYPES[self.ggml_type]
        return self.elements // block * size


@dataclass
class GGUFHeader:
    """What a GGUF file says about itself: metadata, tensor table, where the data lies."""

    path: Path
    version: int
    metadata: dict
    tensors: list[TensorInfo]
    data_start: int
    file_size: int
    ollama_name: str | None = field(default=None)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    @property
    def parameters(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def data_end(self) -> int:
        return self.data_start + max((t.offset + t.nbytes for t in self.tensors), default=0)

    @property
    def quantization(self) -> str:
        """The file's type as llama.cpp names it (``Q4_K_M``), else the type of most of its weights."""
        ft = self.metadata.get("general.file_type")
        if isinstance(ft, int) and ft in FILE_TYPES:
            return FILE_TYPES[ft]
        weights = Counter()
        for t in self.tensors:
            if len(t.shape) >= 2:
                weights[t.type_name] += t.elements
        return weights.most_common(1)[0][0] if weights else "F32"

    @property
    def display_name(self) -> str:
        return self.ollama_name or self.path.name


# ------------------------------------------------------------------ reading the header


class _Reader:
    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, fmt: str):
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise EOFError
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > self.size:
            raise EOFError
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.take("<Q")
        self.pos += n
        if self.pos > self.size:
            raise EOFError

    def value(self, vtype: int):
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("<I"), self.take("<Q")
            if count > self.size:  # more elements than the file has bytes
                raise ValueError(f"an array of {count} elements")
            if count <= _KEEP:
                return [self.value(etype) for _ in range(count)]
            if etype in _SCALAR:
                self.pos += count * struct.calcsize(_SCALAR[etype])
                if self.pos > self.size:
                    raise EOFError
            elif etype == _STRING:
                for _ in range(count):
                    self.skip_string()
            else:
                for _ in range(count):
                    self.value(etype)
            return count
        raise ValueError(f"unknown metadata value type {vtype}")


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is a file starting with the GGUF magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def read_header(path: str | Path) -> GGUFHeader:
    """The header of a GGUF file; :class:`CheckpointError` (one line) if it is not one, or is
    corrupt or truncated."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4)
            if head != MAGIC:
                raise CheckpointError(
                    f"{path} is not a GGUF file (it does not start with the bytes 'GGUF'); "
                    "--checkpoint takes a model directory or a .gguf file"
                )
            if size < 24:
                raise CheckpointError(f"{path} is truncated: {size} bytes, shorter than a GGUF header")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf, size)
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from e


def _parse(path: Path, buf, size: int) -> GGUFHeader:
    r = _Reader(buf, size)
    r.pos = 4
    try:
        version = r.take("<I")
        if version not in (2, 3):
            raise CheckpointError(f"{path} is GGUF version {version}; transformers reads versions 2 and 3")
        n_tensors, n_kv = r.take("<Q"), r.take("<Q")
        if n_tensors > 2**24 or n_kv > 2**24:  # llama.cpp's largest files hold a few thousand
            raise ValueError(f"the header counts {n_tensors} tensors and {n_kv} metadata keys")
        metadata = {}
        for _ in range(n_kv):
            key = r.string()
            metadata[key] = r.value(r.take("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.take("<I")
            if n_dims > 8:
                raise ValueError(f"tensor {name} has {n_dims} dimensions")
            dims = [r.take("<Q") for _ in range(n_dims)]
            ggml_type, offset = r.take("<I"), r.take("<Q")
            if ggml_type not in GGML_TYPES:
                raise CheckpointError(
                    f"{path}: tensor {name} is stored in ggml type {ggml_type}, which no GGUF reader here knows; "
                    "transformers cannot dequantize it"
                )
            tensors.append(TensorInfo(name, tuple(reversed(dims)), ggml_type, offset))
    except (EOFError, struct.error) as e:
        raise CheckpointError(
            f"{path} is truncated or corrupt: its header ends past the end of the file ({size} bytes)"
        ) from e
    except (ValueError, UnicodeError) as e:
        raise CheckpointError(f"{path} has a corrupt GGUF header: {' '.join(str(e).split())}") from e
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0:
        raise CheckpointError(f"{path} has a corrupt GGUF header: general.alignment is {align!r}")
    header = GGUFHeader(path, version, metadata, tensors, (r.pos + align - 1) // align * align, size)
    if "general.architecture" not in metadata:
        raise CheckpointError(f"{path} has no general.architecture in its metadata: not a model GGUF llama.cpp writes")
    if header.data_end > size:
        raise CheckpointError(
            f"{path} is truncated: its tensors end at byte {header.data_end:,} but the file has {size:,} bytes "
            "(an interrupted download? fetch it again)"
        )
    return header


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
    from .backends import DTYPES

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


# ------------------------------------------------------------------ loading


def preflight(path: str | Path, device: torch.device | str = "cpu", dtype: str = "fp32") -> GGUFHeader:
    """Everything that can be told without loading: readable header, architecture, tensor types,
    packages, memory. Returns the header; :class:`CheckpointError` otherwise."""
    header = read_header(path)
    header.ollama_name = ollama_name_of(header.path)
    check_readable(header)
    check_memory(header, torch.device(device), dtype)
    return header


def load_gguf(path: str | Path, device: torch.device, dtype: str = "fp32"):
    """A GGUF file -> a :class:`~model.hf_backend.TransformersBackend` (weights dequantized to ``dtype``)."""
    from .backends import DTYPES
    from .hf_backend import IMPLEMENTATION, TransformersBackend, register
    from .tokenizer import BPETokenizer

    header = preflight(path, device, dtype)
    path = header.path
    from transformers import AutoModelForCausalLM, AutoTokenizer

    register()
    where = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": str(path), "local_files_only": True}
    try:
        model = AutoModelForCausalLM.from_pretrained(**where, attn_implementation=IMPLEMENTATION, dtype=DTYPES[dtype])
    except (MemoryError, torch.OutOfMemoryError) as e:
        raise CheckpointError(
            f"{path.name}: out of memory dequantizing {header.parameters / 1e9:.2f} B parameters to {dtype}"
        ) from e
    except Exception as e:  # noqa: BLE001 -- the loader raises many types; each is one line here
        raise CheckpointError(f"cannot load {path} through transformers' GGUF loader: {_one_line(e)}") from e
    if getattr(model.config, "is_encoder_decoder", False):
        raise CheckpointError(f"{path} holds an encoder-decoder model; attnscope shows decoder-only causal LMs")
    try:
        tok = AutoTokenizer.from_pretrained(**where)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot build the tokenizer from {path}'s metadata: {_one_line(e)}") from e
    backend_tk = tok.backend_tokenizer
    backend_tk.no_truncation()
    backend_tk.no_padding()
    tokenizer = BPETokenizer(backend_tk, bos_token=_bos_token(header, backend_tk))
    try:
        model.to(device)
    except torch.OutOfMemoryError as e:
        raise CheckpointError(
            f"the model ({gib(header.parameters * DTYPES[dtype].itemsize)} in {dtype}) does not fit on {device}; "
            "try --dtype bf16 or --device cpu"
        ) from e
    backend = TransformersBackend(model, tokenizer, device, name=header.display_name)
    backend.facts.source_format = "gguf"
    backend.facts.quantization = header.quantization
    return backend


def _bos_token(header: GGUFHeader, tk) -> str | None:
    """The BOS the file says to add (``tokenizer.ggml.add_bos_token``; SentencePiece files that do
    not say add it, as llama.cpp does)."""
    md = header.metadata
    add = md.get("tokenizer.ggml.add_bos_token")
    if add is None:
        add = md.get("tokenizer.ggml.model") == "llama"
    bos = md.get("tokenizer.ggml.bos_token_id")
    if not add or not isinstance(bos, int):
        return None
    return tk.id_to_token(bos)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:300]


# ------------------------------------------------------------------ Ollama names of blobs


def ollama_name_of(path: Path) -> str | None:
    """``NAME:TAG`` if ``path`` is a model blob in an Ollama models folder (a manifest names it)."""
    if path.parent.name != "blobs" or not path.name.startswith("sha256"):
        return None
    from .ollama import list_ollama

    digest = path.name.replace("-", ":", 1)
    for model in list_ollama(path.parent.parent):
        if model.digest == digest:
            return model.name
    return None


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
