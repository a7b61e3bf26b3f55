"""docs/attnscope.ipynb in JupyterLab (from PyPI, on 127.0.0.1) in Debian's chromium: run all
cells, find both widgets' grids drawn, hover shows the tooltip, and no request leaves 127.0.0.1.
(Typing re-running the model is tested on the kernel side, tests/notebook/test_notebook.py.)
Plotly and the page's modules arrive once for the whole page."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from urllib.parse import urlparse

import pytest

from tests.kit.live import CHROMIUM, CHROMIUM_ARGS
from tests.kit.notebook import NOTEBOOK, jupyterlab, on_a_thread_of_its_own

pytestmark = [pytest.mark.browser, pytest.mark.notebook]


def _skip_reason() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    for module in ("playwright", "jupyterlab", "anywidget", "ipykernel"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("lab-root")
    home = tmp_path_factory.mktemp("lab-home")
    nb = root / "attnscope.ipynb"
    shutil.copy(NOTEBOOK, nb)
    with jupyterlab(root, home) as base:
        yield base, nb.name


def _step(what: str) -> None:
    print(f"[notebook-lab] {what}", file=sys.stderr, flush=True)


def _run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def test_notebook_runs_in_jupyterlab_offline(lab):
    on_a_thread_of_its_own(lambda: _drive_lab(lab))


def _drive_lab(lab) -> None:
    from playwright.sync_api import sync_playwright

    base, name = lab
    host = urlparse(base).hostname
    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}/lab/tree/{name}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            # the kernel is up when the status bar says so
            page.get_by_text("| Idle").first.wait_for(timeout=60_000)
            _run_all(page)
            _step("kernel idle, running all cells")

            widgets = page.locator(".attnscope-widget")
            first = widgets.nth(0)
            first.locator(".heads-grid.drawn").wait_for(timeout=90_000)
            first.locator(".aw-heatmap.drawn").wait_for(timeout=30_000)
            assert first.locator(".predictions-list li").count() == 10

            _step("first widget drawn")
            # the grid canvas holds colour, not a blank bitmap
            painted = first.locator("canvas.heads-grid-canvas").evaluate(
                """(c) => {
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    let coloured = 0;
                    for (let i = 0; i < d.length; i += 4) if (d[i] !== d[i + 1] || d[i + 1] !== d[i + 2]) coloured++;
                    return coloured;
                }"""
            )
            assert painted > 500

            _step("grid painted")
            # hover a cell of layer 0, head 0: the tooltip names it
            box = first.locator("canvas.heads-grid-canvas").bounding_box()
            page.mouse.move(box["x"] + 40, box["y"] + 40)
            tip = first.locator(".grid-tip")
            tip.wait_for(state="visible", timeout=5_000)
            assert "Layer 0 · head 0" in tip.inner_text()

            _step("tooltip shown")
            # the second widget (a transformers model built in the notebook) is drawn too
            second = widgets.nth(1)
            second.scroll_into_view_if_needed()
            second.locator(".heads-grid.drawn").wait_for(timeout=60_000)
            assert "gpt_neox" in second.locator(".model-badge").inner_text()

            _step("second widget drawn")
            # Plotly and the modules came once for the page, from the kernel, not per widget
            blobs = page.evaluate("() => document.querySelectorAll('script[src^=\"blob:\"]').length")
            assert blobs == 1
        finally:
            browser.close()
    outside = [
        u for u in requests if urlparse(u).scheme in ("http", "https", "ws", "wss") and urlparse(u).hostname != host
    ]
    assert not outside, f"requests left {host}: {outside[:5]}"
    assert not [e for e in errors if "attnscope" in e or "Plotly" in e], errors
