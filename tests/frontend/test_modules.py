"""The page's ES modules link: every relative import names a module that exists, and every name it
imports is one that module exports (a moved function otherwise breaks the page only in a browser)."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"
IMPORT = re.compile(r"import\s*\{([^}]*)\}\s*from\s*[\"'](\.[^\"']+)[\"']", re.S)


def exported(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    names = set(re.findall(r"^export (?:async )?(?:const|function|let|class) (\w+)", text, re.M))
    for group in re.findall(r"^export \{([^}]*)\}", text, re.M):
        names |= {n.strip().split(" as ")[-1] for n in group.split(",") if n.strip()}
    return names


def test_every_named_import_is_exported_by_its_module():
    modules = sorted(JS.rglob("*.js"))
    assert len(modules) > 20
    exports = {p.resolve(): exported(p) for p in modules}
    wrong = []
    for path in modules:
        for names, source in IMPORT.findall(path.read_text(encoding="utf-8")):
            target = (path.parent / source).resolve()
            if target not in exports:
                wrong.append(f"{path.relative_to(JS)}: no module {source}")
                continue
            for name in (n.strip().split(" as ")[0].strip() for n in names.split(",")):
                if name and name not in exports[target]:
                    wrong.append(f"{path.relative_to(JS)}: {source} exports no {name}")
    assert not wrong, wrong
