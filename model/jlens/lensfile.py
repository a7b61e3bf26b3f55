"""A Jacobian lens on disk, in the published format, and the check that it fits a model.

The file is a torch ``.pt`` dict, read with ``weights_only=True``::

    {"J": {layer: (d_model, d_model) float16}, "n_prompts": int, "source_layers": [int, ...],
     "d_model": int, "metadata": {...}}

``metadata`` (the model, the corpus, the fit's settings) is ours and optional: published lenses may
lack it. :class:`LensFileError` is one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

HUB_FILE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+):(?P<file>[\w./-]+)$")  # ORG/NAME:PATH/IN/REPO.pt


class LensFileError(ValueError):
    """A lens file that cannot be read, or does not fit the model; the message names the file."""


def resolve_lens(spec: str | Path) -> Path:
    """A path on this machine, or ``ORG/NAME:FILE`` found in the local Hugging Face cache (never downloaded:
    ``hf download ORG/NAME FILE`` puts it there)."""
    path = Path(spec).expanduser()
    m = HUB_FILE.match(str(spec))
    if path.exists() or m is None:
        return path
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise LensFileError(f"{spec}: a lens in the Hugging Face cache needs huggingface_hub "
                            "(pip install 'attnscope[transformers]')") from None
    from ..sources.hub import cache_dir

    found = try_to_load_from_cache(m["repo"], m["file"], cache_dir=str(cache_dir()))
    if not isinstance(found, str):
        raise LensFileError(f"{spec}: not in the local Hugging Face cache (hf download {m['repo']} {m['file']})")
    return Path(found)


@dataclass
class JacobianLens:
    J: dict[int, torch.Tensor]  # source layer -> (d, d), as stored (float16)
    n_prompts: int
    source_layers: list[int]
    d_model: int
    metadata: dict = field(default_factory=dict)
    path: Path | None = None

    _cast: dict = field(default_factory=dict, repr=False)  # (layer, device, dtype) -> J there, made once

    def about(self) -> dict:
        """What ``GET /api/model`` says of it."""
        return {"source_layers": self.source_layers, "n_prompts": self.n_prompts}

    def matrix(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """``J[layer]`` on ``device`` in ``dtype`` (converted once, then kept), None for a layer without J."""
        if layer not in self.J:
            return None
        key = (layer, str(device), dtype)
        if key not in self._cast:
            self._cast[key] = self.J[layer].to(device, dtype)
        return self._cast[key]


def save_lens(path: str | Path, J: dict[int, torch.Tensor], n_prompts: int, metadata: dict) -> Path:
    """Write the published format (float16 matrices), atomically."""
    path = Path(path)
    layers = sorted(J)
    d = int(J[layers[0]].shape[0])
    for layer in layers:
        if not torch.isfinite(J[layer].to(torch.float16)).all():
            raise LensFileError(f"{path}: J[{layer}] does not fit in float16 (values beyond ±65504): not written")
    body = {
        "J": {int(layer): J[layer].to("cpu", torch.float16).contiguous() for layer in layers},
        "n_prompts": int(n_prompts),
        "source_layers": layers,
        "d_model": d,
        "metadata": metadata,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(body, tmp)
    os.replace(tmp, path)
    return path


def load_lens(path: str | Path) -> JacobianLens:
    """Read a lens file; :class:`LensFileError` for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        raise LensFileError(f"{path}: no such lens file")
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a pickle that is not plain tensors and dicts, a truncated or foreign file
        first = (str(e).splitlines() or [""])[0][:160]
        raise LensFileError(f"{path}: not a Jacobian lens file ({type(e).__name__}: {first})") from None
    if not isinstance(body, dict) or not isinstance(body.get("J"), dict) or not body["J"]:
        raise LensFileError(f"{path}: not a Jacobian lens file (no 'J' dict of layer -> d_model × d_model matrices)")
    try:
        J = {int(layer): m for layer, m in body["J"].items()}
    except (TypeError, ValueError):
        raise LensFileError(f"{path}: the keys of 'J' must be layer numbers") from None
    d = int(body.get("d_model") or next(iter(J.values())).shape[-1])
    for layer, m in J.items():
        if not isinstance(m, torch.Tensor) or tuple(m.shape) != (d, d):
            shape = tuple(m.shape) if isinstance(m, torch.Tensor) else type(m).__name__
            raise LensFileError(f"{path}: J[{layer}] is {shape}, not {d} × {d} (d_model)")
        if not torch.isfinite(m).all():
            raise LensFileError(f"{path}: J[{layer}] holds values that are not finite")
    layers = sorted(int(x) for x in body.get("source_layers", J))
    if layers != sorted(J):
        raise LensFileError(f"{path}: source_layers {layers} do not match the layers of J {sorted(J)}")
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    return JacobianLens(J, int(body.get("n_prompts", 0)), layers, d, metadata, path)


def check_fits(lens: JacobianLens, facts) -> None:
    """:class:`LensFileError` naming the file and what differs when ``lens`` was not fitted for this shape."""
    where = lens.path or "the lens"
    if lens.d_model != facts.d_model:
        raise LensFileError(f"{where}: fitted for d_model {lens.d_model}, this model has d_model {facts.d_model}")
    last = facts.n_layer - 1
    beyond = [layer for layer in lens.source_layers if not 0 <= layer < last]
    if beyond:
        raise LensFileError(
            f"{where}: has layer {beyond[0]}; this model's source layers are its blocks 0 to {last - 1} "
            f"({facts.n_layer} layers)"
        )
