"""How the page's JavaScript gets into a notebook, offline: the notebook widget's assets.

anywidget runs one ES module per widget class (``_esm``). Ours is small
(``frontend/js/widget_esm.js``, a few kB): on its first render in a page it asks the kernel,
with one custom message, for the frontend's modules (``frontend/js/*.js``, the same files the
page serves: no second copy of the drawing code, no build step that could go stale) and, unless
``globalThis.Plotly`` is there already, for ``plotly.min.js`` from the installed ``plotly``
package. The answer carries them as binary buffers; the loader makes each module a ``blob:`` URL
(its relative imports, ``./x.js``, ``../x.js``, ``./views/x.js``, rewritten to its dependencies'
blob URLs, so the browser links real ES modules) and runs Plotly from a ``blob:`` script. Both are
kept on ``globalThis`` under the modules' hash: a page with ten widgets loads them once, and each
widget's saved state and each cell's output stay small. We chose this over an esbuild bundle because a committed bundle
can drift from ``frontend/js`` and an uncommitted one needs Node at install time; this needs
nothing but the installed package, and ``blob:`` modules are what anywidget itself loads with.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

FRONTEND = resources.files("attnscope.frontend")
_IMPORT = r"""(?:from|import)\s*["'](\.\.?/[\w./-]+\.js)["']"""


def _js(name: str) -> str:
    return FRONTEND.joinpath("js", *name.split("/")).read_text(encoding="utf-8")


def _resolve(importer: str, spec: str) -> str:
    """An import ``spec`` ("./x.js", "../x.js", "./views/x.js") of ``importer`` as a path under ``js/``."""
    path = posixpath.normpath(posixpath.join(posixpath.dirname(importer), spec))
    if path.startswith("../"):
        raise ValueError(f"{importer} imports {spec}, outside frontend/js")
    return path


@lru_cache(maxsize=1)
def frontend_modules() -> dict[str, str]:
    """``widget.js`` and every module it imports (transitively), by path under ``js/``
    (``views/head.js``): the page's own files."""
    out: dict[str, str] = {}
    todo = ["widget.js"]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = _js(name)
        todo += [_resolve(name, spec) for spec in re.findall(_IMPORT, out[name])]
    return out


@lru_cache(maxsize=1)
def modules_payload() -> bytes:
    """The modules as one JSON object (path under ``js/`` -> source), the buffer the loader asks for."""
    return json.dumps(frontend_modules(), sort_keys=True).encode()


@lru_cache(maxsize=1)
def plotly_js() -> bytes:
    """``plotly.min.js`` from the installed ``plotly`` package."""
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


@lru_cache(maxsize=1)
def widget_esm() -> str:
    """The widget's ES module: the loader, told the hash of the modules it will be sent."""
    version = hashlib.sha256(modules_payload()).hexdigest()[:16]
    return _js("widget_esm.js").replace("__ATTNSCOPE_MODULES_HASH__", version)


def widget_css() -> str:
    """The widget's style sheet (``frontend/widget.css``)."""
    return (FRONTEND / "widget.css").read_text(encoding="utf-8")
