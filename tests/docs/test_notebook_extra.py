"""`pip install -e ".[notebook]"` brings what docs/NOTEBOOK.md then runs: each command
of its shell blocks (``jupyter nbconvert`` is the ``jupyter`` and ``jupyter-nbconvert`` scripts) is
installed by a package the extra pulls in, read through the installed packages' own requirements,
a block that executes a notebook (``--execute``, or the section's Python) has a kernel (ipykernel),
and every package its Python names (``PIL.Image.open``) comes with it. The example notebook
(docs/attnscope.ipynb) installs with the page's own command."""

from __future__ import annotations

import json
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "NOTEBOOK.md"
KERNEL = "ipykernel"


def section() -> str:
    """The notebook page, whole: every command it tells a reader to run."""
    return PAGE.read_text(encoding="utf-8")


def blocks(text: str, languages: tuple[str, ...]) -> list[str]:
    return [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.DOTALL) if lang in languages]


def commands(text: str) -> list[list[str]]:
    """The shell blocks' commands, each split as the shell splits it, its comment left out."""
    out = []
    for body in blocks(text, ("bash", "sh", "shell", "console")):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def extra(name: str) -> list[str]:
    project = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["optional-dependencies"][name]


def pulled_in(requirements: list[str]) -> set[str]:
    """Every distribution ``requirements`` bring, through the installed packages' metadata (extras and
    markers honoured)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return seen


def script_owner(script: str) -> str:
    """The installed distribution whose console script ``script`` is."""
    owners = {canonicalize_name(ep.dist.name) for ep in metadata.entry_points(group="console_scripts", name=script)}
    assert owners, f"no installed package provides the command {script} (the test environment lacks it)"
    return owners.pop()


def needed(words: list[str]) -> set[str]:
    """The distributions one command of the page needs; none for pip itself."""
    if words[0] in ("pip", "python", "python3"):
        return set()
    scripts = [words[0]]
    if words[0] == "jupyter" and len(words) > 1 and not words[1].startswith("-"):
        scripts.append(f"jupyter-{words[1]}")  # how `jupyter SUB` finds its subcommand
    need = {script_owner(s) for s in scripts}
    if "--execute" in words:
        need.add(KERNEL)
    return need


def the_extras_installed() -> list[str]:
    """The extras the section's pip command installs: ``-e ".[notebook]"`` -> ["notebook"]."""
    for words in commands(section()):
        if words[:2] == ["pip", "install"]:
            for word in words:
                m = re.fullmatch(r"\.\[([\w,-]+)\]", word)
                if m:
                    return m.group(1).split(",")
    raise AssertionError(f"{PAGE.name} installs no extra of this project")


def test_the_section_reads_as_the_test_expects():
    assert the_extras_installed() == ["notebook"]
    assert [words[:2] for words in commands(section()) if words[0] != "pip"] == [["jupyter", "nbconvert"]]


def test_the_notebook_extra_brings_every_command_the_section_runs():
    have = set()
    for name in the_extras_installed():
        have |= pulled_in(extra(name))
    need = set()
    for words in commands(section()):
        need |= needed(words)
    if blocks(section(), ("python",)):  # cells run in a kernel
        need.add(KERNEL)
    assert need and need <= have, f"the notebook extra lacks {sorted(need - have)}"


def test_the_extras_pins_agree_with_constraints():
    """Every package the notebook extra names directly is allowed at the version constraints.txt pins."""
    pins = {}
    for line in ROOT.joinpath("constraints.txt").read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version.strip()
    for line in extra("notebook"):
        req = Requirement(line)
        pinned = pins.get(canonicalize_name(req.name))
        assert pinned is not None, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pinned, prereleases=True), f"{line} excludes constraints.txt's {pinned}"


def pip_install(words_lists: list[list[str]]) -> list[str]:
    (found,) = [words for words in words_lists if words[:2] == ["pip", "install"]]
    return found


def test_the_example_notebook_installs_with_the_pages_command():
    cells = json.loads(ROOT.joinpath("docs", "attnscope.ipynb").read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    said = [shlex.split(code) for code in re.findall(r"`(pip install [^`]+)`", markdown)]
    assert said, "the notebook does not say how to install attnscope"
    assert all(words == pip_install(commands(section())) for words in said), said


def test_every_package_the_pages_python_names_comes_with_the_extra():
    """``PIL.Image.open(...)`` in an example: Pillow must come with the extra the page installs."""
    code = "\n".join(blocks(section(), ("python",)))
    names = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\.\w", code)) | set(
        re.findall(r"^\s*(?:from|import) (\w+)", code, re.M)
    )
    owners = metadata.packages_distributions()
    need = {canonicalize_name(d) for name in names - {"attnscope"} for d in owners.get(name, [])}
    have = set()
    for name in the_extras_installed():
        have |= pulled_in(extra(name))
    assert "pillow" in need or "PIL" not in code
    assert need <= have, f"the page's Python uses {sorted(need - have)}, which the notebook extra lacks"
