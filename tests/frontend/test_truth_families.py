"""The page says what the answer holds, on models that are not GPT-2: a Gemma 2-style model
(divisor √query_pre_attn_scalar = 8, not √head_dim = 4; softcap 20; a sliding window of 6
tokens in layer 0 only) and a Mistral-style model (a window of 5 tokens in every layer).

Both are random-weight models built in the test (tests/kit/family.py) and served by the real
server; the text is longer than the windows, so some earlier keys are masked, not only later ones.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.family import build  # noqa: E402

SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat saw it."
VIEWS = {"head": "Head & grid", "scaling": "Scaled vs unscaled", "pipeline": "Mask pipeline", "variance": "Variance"}
# what names √head_dim: the words, the symbol, and a sub-scripted k read back as text
ROOT_DK = re.compile(r"√\s*d_?k|√\s*d\s*k\b|√16\b")


@pytest.fixture(scope="module", params=["gemma2", "mistral"])
def family_server(request, tmp_path_factory, server):
    path = build(request.param, tmp_path_factory.mktemp(f"truth-{request.param}") / request.param)
    with serving(path, request.param) as s:
        yield s


def answer(tab, **body) -> dict:
    return post_json(tab.base_url + "/api/attention", {"text": SENTENCE, "top_k": 0, "include": [], **body})


def grid_cell(tab, layer_row: int, col: int, i: int, j: int) -> tuple[float, float]:
    """Page coordinates of thumbnail cell (i, j) of the tile in grid row `layer_row`, column `col`."""
    return tab.page.evaluate(
        """([r, c, i, j]) => {
            const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
            const canvas = document.getElementById('heads-grid-canvas');
            canvas.scrollIntoView({ block: "center" });
            const { geom } = g.layout;
            const box = canvas.getBoundingClientRect();
            return [box.left + geom.label + c * geom.tile + (j + 0.5) * geom.scale,
                    box.top + geom.label + r * geom.tile + (i + 0.5) * geom.scale];
        }""",
        [layer_row, col, i, j],
    )


def grid_tip(tab, layer_row: int, i: int, j: int) -> str:
    x, y = grid_cell(tab, layer_row, 0, i, j)
    tab.page.mouse.move(x, y)
    tip = tab.page.locator("#grid-tip")
    tip.wait_for(state="visible")
    return tip.inner_text()


def grid_pixel(tab, layer_row: int, i: int, j: int) -> list[int]:
    """The colour painted at the centre of a thumbnail cell."""
    x, y = grid_cell(tab, layer_row, 0, i, j)
    return tab.page.evaluate(
        """([x, y]) => {
            const canvas = document.getElementById('heads-grid-canvas');
            const box = canvas.getBoundingClientRect();
            const k = canvas.width / box.width;
            const px = [Math.floor((x - box.left) * k), Math.floor((y - box.top) * k)];
            const d = canvas.getContext('2d').getImageData(px[0], px[1], 1, 1).data;
            return [d[0], d[1], d[2]];
        }""",
        [x, y],
    )


def heatmap_hover(tab, testid: str, i: int, j: int) -> str:
    """Hover cell (query i, key j) of the head heatmap (drawn on a canvas); the tooltip's text."""
    tab.page.mouse.move(0, 0)
    x, y = tab.page.evaluate(
        """([id, i, j]) => {
            const gd = document.querySelector(`[data-testid="${id}"]`);
            const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis;
            const cell = () => {
                const box = gd.getBoundingClientRect();
                return [box.left + xa.offset + xa.d2p(j), box.top + ya.offset + ya.d2p(i)];
            };
            // the cell itself mid-window: a tall map's top row would sit under the pinned bars
            window.scrollBy(0, cell()[1] - window.innerHeight / 2);
            return cell();
        }""",
        [testid, i, j],
    )
    tab.page.mouse.move(x, y)
    label = tab.page.locator(f"[data-testid={testid}] .hoverlayer .hovertext")
    label.first.wait_for(state="visible")
    # SVG: each line of the label is a <tspan>
    return " ".join(
        label.evaluate_all(
            "(els) => els.map((e) => [...e.querySelectorAll('tspan.line')]"
            ".map((t) => t.textContent).join(' ') || e.textContent)"
        )
    )


def window_masked_cell(data: dict, layer: int) -> tuple[int, int]:
    """A (query, key) the layer masks although the key comes before the query: outside its window."""
    mask = data["layers"][layer].get("mask", data["mask"])
    T = len(mask)
    cells = [(i, j) for i in range(T) for j in range(i) if not mask[i][j]]
    assert cells, "the text must be longer than the window"
    return cells[-1]


def test_a_window_masked_cell_says_masked_and_why(family_tab):
    tab = family_tab
    data = answer(tab, include=["stats"])
    window = {lv["layer"]: lv["window"] for lv in data["layers"]}
    assert window[0] == (6 if tab.kind == "gemma2" else 5) and len(data["tokens"]) > window[0]
    tab.open("/#text=" + quote(SENTENCE))
    assert (
        tab.page.evaluate("() => document.querySelector('[data-testid=heads-grid]').gridLayout.grid.thumbnail.block")
        == 1
    )
    i, j = window_masked_cell(data, 0)

    # the grid: layer 0's cell is masked by the window, and says so
    tip = grid_tip(tab, 0, i, j)
    assert "masked" in tip and f"outside the sliding window of {window[0]} tokens" in tip
    assert "after the query" not in tip and "weight" not in tip
    # a key after the query is masked for that other reason
    tip = grid_tip(tab, 0, 0, 1)
    assert "masked: this key comes after the query" in tip and "window" not in tip
    caption = tab.page.get_by_test_id("grid-caption").inner_text()
    assert f"outside the sliding window of {window[0]} tokens" in caption and "keys after the query" in caption
    if tab.kind == "gemma2":
        # layer 1 has no window: the same cell is a weight there, painted as one (not with layer 0's mask)
        assert window[1] is None
        tip = grid_tip(tab, 1, i, j)
        assert "masked" not in tip and "weight" in tip
        assert grid_pixel(tab, 1, i, j) != grid_pixel(tab, 0, i, j) == [236, 238, 242]
        assert "in layer 0, keys outside the sliding window" in caption

    # the head view (layer 0, head 0): the same cell says masked and why on hover
    text = heatmap_hover(tab, "head-heatmap", i, j)
    assert "masked" in text and f"outside the sliding window of {window[0]} tokens" in text
    assert "after the query" not in text and "weight" not in text
    text = heatmap_hover(tab, "head-heatmap", 0, len(data["tokens"]) - 1)
    assert "masked: this key comes after the query" in text
    # a seen cell shows its weight and scores, named by the model's divisor
    text = heatmap_hover(tab, "head-heatmap", i, i)
    assert "weight" in text and "masked" not in text
    hatch = tab.page.locator("#head-hatch-text").inner_text()
    assert "a later token" in hatch and f"outside the sliding window of {window[0]}" in hatch
    assert tab.unexpected_console_errors() == []


def page_texts(tab) -> dict[str, list[str]]:
    """Everything the visible page says: text, title attributes, and what each drawn figure
    writes (hover templates, hover texts, trace names, annotations, axis and colour bar titles)."""
    return tab.page.evaluate(
        """() => {
            const visible = (el) => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
            const titles = [...document.querySelectorAll('[title]')].filter(visible).map((el) => el.title);
            const figures = [];
            for (const gd of document.querySelectorAll('.js-plotly-plot, .canvas-plot')) {
                if (!visible(gd) || !gd.data) continue;
                for (const t of gd.data) {
                    figures.push(t.hovertemplate ?? '', t.name ?? '', t.colorbar?.title?.text ?? '');
                    if (Array.isArray(t.text)) figures.push(...new Set(t.text.flat().filter(Boolean)));
                }
                const l = gd.layout;
                for (const a of l.annotations ?? []) figures.push(a.text);
                for (const key of Object.keys(l)) if (/^[xy]axis/.test(key)) figures.push(l[key]?.title?.text ?? '');
            }
            return { text: [document.body.innerText], titles, figures: figures.filter(Boolean) };
        }"""
    )


def test_every_caption_names_the_models_divisor(family_tab):
    tab = family_tab
    data = answer(tab)
    rules = {lv["divisor_rule"] for lv in data["layers"]}
    name = "√query_pre_attn_scalar" if tab.kind == "gemma2" else "√d_k"
    assert rules == {"sqrt(query_pre_attn_scalar)" if tab.kind == "gemma2" else "sqrt(head_dim)"}
    tab.open("/#text=" + quote(SENTENCE))
    seen = {}
    for view, label in VIEWS.items():
        tab.page.get_by_role("tab", name=label, exact=True).click()
        tab.settle()
        tab.page.wait_for_function(
            f"() => document.querySelector('#view-{view} :is(.js-plotly-plot, .canvas-plot).drawn') !== null"
        )
        if view == "head":  # the grid tooltip too
            tab.page.mouse.move(*grid_cell(tab, 0, 0, 1, 0))
            tab.page.locator("#grid-tip").wait_for(state="visible")
        seen[view] = page_texts(tab)
    everything = [s for texts in seen.values() for part in texts.values() for s in part]
    if tab.kind == "gemma2":
        wrong = [s for s in everything if ROOT_DK.search(s)]
        assert wrong == [], "√d_k named where the model divides by √query_pre_attn_scalar"
    else:
        assert not any("query_pre_attn_scalar" in s for s in everything)

    def names(view: str, part: str) -> bool:
        return any(name in s for s in seen[view][part])

    # the model badge and the scaling switch's tooltip, the head view's hover label
    assert names("head", "text") and names("head", "titles") and names("head", "figures")
    # the headings, legends and statistics of the scaling view
    assert names("scaling", "text") and names("scaling", "figures")
    # the pipeline: its notes, its step titles and hover labels
    assert names("pipeline", "text") and names("pipeline", "figures")
    # the variance tab: its legend and its summary
    assert names("variance", "text") and names("variance", "figures")
    pipeline = " ".join(seen["pipeline"]["figures"] + seen["pipeline"]["text"])
    if tab.kind == "gemma2":  # the softcap is a step of its own, with its formula
        assert "softcap" in pipeline and "tanh(s / 20)·20" in pipeline
        assert "÷ √query_pre_attn_scalar = 8" in pipeline
    else:
        assert "softcap" not in pipeline and "÷ √d_k = √16 = 4" in pipeline
    assert tab.unexpected_console_errors() == []


def test_with_the_mask_off_no_caption_speaks_of_masked_cells(family_tab):
    tab = family_tab
    tab.open("/#causal=0&text=" + quote(SENTENCE))
    assert tab.page.locator("#head-hatch").is_hidden()
    fig = tab.figure("head-heatmap")
    assert len(fig["data"]) == 1 and not fig["layout"].get("images")  # no masked cell to hover or hatch
    grid = tab.page.get_by_test_id("grid-caption").inner_text()
    assert "Grey" not in grid and "masked" not in grid
    tab.page.get_by_role("tab", name="Mask pipeline").click()
    tab.settle()
    notes = " ".join(tab.page.locator("#pipeline-notes li").all_inner_texts())
    assert "hatched" not in notes and "exactly 0" not in notes and "No mask (what-if)" in notes
    steps = " ".join(a["text"] for a in tab.figure("mask-steps")["layout"]["annotations"])
    assert "hatched" not in steps and "no mask (what-if)" in steps
    visible = tab.page.evaluate("() => document.body.innerText")
    assert not re.search(r"hatched|Grey cells", visible)
    banner = tab.page.get_by_test_id("whatif-banner").inner_text()
    assert "no sliding window" in banner  # the window goes with the mask


def test_a_one_token_text_says_why_its_variance_ratio_is_undefined(family_tab):
    tab = family_tab
    text = next(t for t in ("A", "a", "I", "the") if len(answer(tab, text=t)["tokens"]) == 1)
    stats = answer(tab, text=text, include=["stats"])["layers"][0]["heads"][0]["stats"]
    assert stats["variance_ratio"] is None
    tab.open(f"/#view=variance&text={quote(text)}")
    summary = tab.page.locator("#variance-summary").inner_text()
    assert "undefined" in summary and "0 / 0" in summary and "one-token text" in summary
    assert "32" not in summary and "null" not in summary
    tab.page.get_by_role("tab", name="Scaled vs unscaled").click()
    tab.settle()
    cells = tab.page.locator("[data-testid=stats-table] tr[data-stat=variance_ratio] td").all_inner_texts()
    assert cells[0] == "–" and "undefined" in cells[2]
    assert tab.unexpected_console_errors() == []


def test_at_390_px_a_softcap_models_five_steps_stand_in_two_rows(family_tab):
    """Gemma 2's pipeline has a step more (the softcap): at phone width it still stands in two
    rows, each panel wide enough to read."""
    if family_tab.kind != "gemma2":
        pytest.skip("only Gemma 2 has the softcap step")
    page = family_tab.page
    page.set_viewport_size({"width": 390, "height": 900})
    family_tab.open("/#view=pipeline&text=" + quote(SENTENCE))
    page.wait_for_function("() => document.querySelector('[data-testid=mask-steps]')?._fullLayout")
    layout = page.evaluate(
        """() => {
            const L = document.querySelector('[data-testid=mask-steps]')._fullLayout;
            const axes = Object.keys(L).filter((k) => /^yaxis\\d*$/.test(k)).sort();
            return axes.map((k) => ({top: L[k]._offset, height: L[k]._length, width: L['x' + k.slice(1)]._length}));
        }"""
    )
    steps = layout[:-1]  # the last axis is the Σ row column
    assert len(steps) == 5
    assert len({round(a["top"]) for a in steps}) == 2, layout
    assert min(a["width"] for a in steps) > 70 and min(a["height"] for a in steps) > 150, layout


def test_at_390_px_the_step_titles_do_not_print_over_each_other(family_tab):
    """The titles carry long names (÷ √query_pre_attn_scalar, the softcap's tanh): on a phone each
    value goes on a line of its own, and no two titles' boxes overlap."""
    page = family_tab.page
    page.set_viewport_size({"width": 390, "height": 900})
    family_tab.open("/#view=pipeline&text=" + quote(SENTENCE))
    page.wait_for_function("() => document.querySelector('[data-testid=mask-steps]')?._fullLayout")
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=mask-steps] .annotation-text')]
            .map((e) => e.getBoundingClientRect()).map((r) => [r.left, r.top, r.right, r.bottom])"""
    )
    assert len(boxes) >= 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a[2] <= b[0] + 1 or b[2] <= a[0] + 1 or a[3] <= b[1] + 1 or b[3] <= a[1] + 1
            assert apart, (a, b)
