"""The house keeps its shape: folders that name their parts, no import circle, no arrow upward.

Each rule is one the codebase held itself to once (issue 31): a product folder holds at most 20
source files directly; ``model`` never imports ``app``; no module imports the package root
(``attnscope`` itself); imports, lazy and type-only ones included, form no circle; no product file
(Python, JavaScript, HTML or CSS) is over 350 lines or holds a line over 120 characters, no Python
function is over 80 lines (the JavaScript ones: tests/frontend/test_modules.py).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("app", "model", "frontend")
SOURCE = (".py", ".js", ".css", ".html")
MAX_LINES = 350  # headroom: a file near the cap is split by meaning before it reaches it
MAX_WIDTH = 120


def product_files() -> list[Path]:
    return [p for part in PARTS for p in (ROOT / part).rglob("*") if p.suffix in SOURCE and p.is_file()]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("attnscope", *parts))


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, resolved to absolute names: at its top, inside functions (a lazy
    import is an arrow too) and under ``if TYPE_CHECKING:`` (an annotation's import is one as well).
    ``from .x import y`` counts ``x`` and ``x.y`` (``y`` may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            if node.module:
                out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def python_modules() -> dict[str, Path]:
    return {module_name(p): p for part in ("app", "model") for p in (ROOT / part).rglob("*.py")}


def test_no_product_folder_holds_more_than_20_source_files():
    per_folder = defaultdict(int)
    for p in product_files():
        per_folder[p.parent.relative_to(ROOT).as_posix()] += 1
    crowded = {folder: n for folder, n in per_folder.items() if n > 20}
    assert not crowded, f"folders with more than 20 source files: {crowded}"


def test_product_files_choose_every_kind_of_source():
    """The caps below hold the page's markup and style sheets as well as its code."""
    assert {p.suffix for p in product_files()} == set(SOURCE)


def test_no_product_file_is_over_350_lines():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in product_files()
        if (n := len(p.read_bytes().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_no_python_function_is_over_80_lines():
    long = {
        f"{p.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for p in product_files()
        if p.suffix == ".py"
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80
    }
    assert not long, f"functions over 80 lines: {long}"


def test_no_product_line_is_over_120_characters():
    """ruff holds the Python lines (E501 at 120); this holds the page's JavaScript, HTML and CSS too,
    and the lines ruff lets pass for ending in a pragma comment."""
    wide = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in product_files()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > MAX_WIDTH
    ]
    assert not wide, wide


def test_imports_point_down_never_up():
    modules = python_modules()
    wrong = []
    for name, path in modules.items():
        part = name.split(".")[1]
        for target in imports(path):
            if target == "attnscope" or target.startswith("attnscope.__"):
                wrong.append(f"{name} imports the package root")
            elif part == "model" and target.startswith("attnscope.app"):
                wrong.append(f"{name} imports {target}")
    assert not wrong, wrong


def test_imports_form_no_circle():
    """Not even through a lazy import inside a function, nor one under ``if TYPE_CHECKING:``: a circle
    broken only by lateness, or only for the type checker, is still one."""
    modules = python_modules()
    graph = {name: {t for t in imports(path) if t in modules and t != name} for name, path in modules.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


def test_every_package_folder_is_installed():
    """A new folder of code is a package setuptools must be told of (pyproject.toml ``packages``),
    or the installed wheel, the Docker image among them, lacks it."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {module_name(p) for part in PARTS for p in (ROOT / part).rglob("__init__.py")}
    assert folders <= listed, f"not in pyproject.toml's packages: {sorted(folders - listed)}"
