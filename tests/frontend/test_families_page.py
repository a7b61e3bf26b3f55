"""The page on models that are not our 4×4: a Llama-style model (3 layers × 6 query heads
reading 2 key/value heads, SentencePiece tokens, a BOS) and a 12 × 12 model.

Both are random-weight models built in the test (no download) and served by the real server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.kit.live import serving

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.family import SHIPPED, build  # noqa: E402

SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat 🎉 saw it."


def build_12x12(out: Path) -> Path:
    """A GPT-2 of 12 layers × 12 heads (head size 8): a plain GPT-2, so it opens in our GPT."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=12, n_head=12, n_embd=96, n_positions=512, vocab_size=4096)).save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=["llama", "12x12"])
def family_server(request, tmp_path_factory, server):
    root = tmp_path_factory.mktemp(f"page-{request.param}")
    path = build("llama", root / "llama") if request.param == "llama" else build_12x12(root / "m")
    with serving(path, request.param) as s:
        yield s



def test_the_page_draws_a_model_that_is_not_4x4(family_tab):
    tab = family_tab
    tab.open("/#text=" + quote(SENTENCE))
    info = tab.page.evaluate("() => window.attnscope.state.model")
    n_layer, n_head = info["n_layer"], info["n_head"]
    assert (n_layer, n_head) == ((3, 6) if tab.kind == "llama" else (12, 12))
    # selectors offer every layer and head
    assert tab.page.locator("[data-testid=layer-select] option").count() == n_layer
    assert tab.page.locator("[data-testid=head-select] option").count() == n_head
    # the model's facts are on the page
    badge = tab.page.locator("#model-badge").inner_text()
    assert f"{n_layer} layers × {n_head} heads" in badge
    if tab.kind == "llama":
        assert "llama" in badge and "2 key/value heads" in badge and "rotary" in badge
        assert tab.tokens()[0] == "<s>"  # the BOS the model was trained with
    # the grid: one canvas tile per head, every layer
    layout = tab.page.evaluate(
        "() => { const g = document.querySelector('[data-testid=heads-grid]').gridLayout;"
        " return {rows: g.grid.layers.length, cols: g.layout.cols.length}; }"
    )
    assert layout == {"rows": n_layer, "cols": n_head}
    # open the last head of the last layer from the grid
    x, y = tab.page.evaluate(
        """([r, c]) => {
            const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
            const canvas = document.getElementById('heads-grid-canvas');
            canvas.scrollIntoView({ block: "end" });
            const box = canvas.getBoundingClientRect();
            return [box.left + g.layout.geom.label + (c + 0.5) * g.layout.geom.tile,
                    box.top + g.layout.geom.label + (r + 0.5) * g.layout.geom.tile];
        }""",
        [n_layer - 1, n_head - 1],
    )
    tab.page.mouse.click(x, y)
    tab.settle()
    assert tab.page.get_by_test_id("layer-select").input_value() == str(n_layer - 1)
    assert tab.page.get_by_test_id("head-select").input_value() == str(n_head - 1)
    fig = tab.figure("head-heatmap")
    T = len(tab.tokens())
    assert len(fig["data"][0]["z"]) == T
    # token chips read the text back: the emoji chip holds the emoji, not its neighbours
    assert tab.page.get_by_test_id("error-banner").is_hidden()
    assert tab.unexpected_console_errors() == []
