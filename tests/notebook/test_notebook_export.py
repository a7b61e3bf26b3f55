"""A notebook that calls ``attnscope.show``, run and exported by docs/NOTEBOOK.md's command
(``jupyter nbconvert --execute --to html --ExecutePreprocessor.store_widget_state=False``): the
page holds the widget's static snapshot and no widget manager, and chromium with the network cut
draws the all-heads grid from it.

Without the option nbconvert saves the widget state and puts the widget in the page instead,
loaded through ``@jupyter-widgets/html-manager`` from unpkg.com: offline, an empty output.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.kit.live import CHROMIUM, CHROMIUM_ARGS
from tests.kit.notebook import ROOT, jupyter_env, on_a_thread_of_its_own

pytestmark = pytest.mark.notebook

for _module in ("anywidget", "ipykernel", "nbconvert", "nbformat"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"{_module} is not installed (pip install -e '.[test]')", allow_module_level=True)

EXPORT = ["--execute", "--to", "html", "--ExecutePreprocessor.store_widget_state=False"]
TEXT = "The cat sat on the mat. The cat"
# what nbconvert's page loads for itself (RequireJS, MathJax); the snapshot needs neither
PAGE_SCRIPTS = {"require.min.js", "latest.js"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A one-cell notebook showing the widget, exported by ``jupyter nbconvert`` in its own process."""
    import nbformat

    root = tmp_path_factory.mktemp("export")
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(f"import attnscope\n\nattnscope.show({TEXT!r})")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, root / "shown.ipynb")
    done = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", *EXPORT, "shown.ipynb"],
        cwd=root,
        env=jupyter_env(root / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "shown.html"


def test_the_notebook_page_documents_this_command():
    assert "jupyter nbconvert " + " ".join(EXPORT) in (ROOT / "docs" / "NOTEBOOK.md").read_text(encoding="utf-8")


def test_the_export_holds_the_snapshot_and_no_widget_manager(exported):
    html = exported.read_text(encoding="utf-8")
    assert html.count('class="attnscope-snapshot"') == 1
    assert '<img alt="all attention heads" src="data:image/png;base64,' in html
    assert "application/vnd.jupyter.widget" not in html  # neither a widget view nor a saved widget state
    assert "html-manager" not in html and "unpkg.com" not in html
    scripts = re.findall(r"""<script[^>]*\ssrc=["'](https?://[^"']+)""", html)
    assert {urlparse(u).path.rsplit("/", 1)[-1] for u in scripts} <= PAGE_SCRIPTS, scripts


@pytest.mark.browser
def test_the_export_draws_the_grid_offline(exported):
    if not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None:
        pytest.skip(f"needs {CHROMIUM} and the playwright package")
    on_a_thread_of_its_own(lambda: _open_offline(exported))


def _open_offline(exported: Path) -> None:
    from playwright.sync_api import sync_playwright

    blocked: list[str] = []
    errors: list[str] = []

    def only_files(route) -> None:
        if urlparse(route.request.url).scheme == "file":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", only_files)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "console",
                lambda m: m.type == "error" and errors.append(f"{m.text} ({m.location.get('url', '')})"),
            )
            page.goto(exported.as_uri(), wait_until="load")

            snapshot = page.locator(".attnscope-snapshot")
            snapshot.wait_for(state="visible", timeout=10_000)
            grid = snapshot.locator('img[alt="all attention heads"]')
            assert grid.is_visible()
            # the image is decoded and coloured (viridis cells), not a blank or broken picture
            coloured = grid.evaluate(
                """(img) => {
                    const c = document.createElement('canvas');
                    c.width = img.naturalWidth;
                    c.height = img.naturalHeight;
                    const g = c.getContext('2d');
                    g.drawImage(img, 0, 0);
                    const d = g.getImageData(0, 0, c.width, c.height).data;
                    let n = 0;
                    for (let i = 0; i < d.length; i += 4) if (d[i] !== d[i + 1] || d[i + 1] !== d[i + 2]) n++;
                    return n;
                }"""
            )
            assert coloured > 500
            assert snapshot.locator("table tr").count() > 5  # the chosen head's strongest keys, one row a query
            assert "the model guesses" in snapshot.inner_text()
        finally:
            browser.close()
    # only nbconvert's own page scripts were asked for, and their failing to load is the only complaint
    assert {urlparse(u).path.rsplit("/", 1)[-1] for u in blocked} <= PAGE_SCRIPTS, blocked
    unexpected = [e for e in errors if not any(name in e for name in PAGE_SCRIPTS)]
    assert not unexpected, unexpected
