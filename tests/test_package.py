"""The installed package: one ``attnscope`` in site-packages, never generic top-level names.

``pip install .`` used to put packages called ``app``, ``model`` and ``frontend`` into
site-packages, so a user's own ``model.py`` broke ``python -m app``. These tests install the
project the way a user does (a real, non-editable build) into a folder of their own and look.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """``pip install --no-deps --target DIR .``: what site-packages receives, and nothing else."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return target


def python_in(folder: Path, installed: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python ARGS`` run in ``folder`` with the installed package (and nothing of the checkout) importable."""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def test_only_attnscope_is_installed(installed):
    top = {p.name for p in installed.iterdir() if p.name not in ("bin", "__pycache__")}
    assert {"app", "model", "frontend"}.isdisjoint(top)
    assert {p for p in top if not p.endswith(".dist-info")} == {"attnscope"}
    package = installed / "attnscope"
    # the three parts, the shipped checkpoint and the page travel inside it
    assert (package / "app" / "cli" / "main.py").is_file()
    assert (package / "model" / "ours" / "checkpoints" / "attnscope-small" / "model.safetensors").is_file()
    assert (package / "frontend" / "index.html").is_file()
    assert (package / "frontend" / "js" / "main.js").is_file()


def test_every_file_of_the_page_is_installed(installed):
    """The page's subfolders (js/views/, js/draw/, css/ ...) travel too: package-data names them."""
    source = ROOT / "frontend"
    shipped = {
        p.relative_to(source).as_posix() for p in source.rglob("*") if p.suffix in (".js", ".css", ".html", ".svg")
    }
    target = installed / "attnscope" / "frontend"
    missing = sorted(name for name in shipped if not (target / name).is_file())
    assert not missing, f"in frontend/ but not installed: {missing}"


def test_a_users_own_model_py_does_not_break_the_command(installed, tmp_path):
    """In a folder holding ``model.py`` and ``app.py``, ``python -m attnscope`` still runs."""
    (tmp_path / "model.py").write_text("raise SystemExit('the user module was imported')\n")
    (tmp_path / "app.py").write_text("raise SystemExit('the user module was imported')\n")
    run = python_in(tmp_path, installed, "-m", "attnscope", "inspect", "The cat sat.", "--top-k", "1")
    assert run.returncode == 0, run.stderr
    assert "attnscope-small" in run.stdout
    where = python_in(tmp_path, installed, "-c", "import attnscope.model.ours.gpt as g; print(g.__file__)", timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(installed)


def test_python_dash_m_is_the_command():
    """``python -m attnscope`` and the ``attnscope`` script are one program (same help)."""
    script = Path(sys.executable).parent / "attnscope"
    by_module = subprocess.run([sys.executable, "-m", "attnscope", "--help"], capture_output=True, text=True)
    assert by_module.returncode == 0 and "serve" in by_module.stdout
    if script.is_file():
        by_script = subprocess.run([str(script), "--help"], capture_output=True, text=True)
        assert by_script.stdout.replace("attnscope", "") == by_module.stdout.replace("attnscope", "")


def test_public_entry_point():
    import attnscope

    lm = attnscope.load_model()
    assert lm.backend.facts.n_layer >= 1
    assert attnscope.__version__


def test_the_documented_commands_run_from_the_repository_root(installed):
    """Run in the repository's own folder, ``python -m attnscope`` and ``python -m attnscope.model.*``
    import the installed package: no folder of the repository shadows it (a non-editable install)."""
    for args in (
        ["attnscope", "--help"],
        ["attnscope.model.ours.evaluate", "--help"],
        ["attnscope.model.ours.corpus", "--help"],
    ):
        run = python_in(ROOT, installed, "-m", *args)
        assert run.returncode == 0, (args, run.stderr)
        assert "usage:" in run.stdout
    where = python_in(ROOT, installed, "-c", "import attnscope.app.cli.main as c; print(c.__file__)", timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stderr


def test_the_notebook_extra_installs_what_the_example_notebook_imports():
    """docs/attnscope.ipynb imports transformers: `pip install 'attnscope[notebook]'` must bring it."""
    import json
    import re

    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = {re.split(r"[<>=\[ ]", r)[0] for r in extras["notebook"]}
    cells = json.loads((ROOT / "docs" / "attnscope.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    imported = set(re.findall(r"^\s*(?:from|import) (\w+)", code, re.M))
    third_party = imported - {"attnscope", "json", "math", "os", "sys", "pathlib", "tempfile", "torch", "numpy"}
    assert third_party <= wanted, f"the notebook imports {third_party - wanted}, which the notebook extra lacks"
