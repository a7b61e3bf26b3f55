"""The Atlas view in a browser: a server started with two atlases of the shipped model draws a
metric's layer × head map (the API's numbers), opens a head's card on a click (its histograms
and exemplars), draws the difference of the two atlases on a diverging scale, and an exemplar's
link opens the explorer on that text at that head and query token."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from tests.kit.live import HOLD_FETCH, get_json, serving

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.browser

from attnscope.model.ours.checkpoint import SHIPPED  # noqa: E402

from tests.kit.atlas import two_atlases  # noqa: E402


@pytest.fixture(scope="module")
def atlas_server(tmp_path_factory, server):
    first, second = two_atlases(tmp_path_factory.mktemp("atlas-page"))
    with serving(SHIPPED, env={"ATTNSCOPE_ATLAS": f"{first},{second}"}) as s:
        yield s


@pytest.fixture
def atlas_tab(tab, atlas_server):
    tab.base_url = atlas_server.url
    return tab


def test_the_map_the_card_the_difference_and_the_way_back_to_the_explorer(atlas_tab):
    tab = atlas_tab
    tab.open("/#view=atlas&text=Hello")
    page = tab.page
    assert page.locator("#tab-atlas").is_visible()
    page.select_option("#atlas-metric", "previous_token")
    served = get_json(tab.base_url + "/api/atlas")
    fig = tab.figure("atlas-map")
    assert fig["data"][0]["z"] == served["maps"]["previous_token"]
    assert fig["data"][0]["zmin"] == 0 and fig["data"][0]["zmax"] == 1
    assert "previous_token" in page.locator("#atlas-caption").inner_text()
    # a click on layer 2, head 1 opens its card
    box = page.locator("#atlas-map .nsewdrag").first.bounding_box()
    n_layers, n_heads = len(served["layers"]), len(served["maps"]["previous_token"][0])
    page.mouse.click(box["x"] + box["width"] * (1.5 / n_heads), box["y"] + box["height"] * (2.5 / n_layers))
    page.locator("#atlas-exemplars li").first.wait_for()
    assert page.locator("#atlas-card-title").inner_text() == "Layer 2 · head 1"
    card = get_json(tab.base_url + "/api/atlas/heads/2/1?atlas=first")
    hist = tab.figure("atlas-hist")
    for drawn, m in zip(
        hist["data"], card["metrics"].values(), strict=True
    ):  # the API's counts; empty tail bins left out
        assert drawn["y"] == m["histogram"][: len(drawn["y"])] and sum(drawn["y"]) == sum(m["histogram"])
    shown = [e for e in card["exemplars"] if e["metric"] == "previous_token"]
    items = page.locator("#atlas-exemplars li")
    assert items.count() == len(shown)
    query = shown[0]["text"][shown[0]["query_start"] : shown[0]["query_end"]]
    assert items.first.locator("mark").inner_text() == query.replace("\n", "↵").replace("\t", "→")
    # the head's queries and keys, projected together: the API's points
    page.wait_for_function("() => document.querySelector('#atlas-qk').data?.length === 2")
    qk = get_json(tab.base_url + "/api/atlas/heads/2/1/qk?atlas=first")
    drawn = tab.figure("atlas-qk")["data"]
    assert drawn[0]["x"] == [p["x"] for p in qk["points"] if p["kind"] == "q"]
    assert drawn[1]["y"] == [p["y"] for p in qk["points"] if p["kind"] == "k"]
    assert "principal components" in page.locator("#atlas-qk-caption").inner_text()
    page.select_option("#atlas-qk-colour", "token")  # the most frequent tokens each a colour: every point still drawn
    page.wait_for_function("() => document.querySelector('#atlas-qk').data.length > 2")
    by_token = tab.figure("atlas-qk")["data"]
    assert sum(len(t["x"]) for t in by_token) == len(qk["points"])
    assert "Coloured by token" in page.locator("#atlas-qk-caption").inner_text()
    page.select_option("#atlas-qk-colour", "position")
    # the difference of the two atlases, signed, centred on 0
    page.check("#atlas-difference")
    page.wait_for_function("() => document.querySelector('#atlas-map').data?.[0]?.zmid === 0")
    diff = get_json(tab.base_url + "/api/atlas?atlas=first&compare=second")
    fig = tab.figure("atlas-map")
    assert fig["data"][0]["z"] == diff["difference"]["previous_token"] and fig["data"][0]["colorscale"] == "RdBu"
    assert "first − second" in page.locator("#atlas-caption").inner_text()
    # an exemplar opens the explorer at that head and its query token
    link = page.locator("#atlas-exemplars a").first
    params = parse_qs(link.get_attribute("href").lstrip("#"))
    assert params["layer"] == ["2"] and params["head"] == ["1"] and params["pos"] == [str(shown[0]["query"])]
    link.click()
    page.wait_for_function("() => !document.querySelector('#view-head').hidden")
    page.locator("#head-heatmap .plot-cells").first.wait_for()
    assert page.locator("#head-title").inner_text() == "Layer 2 · head 1"
    assert page.locator("#text-input").input_value() == shown[0]["text"]
    assert not tab.unexpected_console_errors()


def test_an_atlas_index_asked_before_the_latest_is_never_drawn(atlas_tab):
    """The difference switched on and off again quickly: the answer with the difference lands last and is
    dropped, so the map and its caption stay those of the first atlas alone, as the switch says."""
    tab = atlas_tab
    tab.open("/#view=atlas&text=Hello")
    page = tab.page
    page.wait_for_function("() => window.attnscope.state.atlasView.index !== null")
    page.evaluate(HOLD_FETCH, "/api/atlas")
    page.check("#atlas-difference")
    page.uncheck("#atlas-difference")
    page.wait_for_function("() => window.__asked.length === 2")
    assert ["compare=second" in a["url"] for a in page.evaluate("() => window.__asked")] == [True, False]
    page.evaluate("() => window.__release(1)")
    page.wait_for_function("() => document.querySelector('#atlas-map').data?.[0]?.zmid !== 0")
    page.evaluate("() => window.__release(0)")  # resolves once the server answered
    page.wait_for_timeout(300)  # its answer read: before the fix it replaced the index and was drawn
    assert page.evaluate("() => window.attnscope.state.atlasView.index.compare") is None
    assert tab.figure("atlas-map")["data"][0].get("zmid") != 0
    assert "first − second" not in page.locator("#atlas-caption").inner_text()
    assert not tab.unexpected_console_errors()


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"] - 0.5
        and b["x"] < a["x"] + a["width"] - 0.5
        and a["y"] < b["y"] + b["height"] - 0.5
        and b["y"] < a["y"] + a["height"] - 0.5
    )


def test_on_a_phone_the_head_cards_histogram_titles_stand_whole_and_apart(atlas_tab):
    """Issue 42, item 8: at 390 px each histogram's title ("previous_token · mean 0.51") was cut at the plot's
    edge or ran into its neighbour, and tick labels ran into the next title. Each title now lies inside the
    plot, over its own chart, clear of every other title and every tick label."""
    tab = atlas_tab
    tab.open_at(390, "/#view=atlas&text=Hello")
    page = tab.page
    page.select_option("#atlas-metric", "previous_token")
    page.locator("#atlas-map .nsewdrag").first.scroll_into_view_if_needed()
    box = page.locator("#atlas-map .nsewdrag").first.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.6)
    page.locator("#atlas-exemplars li").first.wait_for(timeout=20_000)
    tab.drawn("atlas-hist")
    page.locator("#atlas-hist").scroll_into_view_if_needed()
    boxes = page.evaluate(
        """() => {
            const gd = document.getElementById('atlas-hist');
            const rect = (el) => { const r = el.getBoundingClientRect();
                                   return { x: r.x, y: r.y, width: r.width, height: r.height, text: el.textContent }; };
            return {
                plot: rect(gd),
                titles: [...gd.querySelectorAll('.annotation-text')].map(rect),
                ticks: [...gd.querySelectorAll('.xtick text, .ytick text')].map(rect).filter((r) => r.width > 0),
                metrics: Object.keys(window.attnscope.state.atlasView.card.metrics),
            };
        }"""
    )
    plot, titles = boxes["plot"], boxes["titles"]
    assert len(titles) == len(boxes["metrics"]) >= 2
    for title, name in zip(titles, boxes["metrics"]):
        assert title["text"].startswith(f"{name} · mean ")
        assert plot["x"] <= title["x"] and title["x"] + title["width"] <= plot["x"] + plot["width"], title
        assert plot["y"] <= title["y"] and title["y"] + title["height"] <= plot["y"] + plot["height"], title
    for i, a in enumerate(titles):
        assert not any(_overlap(a, b) for b in titles[i + 1 :]), a
        assert not any(_overlap(a, t) for t in boxes["ticks"]), a
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
