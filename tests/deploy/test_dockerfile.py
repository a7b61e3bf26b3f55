"""The Docker image installs the extras for the models people mount (a transformers folder, a GGUF
file, an image-text model), docs/DEPLOY.md says which, and scripts/container_check.sh downloads the
wheels of the same extras (it reads them from the Dockerfile)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
# the extra each kind of mounted model needs (docs/MODELS.md): folders, GGUF files, image-text models
FOR_MOUNTED_MODELS = {"transformers", "gguf", "vision"}


def dockerfile_extras() -> list[str]:
    (found,) = re.findall(r'"\.\[([\w,-]+)\]"', (ROOT / "Dockerfile").read_text(encoding="utf-8"))
    return found.split(",")


def test_the_image_installs_the_extras_for_mounted_models():
    extras = dockerfile_extras()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert set(extras) <= set(project["optional-dependencies"]), extras
    assert FOR_MOUNTED_MODELS <= set(extras), f"the image lacks {sorted(FOR_MOUNTED_MODELS - set(extras))}"


def test_deploy_md_says_what_the_image_includes():
    page = (ROOT / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    assert f'".[{",".join(dockerfile_extras())}]"' in page


def test_container_check_downloads_the_extras_the_dockerfile_installs():
    script = (ROOT / "scripts" / "container_check.sh").read_text(encoding="utf-8")
    (line,) = [ln for ln in script.splitlines() if ln.startswith("EXTRAS=$(")]
    read = subprocess.run(["bash", "-c", f"{line} && echo $EXTRAS"], cwd=ROOT, capture_output=True, text=True)
    assert read.returncode == 0 and read.stdout.strip().split(",") == dockerfile_extras(), read
