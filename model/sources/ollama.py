"""GGUF models already on this machine: pulled with Ollama, downloaded with LM Studio, or in a folder.

Ollama keeps what ``ollama pull NAME[:TAG]`` fetched under ``$OLLAMA_MODELS`` (default
``~/.ollama/models``; the Linux service's ``/usr/share/ollama/.ollama/models``)::

    manifests/registry.ollama.ai/library/llama3.2/1b     JSON: layers[], one of mediaType
                                                         application/vnd.ollama.image.model
    blobs/sha256-<hex>                                   that layer's digest: the GGUF file itself

A name is ``[HOST/][NAMESPACE/]MODEL[:TAG]``: host ``registry.ollama.ai``, namespace ``library``
and tag ``latest`` unless given (``hf.co/bartowski/Foo-GGUF:Q4_K_M`` names all three). The
manifest is read directly: no network, no Ollama process.

LM Studio keeps ``.gguf`` files under ``~/.lmstudio/models`` (older versions
``~/.cache/lm-studio/models``), publisher/repository/file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..ours.checkpoint import CheckpointError

MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class OllamaModel:
    name: str  # as a user types it: llama3.2:1b, user/model:tag, hf.co/org/repo:Q4_K_M
    manifest: Path
    digest: str | None  # sha256:<hex> of the model layer; None if the manifest has none
    blob: Path | None  # the GGUF file, None if it is not there


def ollama_roots() -> list[Path]:
    """Where Ollama keeps models: ``$OLLAMA_MODELS`` if set, else the user's and the service's folders."""
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def lmstudio_roots() -> list[Path]:
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def parse_name(name: str) -> tuple[str, str, str, str]:
    """``NAME[:TAG]`` -> (host, namespace, model, tag), with Ollama's defaults."""
    name = name.strip()
    base, tag = name, DEFAULT_TAG
    if ":" in name.rsplit("/", 1)[-1]:
        base, tag = name.rsplit(":", 1)
    parts = [p for p in base.split("/") if p]
    if not parts or not tag or any(p in (".", "..") for p in parts + [tag]):
        raise CheckpointError(f"not an Ollama model name: {name!r} (use NAME[:TAG], e.g. llama3.2:1b)")
    if len(parts) == 1:
        return DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0], tag
    if len(parts) == 2:
        return DEFAULT_HOST, parts[0], parts[1], tag
    return parts[0], "/".join(parts[1:-1]), parts[-1], tag


def short_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name as ``ollama list`` shows it: defaults left out, except the tag."""
    if host == DEFAULT_HOST:
        base = model if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}"
    else:
        base = f"{host}/{namespace}/{model}"
    return f"{base}:{tag}"


def _blob(root: Path, digest: str) -> Path | None:
    for candidate in (digest.replace(":", "-", 1), digest):  # sha256-<hex>; very old versions: sha256:<hex>
        path = root / "blobs" / candidate
        if path.is_file():
            return path
    return None


def _read_manifest(root: Path, manifest: Path, name: str) -> OllamaModel:
    try:
        layers = json.loads(manifest.read_text()).get("layers") or []
    except (OSError, ValueError, AttributeError) as e:
        raise CheckpointError(f"cannot read the Ollama manifest {manifest}: {e}") from e
    digest = next(
        (la.get("digest") for la in layers if isinstance(la, dict) and la.get("mediaType") == MODEL_LAYER), None
    )
    return OllamaModel(name, manifest, digest, _blob(root, digest) if isinstance(digest, str) else None)


def list_ollama(root: Path) -> list[OllamaModel]:
    """Every model whose manifest is under ``root/manifests`` (host/namespace/model/tag)."""
    base = root / "manifests"
    if not base.is_dir():
        return []
    found = []
    for manifest in sorted(p for p in base.rglob("*") if p.is_file()):
        parts = manifest.relative_to(base).parts
        if len(parts) < 4:
            continue
        host, *namespace, model, tag = parts
        try:
            found.append(_read_manifest(root, manifest, short_name(host, "/".join(namespace), model, tag)))
        except CheckpointError:
            continue
    return found


def resolve_ollama(name: str, roots: list[Path] | None = None) -> Path:
    """The GGUF blob of a model pulled with Ollama; :class:`CheckpointError` (one line) if there is none."""
    host, namespace, model, tag = parse_name(name)
    roots = roots if roots is not None else ollama_roots()
    for root in roots:
        manifest = root / "manifests" / host / namespace / model / tag
        if not manifest.is_file():  # Ollama matches names without regard to case
            manifest = _case_insensitive(root / "manifests", (host, *namespace.split("/"), model, tag)) or manifest
        if manifest.is_file():
            found = _read_manifest(root, manifest, short_name(host, namespace, model, tag))
            if found.digest is None:
                raise CheckpointError(
                    f"Ollama's {found.name} has no model layer in {manifest} (an adapter or a template only?)"
                )
            if found.blob is None:
                raise CheckpointError(
                    f"Ollama's {found.name}: its model blob {found.digest} is missing from {root / 'blobs'} "
                    f"(pull it again: ollama pull {found.name})"
                )
            return found.blob
    where = " or ".join(str(r) for r in roots)
    pulled = [m.name for r in roots for m in list_ollama(r)]
    listed = (
        f"; pulled: {', '.join(pulled[:8])}{', ...' if len(pulled) > 8 else ''}" if pulled else "; none pulled there"
    )
    raise CheckpointError(
        f"no Ollama model {short_name(host, namespace, model, tag)} in {where} (set OLLAMA_MODELS if Ollama keeps "
        f"models elsewhere){listed}"
    )


def _case_insensitive(base: Path, parts: tuple[str, ...]) -> Path | None:
    here = base
    for part in parts:
        if not here.is_dir():
            return None
        match = next((p for p in here.iterdir() if p.name.lower() == part.lower()), None)
        if match is None:
            return None
        here = match
    return here if here.is_file() else None


def gguf_files(root: Path, limit: int = 2000) -> list[Path]:
    """``.gguf`` files under ``root`` (recursively), sorted; at most ``limit``."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    found = []
    for dirpath, _dirs, files in os.walk(root, followlinks=True):
        found += [Path(dirpath) / f for f in files if f.lower().endswith(".gguf")]
        if len(found) >= limit:
            break
    return sorted(found)[:limit]


def ollama_name_of(path: Path) -> str | None:
    """``NAME:TAG`` if ``path`` is a model blob in an Ollama models folder (a manifest names it)."""
    if path.parent.name != "blobs" or not path.name.startswith("sha256"):
        return None
    digest = path.name.replace("-", ":", 1)
    for model in list_ollama(path.parent.parent):
        if model.digest == digest:
            return model.name
    return None
