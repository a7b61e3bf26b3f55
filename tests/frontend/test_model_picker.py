"""The model picker: the server started with one model and holds another in its Hugging Face
cache (written by the test); choosing it loads it while the first keeps answering, then the page
draws the new model's heads; choosing the first brings it back."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import get_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.familykit import build  # noqa: E402
from tests.hubkit import put_in_cache  # noqa: E402

SENTENCE = "The cat sat on the mat."


@pytest.fixture(scope="module")
def two_model_server(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("picker")
    put_in_cache(root / "hub", "tiny-org/tiny-llama", build("llama", root / "llama"))
    env = {"HF_HUB_CACHE": str(root / "hub"), "HF_HUB_OFFLINE": "1", "OLLAMA_MODELS": str(root / "none"), "HOME": str(root)}
    with serving(server.checkpoint, env=env) as s:
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
