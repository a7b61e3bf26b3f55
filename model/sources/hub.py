"""Models by the name people use: ``ORG/NAME[@REVISION]``, through huggingface_hub's cache.

``from_pretrained("HuggingFaceTB/SmolLM2-135M")`` is how everyone else opens a model; here
:func:`resolve_hub` turns such a name into a local folder that :func:`model.registry.load_model`
opens like any other:

1. the Hugging Face cache first (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
   ``~/.cache/huggingface/hub``), so a model fetched once opens offline;
2. else a download with huggingface_hub's progress bars (only what attnscope reads: the config,
   safetensors weights, tokenizer files), unless ``HF_HUB_OFFLINE`` is set;
3. else one line naming the model and what to do.

:func:`cached_models` lists the causal and masked LMs already in that cache (``attnscope models``,
``GET /api/models``). Nothing here runs at import: huggingface_hub is imported when called.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..ours.checkpoint import CheckpointError

# what a Hub name looks like: an owner and a repository, and a revision (branch, tag or commit) after "@"
HUB_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
# the files attnscope reads from a model repository (no PyTorch .bin, ONNX or GGUF copies)
FILES = ["*.json", "*.safetensors", "tokenizer*", "*.txt", "*.model"]


def is_hub_name(name: str) -> bool:
    """Whether ``name`` reads as ``ORG/NAME[@REVISION]`` and is not a folder or file here."""
    return bool(HUB_NAME.match(name)) and not Path(name).expanduser().exists()


def split_name(name: str) -> tuple[str, str | None]:
    """``"ORG/NAME@REV"`` -> ``("ORG/NAME", "REV")``; :class:`CheckpointError` for anything else."""
    m = HUB_NAME.match(name)
    if not m:
        raise CheckpointError(f"{name!r} is not a Hugging Face model name: expected ORG/NAME or ORG/NAME@REVISION")
    return m["repo"], m["revision"]


def cache_dir() -> Path:
    """The Hugging Face cache, read from the environment when called (as huggingface_hub reads it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_hub(name: str) -> Path:
    """The local folder of the model ``name`` (``ORG/NAME[@REVISION]``): from the cache, else
    downloaded; :class:`CheckpointError` in one line when neither can be done."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo, revision = split_name(name)
    where = cache_dir()
    try:
        return Path(
            snapshot_download(repo, revision=revision, cache_dir=where, local_files_only=True, allow_patterns=FILES)
        )
    except LocalEntryNotFoundError:
        pass
    fetch = f"`hf download {repo}{f' --revision {revision}' if revision else ''}`"
    if offline():
        raise CheckpointError(
            f"{name} is not in the Hugging Face cache ({where}) and HF_HUB_OFFLINE is set: run {fetch} where "
            "there is a network and copy the cache here, or pass --checkpoint DIR"
        )
    try:
        return Path(
            snapshot_download(
                repo, revision=revision, cache_dir=where, allow_patterns=FILES, endpoint=os.environ.get("HF_ENDPOINT")
            )
        )
    except Exception as e:  # no network, no such repository, a gated one: each its own type
        raise CheckpointError(
            f"cannot download {name}: {download_problem(e, repo, revision)}; it is not in the Hugging Face cache "
            f"({where}) either: run {fetch} where there is a network and copy the cache here, or pass --checkpoint DIR"
        ) from e


def download_problem(e: Exception, repo: str, revision: str | None) -> str:
    """Why huggingface_hub could not download ``repo``, in a few words of ours (its own messages run
    to several lines of HTTP detail): the Hub out of reach, no such model or revision, a gated model."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(e, GatedRepoError):
        return f"{repo} is gated: accept its terms on huggingface.co, then log in here (hf auth login)"
    if isinstance(e, RepositoryNotFoundError):
        return f"the Hub has no model {repo} (or it is private: log in with hf auth login)"
    if isinstance(e, RevisionNotFoundError):
        return f"{repo} has no revision {revision}"
    if isinstance(e, HfHubHTTPError) and getattr(e.response, "status_code", None):
        return f"the Hub answered HTTP {e.response.status_code}"
    unreachable = (LocalEntryNotFoundError, ConnectionError, TimeoutError, OSError)
    if isinstance(e, unreachable) or "connect" in type(e).__name__.lower():
        # huggingface_hub reports an unreachable Hub as LocalEntryNotFoundError (nothing cached either)
        host = os.environ.get("HF_ENDPOINT") or "huggingface.co"
        return f"the Hugging Face Hub ({host}) cannot be reached (no network?)"
    return f"the download failed ({type(e).__name__})"


def hub_name_of(path: Path) -> str | None:
    """``ORG/NAME`` for a folder inside the Hugging Face cache (``models--ORG--NAME/snapshots/<commit>``)
    at the revision ``main`` points to, ``ORG/NAME@<commit>`` at another, else None."""
    path = Path(path)
    repo = path.parent.parent.name if path.parent.name == "snapshots" else ""
    if not repo.startswith("models--"):
        return None
    name = repo.removeprefix("models--").replace("--", "/")
    main = path.parent.parent / "refs" / "main"
    on_main = main.is_file() and main.read_text().strip() == path.name
    return name if on_main else f"{name}@{path.name}"  # as cached_models lists it


def cached_models() -> list[dict]:
    """The causal and masked LMs in the Hugging Face cache, one entry per repository at its ``main`` revision
    (else its newest): ``{"name", "source": "hub-cache", "path", "size_bytes", "family"}``."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir())
    except CacheNotFound:
        return []
    found = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revs = sorted(repo.revisions, key=lambda r: ("main" not in r.refs, -r.last_modified))
        rev = revs[0]
        family = _causal_lm_family(Path(rev.snapshot_path))
        if family is None:
            continue
        name = repo.repo_id if "main" in rev.refs else f"{repo.repo_id}@{rev.commit_hash}"
        found.append(
            {
                "name": name,
                "source": "hub-cache",
                "path": str(rev.snapshot_path),
                "size_bytes": int(rev.size_on_disk),
                "family": family,
            }
        )
    return found


def _causal_lm_family(snapshot: Path) -> str | None:
    """The ``model_type`` of a snapshot whose config names a causal LM (or a masked LM: an encoder), else None."""
    try:
        cfg = json.loads((snapshot / "config.json").read_text())
    except (OSError, ValueError):
        return None
    architectures = cfg.get("architectures") or []
    if not any(str(a).endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM")) for a in architectures):
        return None
    return str(cfg.get("model_type") or "?")
