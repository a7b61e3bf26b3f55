"""The header of a GGUF file (llama.cpp, Ollama, LM Studio), read without loading anything.

A GGUF file starts with the bytes ``GGUF``, a version, its metadata (typed key/value pairs:
``general.architecture``, ``general.file_type``, the tokenizer, the hyper-parameters) and a
table of its tensors (name, shape, ggml type, offset), then the data. :func:`read_header`
reads the first few KB (no ``gguf`` package needed) into a :class:`GGUFHeader`, and says in
one line (:class:`~model.ours.checkpoint.CheckpointError`) when the file is not a GGUF file, its
header is corrupt, or it is truncated (its tensors end past the file's end).

What can be done with the header (is the architecture readable, does it fit in memory) is
:mod:`model.sources.gguf_file`; opening the file through transformers is :mod:`model.sources.gguf_load`.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..ours.checkpoint import CheckpointError

MAGIC = b"GGUF"
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
