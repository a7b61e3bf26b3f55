"""No view asks while it draws (issue 41, goal 2): from each view's `draw`, each card's `draw()` and render.js
`render`, no function reached sends a request. Asking is the data step's (data.js `askNeeded` asks each view's and
card's `need`). A static walk of frontend/js: a module's top-level functions by name, each with what it names,
followed through the imports; a function reached that calls fetch, postJSON, getJSON, latestOnly, ask or askAll, or
the data step (`app.data.fetchDetail()`, `refreshNow()`, ...), is a view that asks while drawing."""

from __future__ import annotations

import re
from pathlib import Path

from tests.frontend.test_modules import code_only, matching

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"
DECLARATION = re.compile(r"^(?:export\s+)?(?:async\s+)?(?:function\s*\*?\s*(\w+)|(?:const|let)\s+(\w+)\s*=)", re.M)
IMPORT = re.compile(r"import\s*\{([^}]*)\}\s*from\s*[\"'](\.[^\"']+)[\"']", re.S)
ASKS = re.compile(
    r"(?<![\w.$])(?:ask|askAll|postJSON|getJSON|fetch|latestOnly)\s*\("
    r"|\.(?:refreshNow|scheduleRefresh|fetchGrid|fetchDetail|fetchPredictions|askNeeded|ensureData|modelChanged)\s*\("
)
NAME = re.compile(r"(?<![\w.$])([A-Za-z_$][\w$]*)")


def read_modules() -> dict[str, dict]:
    """Each module (lessons aside: a page of its own) as its top-level functions' code by name (a function's
    nested ones inside it), its imported names (to their module and name) and its `draw() {...}` methods (and
    `draw: () => ...` properties)."""
    modules = {}
    for path in sorted(JS.rglob("*.js")):
        name = path.relative_to(JS).as_posix()
        if name.startswith("lessons/"):
            continue
        text = path.read_text(encoding="utf-8")
        code = code_only(text)
        starts = [(m.start(), m.group(1) or m.group(2)) for m in DECLARATION.finditer(code)]
        chunks = {fn: code[at:(starts[i + 1][0] if i + 1 < len(starts) else len(code))]
                  for i, (at, fn) in enumerate(starts)}
        imports = {}
        for names, source in IMPORT.findall(text):
            target = (path.parent / source).resolve().relative_to(JS.resolve()).as_posix()
            for item in filter(None, (n.strip() for n in names.split(","))):
                original, _, alias = item.partition(" as ")
                imports[(alias or original).strip()] = (target, original.strip())
        methods = [code[m.end() - 1:matching(code, m.end() - 1) + 1]
                   for m in re.finditer(r"(?<![\w.$])draw\s*\([^()]*\)\s*\{", code)]
        # `draw: () => drawCard(card)`: the arrow's line
        methods += re.findall(r"(?<![\w.$])draw\s*:\s*(?:async\s*)?(?:\([^()]*\)|\w+)\s*=>([^\n]*)", code)
        modules[name] = {"chunks": chunks, "imports": imports, "methods": methods}
    return modules


def asking_paths(modules: dict, module: str, code: str, path: tuple[str, ...], seen: set) -> list[tuple[str, ...]]:
    """The paths from `code` (in `module`) to each function reached that asks the server."""
    found = [path] if ASKS.search(code) else []
    for name in sorted(set(NAME.findall(code))):
        own = modules[module]
        target = own["imports"].get(name, (module, name) if name in own["chunks"] else None)
        if not target or target[0] not in modules or target[1] not in modules[target[0]]["chunks"] or target in seen:
            continue
        seen.add(target)
        body = modules[target[0]]["chunks"][target[1]]
        found += asking_paths(modules, target[0], body, (*path, f"{target[0]} {target[1]}"), seen)
    return found


def roots(modules: dict) -> list[tuple[str, str, str]]:
    """What the render pass runs: each view's `draw`, each card's `draw()` method, and render.js `render`."""
    found = [(m, "draw", parts["chunks"]["draw"]) for m, parts in modules.items()
             if m.startswith("views/") and "draw" in parts["chunks"]]
    found += [(m, f"draw() {i}", code) for m, parts in modules.items() for i, code in enumerate(parts["methods"])]
    return [*found, ("render.js", "render", modules["render.js"]["chunks"]["render"])]


def test_the_walk_reaches_the_requests_of_what_asks():
    """The walk is not blind: what the data step and the views' installs run does reach a request."""
    modules = read_modules()
    for module, fn in [("data.js", "createData"), ("views/atlas.js", "install"), ("views/twomodels.js", "install")]:
        assert asking_paths(modules, module, modules[module]["chunks"][fn], (fn,), set()), (module, fn)


def test_no_view_or_card_asks_while_it_draws():
    modules = read_modules()
    drawn = roots(modules)
    assert sum(m.startswith("views/") and fn == "draw" for m, fn, _ in drawn) == len(list((JS / "views").glob("*.js")))
    assert sum(name.startswith("draw()") for _, name, _ in drawn) >= 8  # the cards drawn by the render pass
    asking = {f"{m} {fn}": asking_paths(modules, m, code, (f"{m} {fn}",), set())[:1] for m, fn, code in drawn}
    assert {k: v for k, v in asking.items() if v} == {}
