"""The model picker: the server started with one model and holds another in its Hugging Face
cache (written by the test); choosing it loads it while the first keeps answering, then the page
draws the new model's heads; choosing the first brings it back."""

from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import quote

import pytest

from tests.kit.live import get_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.family import build  # noqa: E402
from tests.kit.hub import put_in_cache  # noqa: E402

SENTENCE = "The cat sat on the mat."


@contextmanager
def beside_a_cached_llama(root, checkpoint):
    """The server on ``checkpoint``, a tiny Llama in its Hugging Face cache under ``root``: the picker lists both."""
    put_in_cache(root / "hub", "tiny-org/tiny-llama", build("llama", root / "llama"))
    env = {
        "HF_HUB_CACHE": str(root / "hub"),
        "HF_HUB_OFFLINE": "1",
        "OLLAMA_MODELS": str(root / "none"),
        "HOME": str(root),
    }
    with serving(checkpoint, env=env) as s:
        yield s


@pytest.fixture(scope="module")
def two_model_server(tmp_path_factory, server):
    with beside_a_cached_llama(tmp_path_factory.mktemp("picker"), server.checkpoint) as s:
        yield s


def test_choosing_another_model_loads_it_and_draws_its_heads(tab, two_model_server):
    tab.base_url = two_model_server.url
    tab.open("/#text=" + quote(SENTENCE))
    page = tab.page
    picker = page.get_by_test_id("model-picker-select")
    started = get_json(tab.base_url + "/api/model")["name"]
    assert picker.is_visible() and picker.input_value() == started
    assert [o.get_attribute("value") for o in picker.locator("option").all()] == [started, "tiny-org/tiny-llama"]
    picker.select_option("tiny-org/tiny-llama")
    page.wait_for_function("() => window.attnscope.state.model?.name === 'tiny-org/tiny-llama'")
    tab.settle()
    assert "tiny-org/tiny-llama" in page.get_by_test_id("model-info").inner_text()
    # the grid is the new model's: 3 layers of 6 heads, and its tokens (a BOS first)
    layers = page.evaluate("() => window.attnscope.state.grid.response.layers.map((l) => l.heads.length)")
    assert layers == [6, 6, 6] and tab.tokens()[0] == "<s>"
    picker.select_option(started)
    page.wait_for_function(f"() => window.attnscope.state.model?.name === {started!r}")
    tab.settle()
    assert len(page.evaluate("() => window.attnscope.state.grid.response.layers")) == 4
    assert not tab.unexpected_console_errors()


LONG_NAME = "a-rather-long-model-name-for-the-badge-Instruct-v2-q8"


@pytest.fixture(scope="module")
def long_name_server(tmp_path_factory, server):
    """The server on a model with a long name, the picker shown (its cache holds a second model)."""
    root = tmp_path_factory.mktemp("long-name")
    with beside_a_cached_llama(root, build("llama", root / LONG_NAME)) as s:
        yield s


@pytest.mark.parametrize("width", [1440, 1280, 390])
def test_the_top_bar_fits_the_window_with_the_picker_and_a_long_name(tab, long_name_server, width):
    """Issue 32, item 5: at 390 px the bar was 414 px wide and the badge off the screen; at 1440 px a
    long name wrapped the badge to two rows in a 48 px bar and cut the first off."""
    tab.base_url = long_name_server.url
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#text=" + quote(SENTENCE))
    page.get_by_test_id("model-picker-select").wait_for(state="visible")
    assert LONG_NAME in get_json(tab.base_url + "/api/model")["name"]
    got = page.evaluate(
        """() => {
            const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
            const bar = document.querySelector('.topbar');
            return {scroll: document.documentElement.scrollWidth, bar: box(bar),
                    parts: [...bar.querySelectorAll('.brand, .topnav, .model-picker, #model-badge span')]
                        .filter((el) => el.offsetParent !== null).map((el) => [el.className, box(el)])};
        }"""
    )
    assert got["scroll"] <= width and got["bar"][2] <= width
    left, top, right, bottom = got["bar"]
    for name, (x0, y0, x1, y1) in got["parts"]:  # every part of the bar wholly inside it and the window
        assert left <= x0 and x1 <= min(right, width) + 0.5 and top <= y0 and y1 <= bottom + 0.5, (
            name,
            got["bar"],
            (x0, y0, x1, y1),
        )
    assert any(name == "badge-name" for name, _ in got["parts"])  # the badge's name is on the screen
    if width >= 1280:  # the sticky view bar stays below a taller bar once the page scrolls
        page.mouse.wheel(0, 600)
        page.wait_for_function("() => window.scrollY > 0")
        view_bar = page.locator(".viewbar").bounding_box()
        assert view_bar["y"] >= bottom - 0.5
    assert not tab.unexpected_console_errors()
