"""Browser tests: the real attnscope server in a child process, Debian chromium via Playwright.

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing.
The server loads ``$ATTNSCOPE_CHECKPOINT``, else the shipped model, else the training run's
checkpoint, else a random model of the same shape (see ``tests/kit/live.py``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.error
from dataclasses import dataclass, field

import pytest

from tests.kit.live import CHROMIUM, ROOT, chromium, live_server, post_json, wait_settled

sys.path.insert(0, str(ROOT))  # the test modules import tests.kit.family and tests.kit.hub

VIEWPORT = {"width": 1280, "height": 800}


def _skip_reason() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium); the browser tests drive Debian's chromium"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="session")
def server():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    with live_server(threads=1) as s:
        yield s


@pytest.fixture(scope="session")
def browser(server):
    with chromium() as b:
        yield b


@dataclass
class Tab:
    """A page plus what it did: every requested URL, console errors, uncaught exceptions."""

    page: object
    base_url: str
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def open(self, path: str = "/", settle: bool = True) -> None:
        self.page.goto(self.base_url + path)
        if settle and not path.startswith("/lessons"):
            wait_settled(self.page)

    def open_at(self, width: int, path: str, height: int = 900) -> None:
        """``open`` in a window ``width`` px wide: each view is tested at 1280 and at 390 px."""
        self.page.set_viewport_size({"width": width, "height": height})
        self.open(path)

    def settle(self) -> None:
        wait_settled(self.page)

    def image_taken(self, width: int | None = None) -> None:
        """Wait until the picked image (``width`` px wide, where given) is taken, its thumbnail drawn and the
        page settled: the top bar has its new height, so that a click on a tab lands on the tab (a click while
        the thumbnail grew or shrank the bar could land beside it)."""
        self.page.wait_for_function(
            """(w) => { const s = window.attnscope.state, t = document.getElementById('image-thumb');
                return s.image !== null && (w === null || s.image.width === w) && t.complete && t.naturalWidth > 0
                    && window.attnscope.settled; }""",
            arg=width,
            timeout=120_000,
        )

    def show_view(self, view: str) -> None:
        """Click the view's tab and wait until the page shows that view: a click is never assumed to have landed."""
        self.page.locator(f"#tab-{view}").click()
        self.page.wait_for_function("(v) => window.attnscope.state.view === v", arg=view, timeout=10_000)

    def drawn(self, testid: str) -> dict:
        """The Plotly figure in the element with this data-testid, once one is drawn there: {data, layout}."""
        self.page.wait_for_function("(id) => document.querySelector(`[data-testid='${id}']`)?.data", arg=testid)
        return self.figure(testid)

    def inside(self, testid: str, width: int) -> bool:
        """Whether the element with this data-testid stands within a window ``width`` px wide."""
        box = self.page.get_by_test_id(testid).bounding_box()
        return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width

    def refusal(self, text: str) -> list | str:
        """The ``detail`` of the server's 422 for this text at /api/attention (any other answer fails the test)."""
        with pytest.raises(urllib.error.HTTPError) as info:
            post_json(self.base_url + "/api/attention", {"text": text})
        assert info.value.code == 422
        return json.loads(info.value.read())["detail"]

    def figure(self, testid: str) -> dict:
        """The Plotly figure drawn in the element with this data-testid: {data, layout}."""
        return self.page.evaluate(
            """(id) => {
                const gd = document.querySelector(`[data-testid="${id}"]`);
                if (!gd || !gd.data) return null;
                return { data: gd.data, layout: gd.layout };
            }""",
            testid,
        )

    def tokens(self) -> list[str]:
        return self.page.locator("[data-testid=tokens] .chip-text").all_inner_texts()

    def unexpected_console_errors(self, allowed: tuple[str, ...] = ()) -> list[str]:
        return [e for e in self.console_errors if not any(a in e for a in allowed)]


@pytest.fixture(scope="session")
def context(browser):
    """One browser context for the session, so plotly.min.js comes from the HTTP cache after the first page."""
    ctx = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def family_server(request, tmp_path_factory, server):
    """The real server on a model built in the test (tests/kit/family.py): the family a test names
    (``@pytest.mark.parametrize("family_server", [...], indirect=True)``), else its module's ``FAMILY``."""
    from tests.kit.family import build
    from tests.kit.live import serving

    name = getattr(request, "param", None) or request.module.FAMILY
    with serving(build(name, tmp_path_factory.mktemp(name) / name), name) as s:
        yield s


@pytest.fixture
def family_tab(tab, family_server):
    """``tab`` on the module's own ``family_server`` (a model built in the test), its ``kind`` named."""
    tab.base_url = family_server.url
    tab.kind = family_server.kind
    return tab


@pytest.fixture
def tab(context, server):
    page = context.new_page()
    page.set_default_timeout(90_000)
    t = Tab(page=page, base_url=server.url)
    page.on("request", lambda r: t.requests.append(r.url))
    page.on("console", lambda m: t.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: t.console_errors.append(f"uncaught: {e}"))
    yield t
    page.close()
