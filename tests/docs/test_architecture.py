"""docs/ARCHITECTURE.md is a true map, read by the convention its first lines state.

A path in backticks (`app/compute/attention.py`) is a file or folder of the repository. A code name in
backticks is defined in the file cited last before it on the same line (a table row is a line): a Python
``def``, ``class`` or assignment, a JavaScript ``function``, ``class``, ``const``/``let``, method or
property, or a string key (a JSON field, a registered name); after a folder, in a file under it; on a line
that cites no file, in some file of the product. ``A.b`` is ``b`` defined in that file, ``A`` named there.
Then the map is whole: every product file is named, every view has a row (its file, its tab's label, every
URL its module asks), every route has a row (its URL, its module, its request and answer models, and the
compute modules its module imports)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PARTS = ("app", "model", "frontend")
KINDS = ("py", "js", "html", "css")
PRODUCT = [*ROOT.glob("*.py"), *(p for part in PARTS for ext in KINDS for p in ROOT.glob(f"{part}/**/*.{ext}"))]
PATH = re.compile(r"^\.?[\w.-]+(/[\w.*-]+)+/?$|^(Dockerfile|pyproject\.toml|README\.md)$")
NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\(\))?$")
FILE_NAME = re.compile(r"\.(py|js|json|md|toml|txt|html|css|safetensors|parquet|pt|gguf|ipynb)$")
GENERATED = ("data/", "runs/")  # what the corpus builder and the trainer write (ignored by git)
CONVENTION = "is defined in the file cited last before it on the same line"


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def spans(line: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", line)


def is_path(span: str) -> bool:
    return bool(PATH.match(span)) and not span.startswith(("/", "http"))


def is_name(span: str) -> bool:
    return bool(NAME.match(span)) and not PATH.match(span) and not FILE_NAME.search(span)


def definitions(name: str, suffix: str) -> list[re.Pattern]:
    """The ways `name` is defined in a file of this kind (a loose but local reading: no import follows)."""
    n = re.escape(name)
    quoted = re.compile(rf"[\"'`]{n}[\"'`]")
    attribute = re.compile(rf"\.{n}\s*(?::[^=\n]+)?=(?!=)")
    if suffix == ".py":
        return [
            re.compile(rf"^\s*(?:async\s+)?def\s+{n}\b", re.M),
            re.compile(rf"^\s*class\s+{n}\b", re.M),
            re.compile(rf"^\s*{n}\s*(?::[^=\n]+)?=(?!=)", re.M),
            re.compile(rf"^\s*{n}\s*:\s*\S", re.M),
            attribute,
            quoted,
        ]
    if suffix == ".js":
        return [
            re.compile(rf"\b(?:function\*?|class|const|let|var)\s+{n}\b"),
            re.compile(rf"\b(?:const|let|var)\s*\{{[^}}]*\b{n}\b"),
            re.compile(rf"^\s*(?:async\s+)?{n}\s*\([^)\n]*\)\s*\{{", re.M),
            re.compile(rf"(?:^|[{{,]|\s){n}\s*:", re.M),
            attribute,
            quoted,
        ]
    return [re.compile(rf"(?:id|class|name)=\"{n}\""), quoted]


@cache
def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def is_module(name: str) -> bool:
    """`attnscope.app.main`: a module of the package, a file (or a package's folder) of the repository."""
    parts = name.split(".")[1:]
    where = ROOT.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def defined_in(name: str, path: Path) -> bool:
    """`name` (or `A.b`: `b` defined, every part named) is defined in the file, or in a file under the folder."""
    if name.startswith("attnscope."):
        return is_module(name)
    files = [path] if path.is_file() else [p for p in PRODUCT if path in p.parents]
    *parents, last = name.removesuffix("()").split(".")
    for file in files:
        text = text_of(file)
        words = set(re.findall(r"\w+", text))
        if all(p in words for p in parents) and any(d.search(text) for d in definitions(last, file.suffix)):
            return True
    return False


def wrong_citations(lines: list[str]) -> list[str]:
    """Each code name not defined where the convention says it is, as `line: name (where looked)`."""
    wrong = []
    for number, line in enumerate(lines, 1):
        place: Path | None = None
        for span in spans(line):
            if is_path(span) and not span.startswith(GENERATED) and (ROOT / span.rstrip("/")).exists():
                place = ROOT / span.rstrip("/")
            elif is_name(span):
                found = defined_in(span, place) if place else any(defined_in(span, p) for p in PRODUCT)
                if not found:
                    wrong.append(f"{number}: {span} (in {rel(place) if place else 'the product'})")
    return wrong


def doc_lines() -> list[str]:
    return DOC.read_text(encoding="utf-8").splitlines()


def rows_citing(path: str) -> list[str]:
    return [line for line in doc_lines() if line.startswith("|") and path in spans(line)]


def test_the_map_states_its_convention_first():
    opening = " ".join(doc_lines()[:12])
    assert CONVENTION in opening, "docs/ARCHITECTURE.md opens with how its citations are read"


def test_every_file_the_map_names_exists():
    paths = [s for line in doc_lines() for s in spans(line) if is_path(s)]
    assert paths, "the architecture names no files"
    missing = [p for p in paths if not p.startswith(GENERATED) and not list(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"named in docs/ARCHITECTURE.md but not in the repository: {missing}"


def test_every_code_name_is_defined_in_the_file_it_is_cited_with():
    wrong = wrong_citations(doc_lines())
    assert not wrong, f"docs/ARCHITECTURE.md cites names where they are not defined: {wrong}"


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        ("`app/compute/attention.py` `attention_json`", False),
        ("`app/encoding.py` `attention_json`", True),  # where the map once put it
        ("`app/encoding.py` `encode_answer`, then `app/compute/attention.py` `attention_json`", False),
        ("`app/compute/attention.py` `attention_json`, `app/encoding.py` `compute_attention`", True),
        ("`model/capture.py` `Capture.finish`", False),
        ("`model/capture.py` `Capture.no_such_method`", True),
        ("`frontend/js/state.js` `createState`", False),
        ("`frontend/js/views/head.js` `createState`", True),  # imported there, defined in state.js
        ("`model/ours/` `GPT.decode`", False),
        ("`model/sources/` `GPT.decode`", True),
        ("no file on this line: `traced_attention`", False),
        ("no file on this line: `no_such_name_anywhere`", True),
    ],
)
def test_the_reading_refuses_a_name_cited_with_the_wrong_file(line, wrong):
    assert bool(wrong_citations([line])) is wrong, wrong_citations([line])


def test_every_product_file_is_on_the_map():
    named = {s for line in doc_lines() for s in spans(line)}
    missing = sorted(rel(p) for p in PRODUCT if rel(p) not in named and "__pycache__" not in p.parts)
    assert not missing, f"product files docs/ARCHITECTURE.md does not name: {missing}"


VIEWS = sorted((ROOT / "frontend" / "js" / "views").glob("*.js"))
ASKED = re.compile(r"[\"'`](/api/[\w/{}.-]*)")


def export(text: str, name: str) -> str | None:
    found = re.search(rf"^export const {name} = \"([^\"]*)\"", text, re.M)
    return found.group(1) if found else None


@pytest.mark.parametrize("view", VIEWS, ids=lambda p: p.name)
def test_each_view_is_a_view_named_as_its_tab_and_has_its_row(view):
    text, path = text_of(view), rel(view)
    assert export(text, "id") == view.stem, f"{path}: a view's file is named as its id"
    assert export(text, "label") and re.search(r"^export (const|function) draw\b", text, re.M), path
    assert f'from "./views/{view.name}"' in text_of(ROOT / "frontend" / "js" / "views.js"), f"{path}: not in views.js"
    rows = rows_citing(path)
    assert rows, f"{path}: no row of docs/ARCHITECTURE.md's views table cites it"
    row = " ".join(rows)
    assert export(text, "label") in row, f"{path}: its row does not give its tab's label"
    unsaid = [url for url in ASKED.findall(text) if url not in row]
    assert not unsaid, f"{path} asks {unsaid}, which its row does not name"


def routes() -> list[tuple[str, str, str, type | None, type | None]]:
    """(method, path, route module's file, request model, answer model) of every route the app serves."""
    from attnscope.app import static
    from attnscope.app.routes import RESOURCES

    out = []
    for module, router in [*((m, m.make_router(1000)) for m in RESOURCES), (static, static.router)]:
        for route in router.routes:
            body = getattr(route, "body_field", None)
            request = body.field_info.annotation if body is not None else None
            for method in sorted(route.methods - {"HEAD"}):
                out.append((method, route.path, rel(Path(module.__file__)), request, route.response_model))
    return out


def compute_imports(route_file: str) -> set[str]:
    """The files of app/compute (and app/service.py) a route module imports."""
    found = set()
    for node in ast.walk(ast.parse(text_of(ROOT / route_file))):
        if not isinstance(node, ast.ImportFrom) or node.level != 2:
            continue
        if (node.module or "").startswith(("compute", "service")):
            base = ROOT / "app" / Path(*node.module.split("."))
            for alias in node.names:
                file = base / f"{alias.name}.py"
                found.add(rel(file) if file.is_file() else rel(base.with_suffix(".py")))
    return found


def test_every_route_has_its_row_url_module_models_and_compute():
    every = routes()
    assert ("POST", "/api/attention") in {(m, p) for m, p, *_ in every}
    wrong = []
    for method, url, module, request, answer in every:
        rows = [r for r in rows_citing(module) if f"{method} {url}" in spans(r)]
        if not rows:
            wrong.append(f"{method} {url}: no row cites it with {module}")
            continue
        cited = set(spans(rows[0]))
        for model in (request, answer):
            if model is not None:
                file = rel(Path(__import__(model.__module__, fromlist=["_"]).__file__))
                if not {file, model.__name__} <= cited:
                    wrong.append(f"{method} {url}: its row does not cite {file} {model.__name__}")
    for module in {m for *_, m, _, _ in every}:
        cited = {s for row in rows_citing(module) for s in spans(row)}
        wrong += [f"{module} imports {f}, which its rows do not cite" for f in compute_imports(module) - cited]
    assert not wrong, wrong


def test_each_route_module_states_its_urls_in_its_docstring():
    """What a module is called may differ from its URL (`app/routes/qk.py` serves `/api/neuron`): its
    docstring says the URL, whole or as a `prefix/*` that covers it."""
    unsaid = []
    for method, url, module, *_ in routes():
        said = ast.get_docstring(ast.parse(text_of(ROOT / module))) or ""
        prefixes = [p.removesuffix("*") for p in re.findall(r"(/[\w/{}.-]*\*)", said)]
        if url not in said and not any(url.startswith(p) for p in prefixes):
            unsaid.append(f"{module}: {method} {url}")
    assert not unsaid, f"route modules whose docstring does not state their URL: {unsaid}"


def test_every_route_module_and_view_is_on_the_map():
    named = {s for line in doc_lines() for s in spans(line)}
    modules = [rel(p) for p in (ROOT / "app" / "routes").glob("*.py") if p.name != "__init__.py"]
    missing = [f for f in modules + [rel(v) for v in VIEWS] if f not in named]
    assert not missing, missing


def test_the_map_points_inside_the_repository():
    outside = [s for line in doc_lines() for s in spans(line) if s.startswith("../") or "/shared/" in s]
    assert not outside, f"docs/ARCHITECTURE.md points outside the repository: {outside}"
