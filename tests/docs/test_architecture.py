"""docs/ARCHITECTURE.md stays true: every file it names exists, every code name it cites is in the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SOURCES = [
    *ROOT.glob("*.py"),
    *ROOT.glob("app/**/*.py"),
    *ROOT.glob("model/*.py"),
    *ROOT.glob("frontend/*.html"),
    *ROOT.glob("frontend/js/**/*.js"),
    *ROOT.glob("bench/*.py"),
    *ROOT.glob("scripts/*"),
    ROOT / "pyproject.toml",
    ROOT / "Dockerfile",
    ROOT / ".ci" / "run",
]
PATH = re.compile(r"^\.?[\w.-]+(/[\w.*-]+)+/?$|^(Dockerfile|pyproject\.toml|README\.md|constraints\.txt)$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$")


def cited() -> list[str]:
    return re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8"))


def test_every_file_the_architecture_names_exists():
    paths = [c for c in cited() if PATH.match(c) and not c.startswith(("/", "http"))]
    assert paths, "the architecture names no files"
    generated = ("data/", "runs/")  # what the corpus builder and the trainer write (ignored by git)
    missing = [p for p in paths if not p.startswith(generated) and not list(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"named in docs/ARCHITECTURE.md but not in the repository: {missing}"


def test_every_code_name_the_architecture_cites_is_in_the_code():
    words = set()
    for path in SOURCES:
        if path.is_file():
            words |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(encoding="utf-8", errors="replace")))
    names = [c.removesuffix("()") for c in cited() if NAME.match(c) and not PATH.match(c)]
    # a dotted name (Class.method, module.function) needs each of its parts in the code
    missing = sorted({n for n in names if not all(part in words for part in n.split("."))})
    assert not missing, f"cited in docs/ARCHITECTURE.md but found nowhere in the code: {missing}"


def test_the_architecture_points_inside_the_repository():
    outside = [c for c in cited() if c.startswith("../") or "/shared/" in c]
    assert not outside, f"docs/ARCHITECTURE.md points outside the repository: {outside}"
