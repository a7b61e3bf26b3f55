"""Every view with an image beside the text, on tiny image-text models (tests/kit/vision.py): the head view and
the grid ask with the image and draw the server's numbers for text + image (the image's tokens counted), the
image's run of tokens one labelled band on the strip and the heatmap's axes that expands to its tokens; the
captions say what the mask does inside the image (Gemma 3: not causal; LLaVA: causal); a view whose route takes
no image says it runs on the text alone and sends none."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving

pytest.importorskip("PIL")
pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.vision import build_gemma3, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."
N_IMAGE = 16  # build_gemma3(tokens=16); the tiny LLaVA's image is 16 patches too


@pytest.fixture(scope="module")
def vision_servers(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("vision-views")
    gemma = build_gemma3(root / "gemma3", image_size=112, tokens=N_IMAGE)
    llava = build_llava(root / "llava")
    with serving(gemma, "gemma3") as g, serving(llava, "llava") as v:
        yield {"gemma3": g, "llava": v}


def with_image(tab, server, tmp_path, width, view):
    """The page on `server` at `width` px, an image picked beside TEXT, then the tab `view`: (page, png bytes)."""
    tab.base_url = server.url
    page = tab.page
    page.set_viewport_size({"width": width, "height": 1000})
    tab.open("/#text=" + quote(TEXT))
    page.get_by_test_id("image-field").wait_for(state="visible")
    png = image_bytes(60, 40, seed=1)
    path = tmp_path / "picked.png"
    path.write_bytes(png)
    page.get_by_test_id("image-file").set_input_files(str(path))
    tab.image_taken()
    tab.show_view(view)
    return page, png


def wait_image_answers(page):
    """The grid and the chosen head answered for the text with the image (their tokens' kinds say so)."""
    page.wait_for_function(
        "() => { const s = window.attnscope.state; return window.attnscope.settled"
        " && s.grid?.response?.token_kinds?.includes('image') && s.detail?.response?.token_kinds?.includes('image'); }",
        timeout=120_000,
    )


def served(tab, png, **extra):
    body = {"text": TEXT, "image": base64.b64encode(png).decode(), "top_k": 0, **extra}
    return post_json(tab.base_url + "/api/attention", body)


def run_of(kinds):
    img = [i for i, k in enumerate(kinds) if k == "image"]
    return img[0], img[-1]


def band_ticks(tab):
    layout = tab.figure("head-heatmap")["layout"]
    return layout["xaxis"]["ticktext"], layout["yaxis"]["ticktext"], layout["xaxis"]["tickvals"]


@pytest.mark.parametrize("width", [1280, 390])
def test_the_head_view_and_grid_draw_the_image_prompt_with_a_band_that_expands(tab, vision_servers, tmp_path, width):
    page, png = with_image(tab, vision_servers["gemma3"], tmp_path, width, "head")
    wait_image_answers(page)
    answer = served(tab, png, layers=[0], heads=[0], include=["pattern"])
    T = len(answer["tokens"])
    first, last = run_of(answer["token_kinds"])
    assert last - first + 1 == N_IMAGE and T > N_IMAGE  # the image's tokens are in the count
    # the grid is the server's answer for text + image: its tokens, every layer's thumbnail
    grid = page.evaluate("() => window.attnscope.state.grid.response")
    assert grid["tokens"] == answer["tokens"] and grid["token_kinds"] == answer["token_kinds"]
    caption = page.get_by_test_id("grid-caption").inner_text()
    assert f"({T} tokens" in caption and f"image is tokens {first}–{last}" in caption
    # Gemma 3: both ways inside the image in the full layer, within the window in the sliding one
    assert "Inside the image the mask is not causal in every layer" in caption
    # the head heatmap draws the server's weights of text + image, cell for cell
    z = tab.figure("head-heatmap")["data"][0]["z"]
    pattern, mask = answer["layers"][0]["heads"][0]["pattern"], answer["mask"]
    assert len(z) == T
    for i in range(T):
        for j in range(T):
            if mask[i][j]:
                assert z[i][j] == pytest.approx(pattern[i][j], abs=2e-5)
            else:
                assert z[i][j] is None
    rows = page.locator("#head-rows").inner_text()
    assert f"image is tokens {first}–{last}" in rows and "mask of layer 0 is not causal" in rows
    # folded: one chip and one axis label for the image's run, its tokens' own chips and ticks left out
    label = f"image · {N_IMAGE} tokens"
    band = page.get_by_test_id("token-image-band")
    assert label in band.inner_text() and band.get_attribute("aria-expanded") == "false"
    assert page.locator("[data-testid=tokens] .chip[data-index]").count() == T - N_IMAGE
    assert f"{T} tokens, {N_IMAGE} of them the image's" in page.locator("#token-count").inner_text()
    x_text, y_text, x_vals = band_ticks(tab)
    assert label in x_text and label in y_text
    assert [v for v in x_vals if first <= v <= last] == [(first + last) / 2]
    page.screenshot(path=f"/tmp/image-head-{width}.png", full_page=True)
    # expanded: every token's chip, the axes' own ticks; the heatmap's numbers stay the answer's
    band.click()
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=tokens] .chip[data-index]').length === {T}")
    page.wait_for_function(
        "(l) => !document.querySelector('[data-testid=head-heatmap]').layout.xaxis.ticktext.includes(l)", arg=label
    )
    assert page.get_by_test_id("token-image-band").get_attribute("aria-expanded") == "true"
    assert tab.figure("head-heatmap")["data"][0]["z"] == z
    # a chip of the image is a token like any: it is the chosen query
    page.locator(f"[data-testid=tokens] .chip[data-index='{first + 2}']").click()
    page.wait_for_function(f"() => window.attnscope.state.position === {first + 2}")
    page.screenshot(path=f"/tmp/image-head-expanded-{width}.png", full_page=True)
    page.get_by_test_id("token-image-band").click()
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=tokens] .chip[data-index]').length === "
                           f"{T - N_IMAGE}")
    assert "selected" in page.get_by_test_id("token-image-band").get_attribute("class")  # the query is in it
    # the mask pipeline: a query cannot look ahead but inside the image
    tab.show_view("pipeline")
    page.wait_for_function("() => document.getElementById('pipeline-notes')?.textContent.includes('inside the image')")
    notes = page.locator("#pipeline-notes").inner_text()
    assert "cannot look ahead (but inside the image)" in notes and "not causal" in notes
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_view_without_images_says_so_and_runs_on_the_text_alone(tab, vision_servers, tmp_path, width):
    bodies = []
    tab.page.on("request", lambda r: bodies.append((r.url, r.post_data)) if r.method == "POST" else None)
    page, png = with_image(tab, vision_servers["gemma3"], tmp_path, width, "qk")
    note = page.get_by_test_id("image-textonly")
    note.wait_for(state="visible")
    assert "runs on the text alone" in note.inner_text() and "POST /api/neuron takes no image" in note.inner_text()
    page.wait_for_function("() => window.attnscope.state.neuron?.response", timeout=120_000)
    got = page.evaluate("() => window.attnscope.state.neuron.response")
    alone = post_json(tab.base_url + "/api/neuron", {"text": TEXT, "layer": 0, "head": 0})
    assert got["query"] == alone["query"] and got["key"] == alone["key"] and got["q"] == alone["q"]
    sent = [json.loads(b) for u, b in bodies if u.endswith("/api/neuron")]
    assert sent and all("image" not in b for b in sent)
    page.screenshot(path=f"/tmp/image-neuron-{width}.png", full_page=True)
    # a view whose route takes the image sends it: the lens of the image's prompt
    tab.show_view("lens")
    page.wait_for_function("() => window.attnscope.state.lens?.response", timeout=120_000)
    assert "image" in page.evaluate("() => window.attnscope.state.lens.response.token_kinds")
    assert page.locator("#view-lens [data-testid=image-textonly]:visible").count() == 0
    assert all("image" in json.loads(b) for u, b in bodies if u.endswith("/api/lens"))
    # Lines draws the image's prompt; a selection, whose route takes no image, is not combined and says why
    tab.show_view("lines")
    page.wait_for_function("() => window.attnscope.state.lines?.response", timeout=120_000)
    page.locator("[data-testid=lines-svg] text[data-side=query][data-index='2']").click()
    caption = page.locator("#lines-selection-caption")
    caption.wait_for(state="visible")
    assert "on the text alone" in caption.inner_text() and "takes no image" in caption.inner_text()
    assert not [u for u, _ in bodies if u.endswith("/api/selection")]
    # the image removed: the note goes, the view asks for the text as ever
    tab.show_view("qk")
    page.get_by_test_id("image-remove").click()
    page.wait_for_function("() => document.querySelector('[data-testid=image-textonly]').hidden")
    assert not tab.unexpected_console_errors()


def test_llava_says_the_mask_is_causal_inside_the_image(tab, vision_servers, tmp_path):
    page, _ = with_image(tab, vision_servers["llava"], tmp_path, 1280, "head")
    wait_image_answers(page)
    assert "causal inside the image too" in page.locator("#head-rows").inner_text()
    assert "The mask is causal inside the image too" in page.get_by_test_id("grid-caption").inner_text()
    assert "Every tab reads it with the text" in page.get_by_test_id("image-note").inner_text()
    # the mask off (what-if): no caption calls it causal any more
    page.get_by_test_id("causal-toggle").uncheck(force=True)
    page.wait_for_function("() => document.getElementById('grid-caption').textContent.includes('mask is off')")
    wait_image_answers(page)
    assert "causal inside the image" not in page.get_by_test_id("grid-caption").inner_text()
    assert "causal inside the image" not in page.locator("#head-rows").inner_text()


# the views that ask for their own answer with the image, by tab: the state's slot of that answer (Attribution
# splits no Gemma 3: its refusal says so, image or not)
IMAGE_ANSWERS = {"lines": "lines", "rollout": "rollout", "lens": "lens"}


@pytest.mark.parametrize("width", [1280, 390])
def test_every_tab_keeps_working_with_an_image(tab, vision_servers, tmp_path, width):
    refused = []
    tab.page.on("response", lambda r: refused.append(r.url) if r.status >= 400 else None)
    page, _ = with_image(tab, vision_servers["gemma3"], tmp_path, width, "head")
    wait_image_answers(page)
    T = page.evaluate("() => window.attnscope.state.grid.response.tokens.length")
    tabs = page.evaluate("() => [...document.querySelectorAll('.tab-group-tabs button:not([hidden])')].map(b => b.id)")
    assert "tab-image" in tabs and len(tabs) > 10
    for tab_id in tabs:
        view = tab_id.removeprefix("tab-")
        tab.show_view(view)
        slot = IMAGE_ANSWERS.get(view)
        if slot:
            page.wait_for_function(f"() => window.attnscope.state.{slot}?.response || window.attnscope.state.{slot}"
                                   "?.error", timeout=120_000)
            got = page.evaluate(f"() => window.attnscope.state.{slot}")
            assert got["error"] is None, (view, got["error"])
            kinds = got["response"]["token_kinds"]
            assert kinds.count("image") == N_IMAGE and len(kinds) == T, view
        assert "Could not draw this view" not in page.locator("body").inner_text(), view
    # the head effects card measures the image's prompt too; a new image makes them out of date
    tab.show_view("head")
    page.get_by_test_id("effects-run").click()
    page.wait_for_function("() => window.attnscope.state.effects?.answer", timeout=120_000)
    assert page.evaluate("() => window.attnscope.state.effects.answer.token_kinds").count("image") == N_IMAGE
    other = tmp_path / "other.png"
    other.write_bytes(image_bytes(40, 40, seed=2))
    page.get_by_test_id("image-file").set_input_files(str(other))
    note = page.get_by_test_id("effects-note")
    page.wait_for_function("() => document.querySelector('[data-testid=effects-note]').textContent.includes('image')")
    assert "the image changed" in note.inner_text()
    # the one refusal: Attribution's of Gemma 3 (the browser logs it as a failed load)
    assert [u.rsplit("/", 1)[-1] for u in refused] in ([], ["attribution"]), refused
    assert not tab.unexpected_console_errors(allowed=("status of 422",) if refused else ())
