"""The API's own page works offline: /docs loads nothing from outside 127.0.0.1 (no /redoc)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.browser


def test_docs_render_with_no_request_leaving_the_machine(tab):
    tab.open("/docs", settle=False)
    tab.page.wait_for_selector(".opblock-summary-path", timeout=60_000)
    text = tab.page.inner_text("body")
    assert "/api/attention" in text and "/api/model" in text
    hosts = {urlparse(u).hostname for u in tab.requests if urlparse(u).scheme in ("http", "https")}
    assert hosts == {"127.0.0.1"}, hosts
    assert tab.unexpected_console_errors() == []
