"""The "Head roles" view on a model of 30 layers (issue 32, item 6): the figure grows with the
layer count, so every layer has its label and every number stays inside its cell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.kit.live import serving

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.family import SHIPPED  # noqa: E402

LAYERS = 30


def build_deep(out: Path) -> Path:
    """A plain GPT-2 of 30 layers × 4 heads (head size 8), random weights."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_head=4, n_embd=32, n_positions=128, vocab_size=4096)).save_pretrained(
        out
    )
    return out


@pytest.fixture(scope="module")
def family_server(tmp_path_factory, server):
    with serving(build_deep(tmp_path_factory.mktemp("deep") / "m"), "deep") as s:
        yield s


@pytest.mark.parametrize("width", [1280, 390])
def test_every_layer_is_labelled_and_every_number_fits_its_cell(family_tab, width):
    page = family_tab.page
    page.set_viewport_size({"width": width, "height": 900})
    family_tab.open("/#view=roles&text=The%20cat%20sat")
    page.wait_for_function("() => document.querySelector('[data-testid=head-roles]')?._fullLayout")
    got = page.evaluate(
        """() => {
            const gd = document.querySelector('[data-testid=head-roles]');
            const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
            return {
                ticks: [...gd.querySelectorAll('.ytick text')].map((t) => [t.textContent, box(t)]),
                texts: [...gd.querySelectorAll('.heatmaplayer text, .hm text, text.textpoint')].map(box),
                rowPx: gd._fullLayout.yaxis._length / gd._fullLayout.yaxis._categories.length,
                colPx: gd._fullLayout.xaxis._length / gd._fullLayout.xaxis._categories.length,
            };
        }"""
    )
    got["ticks"].sort(key=lambda tick: tick[1][1])  # top to bottom
    assert [name for name, _ in got["ticks"]] == [f"L{i}" for i in range(LAYERS)]
    tops = [b[1] for _, b in got["ticks"]]
    bottoms = [b[3] for _, b in got["ticks"]]
    assert all(bottoms[i] <= tops[i + 1] + 0.5 for i in range(LAYERS - 1))  # no two labels overlap
    assert got["texts"] and len(got["texts"]) == LAYERS * 4
    for left, top, right, bottom in got["texts"]:  # each number inside its cell's size
        assert bottom - top <= got["rowPx"] and right - left <= got["colPx"]
    assert page.get_by_test_id("head-roles").bounding_box()["width"] <= width
    assert not family_tab.unexpected_console_errors()
