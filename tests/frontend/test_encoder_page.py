"""The page on an encoder (a tiny BERT built in the test, served by the real server): the badge
says encoder, the guesses are at the chosen position, no causal triangle is assumed, and the
lessons point at the loaded model."""

from __future__ import annotations

import json
import urllib.error
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.encoders import build_encoder  # noqa: E402

SENTENCE = "The cat [MASK] on the mat, and the dog saw the cat."


@pytest.fixture(scope="module")
def encoder_server(tmp_path_factory, server):
    with serving(build_encoder("bert", tmp_path_factory.mktemp("bert") / "bert"), "bert") as s:
        yield s


@pytest.fixture
def encoder_tab(tab, encoder_server):
    tab.base_url = encoder_server.url
    return tab


def test_the_page_says_encoder_and_guesses_at_the_position(encoder_tab):
    tab = encoder_tab
    tab.open("/#text=" + quote(SENTENCE))
    assert "encoder" in tab.page.locator("#model-badge").inner_text()
    tokens = tab.tokens()
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"  # the tokenizer's own special tokens
    at = tokens.index("[MASK]")
    tab.page.locator("[data-testid=tokens] .chip").nth(at).click()
    tab.settle()
    card = tab.page.get_by_test_id("predictions")
    assert card.locator("h2").inner_text() == "Guesses at this position"
    assert tab.page.locator("#predictions-title").inner_text().startswith("At [MASK]")
    assert "at this position" in tab.page.locator("#predictions-actual").inner_text()
    # the served guesses at the mask are the ones listed
    served = tab.page.evaluate(f"() => window.attnscope.state.detail.response.predictions[{at}].map(p => p.token)")
    listed = card.locator(".pred-token").all_inner_texts()
    assert listed == served
    # the strip's chip at the mask names the same guesses in its hover
    hover = tab.page.locator("[data-testid=tokens] .chip").nth(at).get_attribute("title")
    assert "guesses at this position: " + served[0] in hover
    # no causal mask to switch off on an encoder
    assert tab.page.get_by_test_id("causal-toggle").is_disabled()
    assert not tab.unexpected_console_errors()


def test_the_pipeline_says_every_key_is_seen(encoder_tab):
    tab = encoder_tab
    tab.open("/#view=pipeline&text=" + quote(SENTENCE))
    notes = tab.page.locator("#pipeline-notes").inner_text()
    assert "encoder masks nothing" in notes and "what-if" not in notes
    assert "look ahead" not in notes
    titles = tab.page.evaluate(
        "() => document.querySelector('[data-testid=mask-steps]').layout.annotations.map((a) => a.text).join(' ')"
    )
    assert "all visible" in titles and "what-if" not in titles and "rows: query" not in titles  # one stack: no sides
    assert not tab.unexpected_console_errors()


def test_the_lens_reads_each_layer_as_guesses_at_each_position(encoder_tab):
    tab = encoder_tab
    tab.open("/#view=lens&text=" + quote(SENTENCE))
    tab.page.wait_for_function("() => !document.getElementById('lens-caption').textContent.includes('computing')")
    caption = tab.page.locator("#lens-caption").inner_text()
    assert "masked-LM head" in caption and "token after" not in caption
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_attribution_with_no_token_chosen_leaves_the_position_to_the_server(encoder_tab, width):
    """No token chosen: the view sends no position, so the server's default (an encoder's first mask token)
    applies, and the page shows the server's own answer to that body (its split at the mask, or its refusal);
    a chosen token is then sent as it is."""
    tab = encoder_tab
    sent = []
    tab.page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/api/attribution") else None)
    tab.open_at(width, "/#view=attribution&text=" + quote(SENTENCE))
    caption = tab.page.get_by_test_id("attribution-caption")
    tab.page.wait_for_function("() => !document.querySelector('[data-testid=attribution-caption]')"
                               ".textContent.includes('computing')")
    assert sent and sent[-1].get("position") is None
    body = {k: v for k, v in sent[-1].items() if v is not None}
    try:
        served = post_json(tab.base_url + "/api/attribution", body)
    except urllib.error.HTTPError as e:  # refused: the page says the server's reason
        assert e.code == 422 and json.loads(e.read())["detail"][0]["msg"] in caption.inner_text()
    else:
        assert served["position"] == tab.tokens().index("[MASK]")
        assert tab.drawn("attribution-heads")["data"][0]["z"] == served["heads"]
    tab.page.locator("[data-testid=tokens] .chip").nth(2).click()
    tab.settle()
    assert sent[-1].get("position") == 2


def test_the_lesson_points_at_the_loaded_encoder(encoder_tab):
    tab = encoder_tab
    tab.open("/lessons.html")
    note = tab.page.get_by_test_id("lesson-model")
    note.wait_for(state="visible")
    assert "is an encoder" in note.inner_text()
    assert not tab.unexpected_console_errors()


@pytest.fixture(scope="module")
def modernbert_server(tmp_path_factory, server):
    with serving(build_encoder("modernbert", tmp_path_factory.mktemp("mb") / "modernbert"), "modernbert") as s:
        yield s


def test_a_local_layer_is_a_band_on_both_sides(tab, modernbert_server):
    tab.base_url = modernbert_server.url
    tab.open("/#view=pipeline&layer=1&text=" + quote(SENTENCE))
    notes = tab.page.locator("#pipeline-notes").inner_text()
    assert "local layer's band" in notes and "look ahead" not in notes
    titles = tab.page.evaluate(
        "() => document.querySelector('[data-testid=mask-steps]').layout.annotations.map((a) => a.text).join(' ')"
    )
    assert "outside the band" in titles and "all visible" not in titles
    # the served mask of the local layer: a band around the diagonal, seen on both sides
    mask = tab.page.evaluate(
        "() => { const d = window.attnscope.state.detail.response;"
        " const l = d.layers[0]; return Array.from(l.mask ?? d.mask, r => Array.from(r)); }"
    )
    T = len(mask)
    assert all(mask[i][j] == (abs(i - j) <= 2) for i in range(T) for j in range(T))
    assert not tab.unexpected_console_errors()


@pytest.fixture(scope="module")
def deberta_server(tmp_path_factory, server):
    with serving(build_encoder("deberta-v2", tmp_path_factory.mktemp("db") / "deberta"), "deberta-v2") as s:
        yield s


def test_deberta_hover_splits_each_raw_score_into_its_three_terms(tab, deberta_server):
    tab.base_url = deberta_server.url
    tab.open("/#text=" + quote(SENTENCE))
    assert "deberta-v2" in tab.page.locator("#model-badge").inner_text()
    head = tab.page.evaluate(
        "() => { const h = window.attnscope.state.detail.response.layers[0].heads[0]; return Object.keys(h); }"
    )
    assert "attn_scores_content" in head and "pattern" in head
    trace = tab.figure("head-heatmap")["data"][0]
    assert "= content %{customdata[4]:.3f} + content→position %{customdata[5]:.3f} + position→content" in (
        trace["hovertemplate"]
    )
    for row in trace["customdata"][:4]:
        for cell in row:  # each cell's raw score and its three terms, as the server sent them
            _, _, raw, _, *terms = cell
            if raw is not None:
                assert abs(sum(terms) - raw) < 2e-3
    box = tab.page.get_by_test_id("head-heatmap").bounding_box()
    tab.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert not tab.unexpected_console_errors()
