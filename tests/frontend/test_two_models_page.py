"""The "Two models" view over a Hub cache the test writes: a tiny Llama served, a copy of it with its
last layer's q/k changed (so the map lights that layer only: the earlier layers read exactly 0) and a
Llama of another shape (a refusal naming ``model_b``). Every number drawn is the server's
(POST /api/compare-models); the second model lives in the link. And the model badge says where the
layers sit when ``/api/model`` ``devices`` names several places (a server with ``--device-map``)."""

from __future__ import annotations

import json
from functools import partial
from urllib.parse import parse_qs, quote

import pytest

from tests.kit.live import get_json, post_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.app.test_device_map import DEVICE_MAP  # noqa: E402
from tests.kit.family import build  # noqa: E402
from tests.kit.hub import change_layer, copy_with, put_in_cache  # noqa: E402

TEXT = "The cat sat on the mat. The dog sat on the log."
LONG = " ".join(
    ["The old lighthouse keeper wrote every evening about the ships that passed the rocks."] * 2
)  # ~110 tokens of 128
CHANGED = 2  # the tuned copy's changed layer: the last of the tiny Llama's three


@pytest.fixture(scope="module")
def models_server(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("two-models")
    base = build("llama", root / "base")
    dirs = {
        "org/base": base,
        "org/tuned": copy_with(base, root / "tuned", partial(change_layer, layer=CHANGED)),
        "org/shallow": copy_with(base, root / "shallow", num_hidden_layers=2),
    }
    snapshots = {name: put_in_cache(root / "hub", name, d) for name, d in dirs.items()}
    env = {
        "HF_HUB_CACHE": str(root / "hub"),
        "HF_HUB_OFFLINE": "1",
        "OLLAMA_MODELS": str(root / "none"),
        "HOME": str(root),
    }
    with serving(snapshots["org/base"], env=env) as s:
        yield s


def served(tab, layer, head, text=TEXT, model_b="org/tuned"):
    """The server's own answer (model_b is loaded by then: the page asked first)."""
    return post_json(
        tab.base_url + "/api/compare-models", {"text": text, "model_b": model_b, "layer": layer, "head": head}
    )


def flat(z):
    return [c or 0 for row in z for c in row]


def open_models(tab, server, width, layer, head, text=TEXT, what_if=""):
    """Two models on ``server`` at ``width`` px, org/tuned second, (layer, head) chosen, once they are drawn."""
    tab.base_url = server.url
    link = f"/#view=twomodels&layer={layer}&head={head}{what_if}&text=" + quote(text) + "&modelb=org/tuned"
    tab.open_at(width, link, height=1000)
    wait_drawn(tab.page, layer, head)


def wait_drawn(page, layer, head):
    """The chosen head's three plots drawn from the answer for (layer, head)."""
    page.wait_for_function(
        "([l, h]) => { const m = window.attnscope.state.models; const gd = document.querySelector('#twomodels-diff');"
        " return m?.response && m.body.layer === l && m.body.head === h && gd?.dataset.signature?.startsWith(m.key);"
        " }",
        arg=[layer, head],
        timeout=180_000,  # the first ask loads model_b, on a machine shared with other tests
    )


def check_drawn(tab, answer, layer, head):
    """Map, both patterns and their difference: the answer's numbers, the colour ranges its own."""
    fig = tab.figure("twomodels-map")["data"][0]
    assert fig["y"] == ["L0", "L1", "L2"] and fig["z"] == answer["divergence"]
    assert fig["customdata"] == [
        [[m, a] for m, a in zip(ms, ags)] for ms, ags in zip(answer["max_abs"], answer["argmax_agreement"])
    ]
    assert "max |difference|" in fig["hovertemplate"] and "agreement" in fig["hovertemplate"]
    for testid, key in (("twomodels-a", "a"), ("twomodels-b", "b"), ("twomodels-diff", "difference")):
        assert flat(tab.figure(testid)["data"][0]["z"]) == pytest.approx(flat(answer[key]), abs=0), testid
    diff = tab.figure("twomodels-diff")["data"][0]
    assert diff["zmax"] == pytest.approx(max(answer["max_abs"][layer][head], 1e-6)) and diff["zmid"] == 0
    masked = [
        c
        for row_z, row_m in zip(tab.figure("twomodels-a")["data"][0]["z"], answer["mask"])
        for c, m in zip(row_z, row_m)
        if not m
    ]
    assert masked and all(c is None for c in masked)  # masked cells are gaps, never a zero weight


def click_head(page, layer, head):
    """Click the map's cell of (layer, head) where Plotly drew it (scrolled into the window first)."""
    page.get_by_test_id("twomodels-map").scroll_into_view_if_needed()
    x, y = page.evaluate(
        """([l, h]) => { const gd = document.querySelector('#twomodels-map'); const L = gd._fullLayout;
            const r = gd.getBoundingClientRect();
            return [r.left + L.margin.l + L.xaxis.l2p(h), r.top + L.margin.t + L.yaxis.l2p(l)]; }""",
        [layer, head],
    )
    page.mouse.click(x, y)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_map_lights_the_changed_layer_and_a_click_compares_a_head(tab, models_server, width):
    page = tab.page
    open_models(tab, models_server, width, CHANGED, 0)
    answer = served(tab, CHANGED, 0)
    check_drawn(tab, answer, CHANGED, 0)
    # the layers before the changed one are exactly 0; the changed one is not
    assert all(v == 0 for row in answer["divergence"][:CHANGED] for v in row)
    assert min(answer["divergence"][CHANGED]) > 0
    # the picker lists what the model picker lists, GET /api/models' openable names, but the served
    # model (issue 42, item 15: comparing a model with itself), which the server marks
    listing = get_json(tab.base_url + "/api/models")
    assert [m["name"] for m in listing["models"] if m["served"]] == [listing["serving"]] == ["org/base"]
    names = [m["name"] for m in listing["models"] if m["status"] == "ok" and not m["served"]]
    options = [o.get_attribute("value") for o in page.get_by_test_id("model-b").locator("option").all()]
    assert options == ["", *names] and "org/base" not in options and len(names) >= 2
    assert page.get_by_test_id("model-b").input_value() == "org/tuned"
    caption = page.get_by_test_id("twomodels-caption").inner_text()
    assert "org/base (served) against org/tuned" in caption and f"Layer {CHANGED}, head 0" in caption
    assert linked(page)["modelb"] == ["org/tuned"]
    shown = ("twomodels-map", "twomodels-a", "twomodels-b", "twomodels-diff")
    boxes = [page.get_by_test_id(t).bounding_box() for t in shown]
    assert all(b["x"] >= 0 and b["x"] + b["width"] <= width + 0.5 for b in boxes)
    page.screenshot(path=f"/tmp/two-models-{width}.png", full_page=True)
    # a click on another head: that head's patterns, the server's
    click_head(page, 1, 3)
    wait_drawn(page, 1, 3)
    check_drawn(tab, served(tab, 1, 3), 1, 3)
    assert page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]") == [1, 3]
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_long_text_and_a_what_if_are_said_true(tab, models_server, width):
    """With the mask off the route still compares the models as trained: the view says so."""
    page = tab.page
    open_models(tab, models_server, width, 1, 2, text=LONG, what_if="&causal=0")
    check_drawn(tab, served(tab, 1, 2, text=LONG), 1, 2)
    assert (
        "The what-ifs on the page (mask off) are not applied here: both models as trained."
        in page.get_by_test_id("twomodels-caption").inner_text()
    )
    assert "compares both models as trained" in page.get_by_test_id("whatif-banner").inner_text()
    page.screenshot(path=f"/tmp/two-models-long-{width}.png", full_page=True)
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_another_shape_is_said_in_one_line_naming_model_b(tab, models_server, width):
    """The first ask loads model_b (202: "loading", asked again), then its refusal is said, nothing stale drawn."""
    page = tab.page
    statuses = []
    page.on("response", lambda r: statuses.append(r.status) if r.url.endswith("/api/compare-models") else None)
    open_models(tab, models_server, width, 1, 0)
    page.evaluate(
        "() => { window.__said = []; new MutationObserver(() => window.__said.push("
        "document.querySelector('#twomodels-caption').innerText)).observe("
        "document.querySelector('#twomodels-caption'), {childList: true, characterData: true, subtree: true}); }"
    )
    page.get_by_test_id("model-b").select_option("org/shallow")
    page.wait_for_function(
        "() => document.querySelector('#twomodels-caption').innerText.startsWith('Could not compare')", timeout=180_000
    )
    caption = page.get_by_test_id("twomodels-caption").inner_text()
    assert caption.startswith("Could not compare: model_b: model_b is 'org/shallow'") and "\n" not in caption
    assert page.get_by_test_id("twomodels-map").is_hidden() and page.get_by_test_id("twomodels-plots").is_hidden()
    if width == 1280:  # the module's first ask of org/shallow: it loaded meanwhile, and the view said so
        assert 202 in statuses and any(
            s.startswith("loading org/shallow") for s in page.evaluate("() => window.__said")
        )
    assert linked(page)["modelb"] == ["org/shallow"]
    page.screenshot(path=f"/tmp/two-models-refused-{width}.png", full_page=True)
    assert not tab.unexpected_console_errors(allowed=("422",))




@pytest.fixture(scope="module")
def spread_server(tmp_path_factory, server):
    pytest.importorskip("accelerate")
    root = tmp_path_factory.mktemp("spread")
    env = {"ATTNSCOPE_DEVICE_MAP": json.dumps(DEVICE_MAP), "ATTNSCOPE_OFFLOAD_FOLDER": str(root / "offload")}
    with serving(build("llama", root / "llama"), env=env) as s:
        yield s


@pytest.mark.parametrize("width", [1280, 390])
def test_the_badge_says_where_the_layers_sit(tab, spread_server, width):
    tab.base_url = spread_server.url
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#text=" + quote(TEXT))
    devices = get_json(tab.base_url + "/api/model")["devices"]
    assert devices == {"0": "cpu", "1": "disk", "2": "disk"}
    badge = page.locator("#model-badge .badge-device")
    assert badge.text_content().startswith("layers 0 cpu · 1–2 disk")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    assert not tab.unexpected_console_errors()


def linked(page) -> dict:
    """The link's parameters, decoded: the page writes `/` as %2F, a link typed by hand may not."""
    return parse_qs(page.evaluate("() => window.location.hash").lstrip("#"))
