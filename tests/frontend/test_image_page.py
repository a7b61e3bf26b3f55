"""The "Image" view on tiny image-text models (tests/kit/vision.py): an image picked, pasted or refused
beside the text; the chosen query token's weights drawn over the image's regions are the server's
(POST /api/attention `query_row`) for the chosen head, a layer's mean and every layer's; a clicked region
becomes the query; the captions say what the mask is inside the image (Gemma 3: both ways; LLaVA:
causal), and a text model shows no image field."""

from __future__ import annotations

import base64
import io
import math
import re
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving

pytest.importorskip("PIL")
pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.vision import build_gemma3, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."
LIMITS = {"ATTNSCOPE_MAX_IMAGE_BYTES": "20000", "ATTNSCOPE_MAX_IMAGE_PIXELS": "12000"}


@pytest.fixture(scope="module")
def vision_servers(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("vision-page")
    gemma = build_gemma3(root / "gemma3", image_size=112, tokens=16)
    llava = build_llava(root / "llava")
    with serving(gemma, "gemma3", env=LIMITS) as g, serving(llava, "llava", env=LIMITS) as v:
        yield {"gemma3": g, "llava": v}


def write_png(tmp_path, width, height, seed=0, name="noise.png"):
    path = tmp_path / name
    path.write_bytes(image_bytes(width, height, seed=seed))
    return path


def cells(page):
    """The drawn cells: [(position, weight, left %, top %)]."""
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=image-cell]')].map((c) => [
            Number(c.dataset.position), Number(c.dataset.weight), parseFloat(c.style.left), parseFloat(c.style.top),
        ])"""
    )


def wait_cells(page, query=None):
    """Cells drawn for the current answer (and for `query`, when given)."""
    page.wait_for_function(
        "(q) => { const s = window.attnscope.state; const a = s.imageAnswer;"
        " return a?.response?.query_row && (q === null || a.response.query_row.query === q)"
        " && document.querySelectorAll('[data-testid=image-cell]').length > 0"
        " && document.getElementById('image-stage').drawnFrom === a.response; }",
        arg=query,
        timeout=120_000,
    )


def served(tab, png, query, causal=True):
    body = {"text": TEXT, "image": base64.b64encode(png).decode(), "layers": [0], "heads": [], "include": [],
            "top_k": 0, "query_row": query, "causal": causal}
    return post_json(tab.base_url + "/api/attention", body)


def check_weights(page, answer, pick):
    """Each cell: the weight of its token in the row `pick` chooses, its box where the answer puts it."""
    row = pick(answer["query_row"])
    image = answer["image"]
    positions = [i for i, k in enumerate(answer["token_kinds"]) if k == "image"]
    got = cells(page)
    assert [c[0] for c in got] == positions
    assert [c[1] for c in got] == pytest.approx([row[p] for p in positions], rel=1e-9, abs=0)
    for (_, _, left, top), box in zip(got, image["boxes"]):
        assert left == pytest.approx(100 * box[0] / image["width"], abs=1e-3)  # the style keeps 6 digits
        assert top == pytest.approx(100 * box[1] / image["height"], abs=1e-3)  # the style keeps 6 digits


def open_with_image(tab, server, tmp_path, width):
    tab.base_url = server.url
    page = tab.page
    page.set_viewport_size({"width": width, "height": 1000})
    tab.open("/#text=" + quote(TEXT))
    page.get_by_test_id("image-field").wait_for(state="visible")
    png_path = write_png(tmp_path, 60, 40)
    page.get_by_test_id("image-file").set_input_files(str(png_path))
    return page, png_path.read_bytes()


@pytest.mark.parametrize("width", [1280, 390])
def test_the_overlay_follows_the_token_head_and_mode_and_a_patch_becomes_the_query(tab, vision_servers, tmp_path,
                                                                                   width):
    page, png = open_with_image(tab, vision_servers["gemma3"], tmp_path, width)
    wait_cells(page)
    T = page.evaluate("() => window.attnscope.state.imageAnswer.response.tokens.length")
    answer = served(tab, png, T - 1)
    check_weights(page, answer, lambda r: r["layers"][0]["heads"][0])
    caption = page.get_by_test_id("image-caption").inner_text()
    assert f"token {T - 1}" in caption and "head L0 · H0" in caption
    # layer 0 slides (window 4): both ways inside the image, but the far earlier image tokens out of the window
    assert "bidirectional" in caption and "sliding window" in caption
    # another head: the same answer, that head's row
    page.get_by_test_id("head-select").select_option("1")
    page.wait_for_function("() => document.getElementById('image-caption').textContent.includes('H1')")
    check_weights(page, answer, lambda r: r["layers"][0]["heads"][1])
    # the full layer: every image token sees every image token; then a layer's mean, every layer's: the server's
    page.get_by_test_id("layer-select").select_option("1")
    wait_cells(page, T - 1)
    page.wait_for_function("() => document.getElementById('image-caption').textContent.includes('L1 · H1')")
    assert "each image token sees every image token" in page.get_by_test_id("image-caption").inner_text()
    check_weights(page, answer, lambda r: r["layers"][1]["heads"][1])
    page.get_by_test_id("image-mode").select_option("layer")
    page.wait_for_function("() => document.getElementById('image-caption').textContent.includes('mean of its heads')")
    check_weights(page, answer, lambda r: r["layers"][1]["mean"])
    page.get_by_test_id("image-mode").select_option("all")
    page.wait_for_function("() => document.getElementById('image-caption').textContent.includes('every layer')")
    check_weights(page, answer, lambda r: r["mean"])
    # hover a region: its weight and token; click it: that image token is the query
    target = page.locator("[data-testid=image-cell]").nth(2)
    position = int(target.get_attribute("data-position"))
    target.hover()
    hover = page.get_by_test_id("image-hover").inner_text()
    assert f"token {position}" in hover and "image patch 3 of 16" in hover and "weight" in hover
    target.click()
    wait_cells(page, position)
    check_weights(page, served(tab, png, position), lambda r: r["mean"])
    assert f"image token {position}" in page.get_by_test_id("image-caption").inner_text()
    assert "query" in page.locator("[data-testid=image-cell]").nth(2).get_attribute("class")
    # the image's run of tokens is one band in the strip, and it expands to each token
    band = page.get_by_test_id("image-band")
    assert "16 tokens" in band.inner_text() and "selected" in band.get_attribute("class")
    before = page.locator("[data-testid=image-tokens] button").count()
    band.click()
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=image-tokens] button').length > {before}")
    page.locator(f"[data-testid=image-tokens] button[data-position='{T - 1}']").click()
    wait_cells(page, T - 1)
    # a token chosen on the page's own strip (the same prompt's tokens: the page asks with the image) is the query
    # here too: the prompt's token with the characters of the text's own token 2
    plain = post_json(tab.base_url + "/api/attention", {"text": TEXT, "layers": [], "include": [], "top_k": 0})
    spans = [o if k == "text" else None for k, o in zip(answer["token_kinds"], answer["offsets"])]
    want = spans.index(plain["offsets"][2])
    page.locator(f"[data-testid=tokens] .chip[data-index='{want}']").click()
    wait_cells(page, want)
    assert f"token {want} “{answer['tokens'][want]}”" in page.get_by_test_id("image-caption").inner_text()
    page.screenshot(path=f"/tmp/image-view-{width}.png", full_page=True)
    assert not tab.unexpected_console_errors()


def test_llava_says_causal_inside_the_image_and_the_what_if(tab, vision_servers, tmp_path):
    page, png = open_with_image(tab, vision_servers["llava"], tmp_path, 1280)
    wait_cells(page)
    caption = page.get_by_test_id("image-caption").inner_text()
    assert "causal inside the image too" in caption and "bidirectional" not in caption
    page.get_by_test_id("causal-toggle").uncheck(force=True)
    page.wait_for_function("() => document.getElementById('image-caption').textContent.includes('mask is off')")
    T = page.evaluate("() => window.attnscope.state.imageAnswer.response.tokens.length")
    check_weights(page, served(tab, png, T - 1, causal=False), lambda r: r["layers"][0]["heads"][0])


@pytest.mark.parametrize("width", [1280, 390])
def test_an_image_over_a_limit_is_refused_before_sending_and_a_paste_is_taken(tab, vision_servers, tmp_path, width):
    from PIL import Image

    tab.base_url = vision_servers["gemma3"].url
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#view=image&text=" + quote(TEXT))
    field = page.get_by_test_id("image-field")
    field.wait_for(state="visible")
    assert "A link does not carry the image" in field.inner_text()
    posted = len(tab.requests)
    page.get_by_test_id("image-file").set_input_files(str(write_png(tmp_path, 120, 90, name="big.png")))
    refusal = page.get_by_test_id("image-refusal")
    refusal.wait_for(state="visible")
    assert "big.png" in refusal.inner_text() and "20,000 bytes" in refusal.inner_text()
    wide = tmp_path / "wide.png"
    Image.new("RGB", (200, 100), (30, 90, 200)).save(wide)
    page.get_by_test_id("image-file").set_input_files(str(wide))
    page.wait_for_function("() => document.getElementById('image-refusal').textContent.includes('12,000 pixels')")
    assert "200 × 100 = 20,000 pixels" in refusal.inner_text()
    assert [u for u in tab.requests[posted:] if "/api/attention" in u] == []  # nothing was sent
    assert page.get_by_test_id("image-stage").is_hidden()
    # a pasted image is taken like a picked one
    buf = io.BytesIO()
    Image.new("RGB", (50, 30), (200, 40, 40)).save(buf, format="PNG")
    page.evaluate(
        """(b64) => { const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const dt = new DataTransfer(); dt.items.add(new File([bytes], 'pasted.png', {type: 'image/png'}));
            document.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt})); }""",
        base64.b64encode(buf.getvalue()).decode(),
    )
    wait_cells(page)
    assert refusal.is_hidden() and "pasted.png" in page.get_by_test_id("image-field").inner_text()


def test_a_text_model_has_no_image_field(tab):
    tab.open("/#text=" + quote(TEXT))
    page = tab.page
    page.wait_for_function("() => window.attnscope.state.model !== null")
    assert page.get_by_test_id("image-field").is_hidden() and page.locator("#tab-image").is_hidden()


def _px(v: float) -> int:
    """Whole pixels as the page rounds them (Math.round: halves up)."""
    return math.floor(v + 0.5)


def _luminance(css: str) -> float:
    rgb = [int(float(c)) / 255 for c in re.findall(r"[\d.]+", css)[:3]]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_llava_says_which_part_it_saw_in_whole_pixels_and_the_chosen_band_reads(tab, vision_servers, tmp_path):
    """Issue 42, item 16: LLaVA's centre crop leaves the picture's sides out and the caption says which part the
    model saw (the answer's image.seen); a hover names a patch's box in whole pixels; the image band holding the
    chosen token keeps a text contrast of at least 4.5."""
    page, _ = open_with_image(tab, vision_servers["llava"], tmp_path, 1280)
    path = write_png(tmp_path, 61, 37, name="odd.png")  # a size whose boxes fall between pixels
    page.get_by_test_id("image-file").set_input_files(str(path))
    png = path.read_bytes()
    tab.image_taken(61)
    tab.show_view("image")
    page.wait_for_function("() => window.attnscope.state.imageAnswer?.response?.image?.width === 61")
    wait_cells(page)
    T = page.evaluate("() => window.attnscope.state.imageAnswer.response.tokens.length")
    image = served(tab, png, T - 1)["image"]
    seen = image["seen"]
    for box in image["boxes"]:
        assert seen[0] <= box[0] <= box[2] <= seen[2] and seen[1] <= box[1] <= box[3] <= seen[3]
    assert seen[2] - seen[0] < image["width"]  # the crop: a 60 × 40 picture cut to its centre square
    caption = page.get_by_test_id("image-caption").inner_text()
    seen_words = f"x {_px(seen[0])}–{_px(seen[2])}, y {_px(seen[1])}–{_px(seen[3])}"
    assert f"saw only {seen_words} of the {image['width']} × {image['height']} picture" in caption
    # every patch's hover: its box in whole pixels (the server's boxes have fractions here)
    assert any(v != int(v) for box in image["boxes"] for v in box)
    targets = page.locator("[data-testid=image-cell]")
    for i in range(targets.count()):
        targets.nth(i).hover()
        box = image["boxes"][int(targets.nth(i).get_attribute("data-position")) - image_start(page)]
        hover = page.get_by_test_id("image-hover").inner_text()
        assert f"(x {_px(box[0])}–{_px(box[2])}, y {_px(box[1])}–{_px(box[3])})" in hover, hover
        assert not re.search(r"\d\.\d", hover.split(":")[0]), hover
    # an image token as the query: its band is the selected chip, and its words read on it
    targets.nth(1).click()
    band = page.get_by_test_id("image-band")
    page.wait_for_function("() => document.querySelector('[data-testid=image-band]')?.classList.contains('selected')")
    fg, bg = band.evaluate("(b) => [getComputedStyle(b).color, getComputedStyle(b).backgroundColor]")
    light, dark = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    assert (light + 0.05) / (dark + 0.05) >= 4.5, (fg, bg)


def image_start(page) -> int:
    """The position of the first image token in the Image view's answer."""
    return page.evaluate("() => window.attnscope.state.imageAnswer.response.token_kinds.indexOf('image')")


def test_an_image_the_server_cannot_decode_is_refused_in_the_field_and_the_text_drawn(tab, vision_servers, tmp_path):
    """Issue 42, item 4: a PNG cut to half its bytes passes the page's own check (Chromium draws what it
    can of it) but the server refuses it: the field takes it out and says the server's why, no banner,
    and the views draw the text alone."""
    tab.base_url = vision_servers["gemma3"].url
    page = tab.page
    page.set_viewport_size({"width": 1280, "height": 900})
    tab.open("/#text=" + quote(TEXT))
    page.get_by_test_id("image-field").wait_for(state="visible")
    whole = image_bytes(60, 40, seed=3)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole[: len(whole) // 2])
    page.get_by_test_id("image-file").set_input_files(str(cut))
    refusal = page.get_by_test_id("image-refusal")
    refusal.wait_for(state="visible")
    with pytest.raises(Exception) as info:  # the server's own refusal, said in the field
        post_json(tab.base_url + "/api/attention", {"text": TEXT, "image": base64.b64encode(cut.read_bytes()).decode()})
    assert info.value.code == 422
    assert "cut.png" in refusal.inner_text() and "could not be decoded" in refusal.inner_text()
    assert page.evaluate("() => window.attnscope.state.image") is None
    tab.settle()  # the thumbnail gone and the text's answers in: the bar has its height again
    tab.show_view("head")
    page.wait_for_function("() => document.querySelector('#head-heatmap .plot-cells')")
    tab.settle()
    assert page.locator("#error-banner").is_hidden()
    assert page.locator("#image-thumb").is_hidden()
    text_alone = post_json(tab.base_url + "/api/attention", {"text": TEXT})
    assert page.evaluate("() => window.attnscope.state.grid.response.tokens") == text_alone["tokens"]
    assert not tab.unexpected_console_errors(allowed=("422",))
