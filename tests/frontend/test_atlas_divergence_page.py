"""The Atlas view of an atlas made with ``--compare-model`` (a tiny Llama against a copy with layer 1's
q/k changed): the ``divergence`` map is the API's numbers, its caption names the compare model, and a
head's card draws its histogram over bins named by their edges (powers of 2 below 1, not whole
tokens) and its mean without rounding it away."""

from __future__ import annotations

import re

import pytest

from tests.kit.live import get_json, serving

pytest.importorskip("pyarrow")
pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from attnscope.model.atlas.build import atlas  # noqa: E402

from tests.kit.atlas import TEXTS  # noqa: E402
from tests.kit.family import build  # noqa: E402
from tests.kit.hub import change_layer, copy_with  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory, server):
    """A tiny Llama, its atlas with ``divergence`` against a changed copy, and the corpus."""
    root = tmp_path_factory.mktemp("divergence-page")
    base = build("llama", root / "base")
    tuned = copy_with(base, root / "tuned", lambda m: change_layer(m, 1))
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(t.strip() for t in TEXTS * 2), encoding="utf-8")
    out = atlas(corpus, root / "moved", checkpoint=base, compare_model=tuned, seq_len=24, batch_size=4,
                exemplars=3, progress=False)
    return base, out, corpus


@pytest.fixture(scope="module")
def divergence_server(built):
    base, out, _ = built
    with serving(base, env={"ATTNSCOPE_ATLAS": str(out)}) as s:
        yield s


def test_the_divergence_map_and_a_heads_histogram(tab, divergence_server):
    tab.base_url = divergence_server.url
    tab.open("/#view=atlas&text=Hello")
    page = tab.page
    page.select_option("#atlas-metric", "divergence")
    served = get_json(tab.base_url + "/api/atlas")
    page.wait_for_function("() => document.querySelector('#atlas-map').data?.[0]?.colorbar?.title?.text === "
                           "'divergence'")
    assert tab.figure("atlas-map")["data"][0]["z"] == served["maps"]["divergence"]
    caption = page.locator("#atlas-caption").inner_text()
    assert "divergence: Jensen–Shannon" in caption and served["atlases"][0]["definitions"]["divergence"] in caption
    # layer 1, head 0: where the copy changed the weights
    box = page.locator("#atlas-map .nsewdrag").first.bounding_box()
    n_layers, n_heads = len(served["layers"]), len(served["maps"]["divergence"][0])
    page.mouse.click(box["x"] + box["width"] * (0.5 / n_heads), box["y"] + box["height"] * (1.5 / n_layers))
    page.locator("#atlas-exemplars li").first.wait_for()
    card = get_json(tab.base_url + "/api/atlas/heads/1/0")
    hist = tab.figure("atlas-hist")
    names = list(card["metrics"])
    drawn = hist["data"][names.index("divergence")]
    d = card["metrics"]["divergence"]
    assert drawn["y"] == d["histogram"][: len(drawn["y"])] and sum(drawn["y"]) == d["count"]
    for i, name in enumerate(drawn["x"]):  # each bin named by its two edges
        lo, hi = (float(x) for x in name.split("–"))
        assert lo == pytest.approx(d["bin_edges"][i], rel=0.05) and hi == pytest.approx(d["bin_edges"][i + 1], rel=0.05)
    label = next(a["text"] for a in hist["layout"]["annotations"] if a["text"].startswith("divergence"))
    assert float(re.search(r"mean (\S+)", label)[1]) == pytest.approx(d["mean"], rel=0.01)
    shown = [e for e in card["exemplars"] if e["metric"] == "divergence"]
    values = page.locator("#atlas-exemplars li span.muted").all_inner_texts()
    assert [float(v) for v in values] == pytest.approx([e["value"] for e in shown], rel=0.01)
    assert not tab.unexpected_console_errors()


@pytest.fixture(scope="module")
def one_with_divergence_server(built):
    """Two atlases of one model: ``moved`` has ``divergence``, ``plain`` (no compare model) has not."""
    base, moved, corpus = built
    plain = atlas(corpus, moved.parent / "plain", checkpoint=base, seq_len=24, batch_size=4, exemplars=3,
                  progress=False)
    with serving(base, env={"ATTNSCOPE_ATLAS": f"{moved},{plain}"}) as s:
        yield s


def test_a_difference_with_an_atlas_lacking_the_metric_is_said_and_not_drawn(tab, one_with_divergence_server):
    """Issue 42, item 2: ``divergence`` with "minus the other" ticked, the other atlas without it: the
    caption says so and claims no difference; the map is the chosen atlas's own (the API's numbers on
    its own scale), and a metric both have draws the difference again."""
    tab.base_url = one_with_divergence_server.url
    tab.open("/#view=atlas&text=Hello")
    page = tab.page
    page.wait_for_function("() => window.attnscope.state.atlasView.index !== null")
    page.select_option("#atlas-metric", "divergence")
    page.check("#atlas-difference")
    page.wait_for_function("() => window.attnscope.state.atlasView.index?.compare === 'plain'")
    served = get_json(tab.base_url + "/api/atlas?atlas=moved&compare=plain")
    assert "divergence" in served["maps"] and "divergence" not in served["difference"]
    caption = page.locator("#atlas-caption").inner_text()
    assert "moved − plain" not in caption and "red where" not in caption
    assert "plain has no divergence" in caption
    trace = tab.figure("atlas-map")["data"][0]
    assert trace["z"] == served["maps"]["divergence"] and trace.get("zmid") is None
    assert trace["colorbar"]["title"]["text"] == "divergence" and "difference" not in trace["hovertemplate"]
    shared = next(m for m in served["difference"])
    page.select_option("#atlas-metric", shared)
    page.wait_for_function("() => document.querySelector('#atlas-map').data?.[0]?.zmid === 0")
    assert tab.figure("atlas-map")["data"][0]["z"] == served["difference"][shared]
    caption = page.locator("#atlas-caption").inner_text()
    assert "moved − plain" in caption and "has no" not in caption
    assert not tab.unexpected_console_errors()
