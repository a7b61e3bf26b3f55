"""The page on a GGUF file: the model badge names the format and the file's quantization.

A tiny Llama written as a Q8_0 GGUF in the test (tests/kit/gguf.py), served by the real server
(``attnscope serve --checkpoint FILE.gguf``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.kit.live import serving

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason='needs the gguf extra: pip install "attnscope[gguf]"')
pytest.importorskip("accelerate", reason='needs the gguf extra: pip install "attnscope[gguf]"')
pytestmark = pytest.mark.browser

from tests.kit import gguf as ggufkit  # noqa: E402


@pytest.fixture(scope="module")
def gguf_server(tmp_path_factory, server):
    path = ggufkit.write("llama", tmp_path_factory.mktemp("page-gguf") / "tiny-llama.Q8_0.gguf", "Q8_0")
    with serving(path) as s:
        yield s


def test_the_badge_says_gguf_and_the_quantization(tab, gguf_server):
    tab.base_url = gguf_server.url
    tab.open("/#text=" + quote("The cat sat on the mat."))
    badge = tab.page.locator("#model-badge")
    assert badge.locator(".badge-format").inner_text() == "GGUF Q8_0"
    assert "tiny-llama.Q8_0.gguf" in badge.inner_text() and "3 layers × 6 heads" in badge.inner_text()
    assert tab.tokens()[0] == "<s>"
