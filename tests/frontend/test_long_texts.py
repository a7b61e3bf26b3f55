"""Issue 16 in the page: an 8,000-token text. The chosen head is asked max-pooled to what the
heatmap can draw (`focus.thumbnail`), its hover names the block's token ranges, zooming in
fetches the exact cells of the block in view (`focus.region`), and the token strip holds only
the chips in view. A short text still gets exact full matrices."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import torch
from attnscope.model.ours.checkpoint import SHIPPED, save_checkpoint
from attnscope.model.ours.gpt import GPT, GPTConfig
from attnscope.model.ours.tokenizer import BPETokenizer

from tests.kit.live import FILLER, LiveServer, wait_settled

pytestmark = pytest.mark.browser

CONTEXT = 8192
N_TOKENS = 8000
SENTENCE = "The cat sat on the mat because the mat was warm."


@pytest.fixture(scope="module")
def long_server(tmp_path_factory, browser):
    """Our GPT with a context of 8192 tokens (random weights, the shipped tokenizer), served live."""
    tokenizer = BPETokenizer.load(SHIPPED / "tokenizer.json")
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=CONTEXT, vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, n_embd=32))
    with torch.no_grad():  # larger weights than the init, so the heads have some shape
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("long") / "ckpt")
    server = LiveServer(path, threads=2)
    try:
        server.wait_ready()
        ids = tokenizer.encode_ids(FILLER * (N_TOKENS // 90 + 2))[:N_TOKENS]
        server.long_text = tokenizer.decode(ids)
        server.n_tokens = len(tokenizer.encode_ids(server.long_text))
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(context, long_server):
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.bodies = []  # (body of each POST /api/attention, its response)
    page.errors = []

    def on_response(response):
        if response.url.endswith("/api/attention") and response.request.method == "POST":
            page.bodies.append((response.request.post_data_json, response))

    page.on("response", on_response)
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
    yield page
    page.close()


def detail_bodies(page):
    """The requests sent so far that asked the chosen head with its predictions: alone (`heads`), or through
    `focus` beside the grid's every head (one request for both answers)."""
    return [(b, r) for b, r in page.bodies if (b.get("heads") or b.get("focus")) and b.get("top_k")]


def settle(page, timeout=240_000):
    wait_settled(page, timeout=timeout)


def plot_point(page, fx, fy):
    """Viewport coordinates of the point at fractions (fx, fy) of the head heatmap's plot area."""
    page.evaluate("() => document.querySelector('[data-testid=head-heatmap]').scrollIntoView({block: 'center'})")
    return page.evaluate(
        """([fx, fy]) => {
            const gd = document.querySelector('[data-testid=head-heatmap]');
            const box = gd.getBoundingClientRect();
            const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis;
            return [box.left + xa.offset + fx * xa.length, box.top + ya.offset + fy * ya.length];
        }""",
        [fx, fy],
    )


def hover_text(page, fx, fy):
    label = page.locator("[data-testid=head-heatmap] .hoverlayer .hovertext")
    # off the plot first, until the last label is gone: else a slow redraw reads the old one
    page.mouse.move(0, 0)
    label.first.wait_for(state="detached", timeout=10_000)
    x, y = plot_point(page, fx, fy)
    page.mouse.move(x - 3, y - 3)
    page.mouse.move(x, y)
    label.first.wait_for(state="visible", timeout=10_000)
    return label.first.text_content()


def test_a_short_text_still_gets_exact_full_matrices(page, long_server):
    page.goto(long_server.url + "/#text=" + quote(SENTENCE))
    settle(page)
    body, _ = detail_bodies(page)[-1]
    assert "focus" not in body and "pattern" in body["include"]
    T = len(page.evaluate("() => window.attnscope.state.detail.response.tokens"))
    z = page.evaluate("() => document.querySelector('[data-testid=head-heatmap]').data[0].z")
    assert len(z) == T and all(len(row) == T for row in z)
    assert page.locator("[data-testid=tokens] .chip").count() == T
    assert page.get_by_test_id("head-zoom").is_hidden()


def test_an_8000_token_text_is_drawn_pooled_and_zooms_to_exact_cells(page, long_server):
    page.goto(long_server.url + "/")
    settle(page)
    box = page.get_by_test_id("text-input")
    box.fill(long_server.long_text)
    started = time.monotonic()
    box.press("Enter")
    settle(page)
    elapsed = time.monotonic() - started
    print(f"\n8k tokens: Enter to settled page {elapsed:.1f} s")
    state = page.evaluate(
        "() => ({T: window.attnscope.state.grid.response.tokens.length, error: window.attnscope.state.error})"
    )
    T = state["T"]
    assert state["error"] is None and T == long_server.n_tokens >= 7900

    # the chosen head was asked max-pooled to the heatmap's cells, and the answer is small
    body, response = detail_bodies(page)[-1]
    N = body["focus"]["thumbnail"]
    assert 64 <= N <= 512 and body["focus"]["layer"] == page.evaluate("() => window.attnscope.state.layer")
    # one request for both answers: the grid's every head beside the chosen head's focus and statistics
    assert "layers" not in body and body["thumbnail"] == 64 and "stats" in body["focus"]["include"]
    assert sum(1 for b, _ in page.bodies if b.get("text") == long_server.long_text) == 1
    size = len(response.body())
    print(f"8k tokens: chosen-head answer {size / 1e6:.2f} MB")
    assert size < 5_000_000
    focus = page.evaluate("() => window.attnscope.state.detail.response.focus.thumbnail")
    block, m = focus["block"], focus["size"]
    assert m <= N and block == -(-T // N) and block > 1

    # the grid and the head view are drawn; the heatmap holds the pooled cells in token coordinates
    assert page.evaluate("() => document.querySelector('[data-testid=heads-grid]').classList.contains('drawn')")
    fig = page.evaluate(
        "() => { const gd = document.querySelector('[data-testid=head-heatmap]');"
        " return {n: gd.data[0].z.length, x: gd.data[0].dx, meta: gd.layout.meta}; }"
    )
    assert fig["n"] == m and fig["x"] == block and fig["meta"] == {"tokens": T, "keys": T, "block": block, "size": m}
    note = page.get_by_test_id("head-zoom").inner_text()
    assert f"{block}×{block} block" in note and "exact cells" in note

    # the token strip: far fewer chips in the DOM than tokens, the count says all of them
    chips = page.locator("[data-testid=tokens] .chip").count()
    assert 0 < chips < 300
    assert page.locator("#token-count").inner_text() == f"{T} tokens"
    page.evaluate("() => { const s = document.querySelector('[data-testid=tokens]'); s.scrollTop = s.scrollHeight; }")
    last = page.locator(f"[data-testid=tokens] .chip[data-index='{T - 1}']")
    last.wait_for(state="attached", timeout=5_000)
    assert page.locator("[data-testid=tokens] .chip").count() < 300

    # hover on a pooled cell: the block's token ranges, the largest weight, never one pair
    text = hover_text(page, 0.1, 0.9)
    assert "queries " in text and "keys " in text and "largest weight" in text and "→" not in text
    q = int(text.split("queries ")[1].split("–")[0])
    assert q % block == 0
    # a fully masked block (keys after every query)
    assert "all masked" in hover_text(page, 0.9, 0.1)

    # zoom in with a drag: the exact cells of the block in view are fetched and drawn
    before = len(page.bodies)
    x0, y0 = plot_point(page, 0.40, 0.45)
    x1, y1 = plot_point(page, 0.44, 0.49)
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=4)
    page.mouse.move(x1, y1, steps=4)
    page.mouse.up()
    page.wait_for_function(
        "() => { const gd = document.querySelector('[data-testid=head-heatmap]');"
        " return gd.data.some((t) => t.name === 'exact cells'); }",
        timeout=180_000,
    )
    region_bodies = [b for b, _ in page.bodies[before:] if b.get("focus", {}).get("region")]
    assert region_bodies
    q0, q1, k0, k1 = region_bodies[-1]["focus"]["region"]
    assert 0 < q1 - q0 <= 512 and 0 < k1 - k0 <= 512
    assert k0 < q1  # below the diagonal: attended keys
    exact = page.evaluate(
        "() => document.querySelector('[data-testid=head-heatmap]').data.find((t) => t.name === 'exact cells')"
    )
    assert len(exact["z"]) == q1 - q0 and len(exact["z"][0]) == k1 - k0
    assert exact["customdata"][0][0][:2] == [
        f"{q0} {page.evaluate('(i) => window.attnscope.state.grid.response.tokens[i]', q0)}",
        f"{k0} {page.evaluate('(i) => window.attnscope.state.grid.response.tokens[i]', k0)}",
    ]
    assert "Exact cells of" in page.get_by_test_id("head-zoom").inner_text()
    text = hover_text(page, 0.5, 0.5)
    assert "→" in text and "weight" in text and "queries" not in text

    # the JSON export at this length: the page's level of detail, not every head's whole matrices
    # (those would be 2 layers × 2 heads × 5 × T² cells, over the server's limit)
    limit = page.evaluate("() => window.attnscope.state.model.limits.max_matrix_cells")
    assert 2 * 2 * 5 * T * T > limit
    title = page.locator("#download-json").get_attribute("title")
    assert "level of detail" in title and "over the server's limit" in title
    with page.expect_download() as info:
        page.locator("#download-json").click()
    path = Path(info.value.path())
    data = json.loads(path.read_text())
    print(f"8k tokens: JSON export {path.stat().st_size / 1e6:.1f} MB")
    assert len(data["tokens"]) == T and len(data["layers"]) == 2
    head = data["layers"][1]["heads"][1]
    assert "thumbnail" in head and "pattern" not in head and len(head["stats"]["row_entropy"]) == T
    assert data["focus"]["thumbnail"]["block"] == block and len(data["focus"]["pattern"]) == m
    assert page.errors == []


def csv_download(page) -> tuple[list[str], str]:
    """Click the CSV button: the file's lines, and the button's title (what it said it gives). The
    file is plain CSV (issue 42, item 23): Python's csv module reads its first row as the header and
    every number of every data row as a number; its name and the title say the numbers' precision."""
    title = page.locator("#download-csv").get_attribute("title")
    with page.expect_download() as info:
        page.locator("#download-csv").click()
    assert info.value.suggested_filename.endswith("-float32.csv") and "float32" in title
    text = Path(info.value.path()).read_text()
    header, *rows = csv.reader(io.StringIO(text, newline=""))
    assert header[:2] == ["layer", "head"] and all(len(row) == len(header) for row in rows)
    numeric = [i for i, name in enumerate(header) if not name.endswith("_token")]
    assert all(math.isfinite(float(row[i])) for row in rows for i in numeric if row[i] != "")
    return text.splitlines(), title


def test_the_csv_of_a_pooled_head_is_the_exact_head_or_the_blocks_shown_and_says_which(page, long_server):
    """A pooled heatmap's CSV (it crashed in headCsv): a text of 600 tokens (past the heatmap's 512 cells) gets every
    (query, key) pair fetched exactly; one of 8,000 tokens the blocks the heatmap shows."""
    tokenizer = BPETokenizer.load(SHIPPED / "tokenizer.json")
    medium = tokenizer.decode(tokenizer.encode_ids(long_server.long_text)[:600])
    page.goto(long_server.url + "/#text=" + quote(medium))
    settle(page)
    T = len(page.evaluate("() => window.attnscope.state.detail.response.tokens"))
    assert page.evaluate("() => window.attnscope.state.detail.response.focus.thumbnail.block") > 1  # drawn pooled
    lines, title = csv_download(page)
    assert "fetched exactly" in title
    assert lines[0].startswith("layer,head,query_index,query_token,key_index,key_token,mask,pattern")
    assert len(lines) == 1 + T * T
    assert "fetched exactly" in page.locator("#toast").inner_text()
    # the exact weights: each query's row sums to 1
    sums = {}
    for line in lines[1:]:
        cells = line.rsplit(",", 5)  # the token fields may hold commas; the last six do not
        query = int(line.split(",")[2])
        sums[query] = sums.get(query, 0.0) + float(cells[-4])
    assert all(abs(s - 1) < 1e-3 for s in sums.values()) and len(sums) == T

    page.goto(long_server.url + "/#text=" + quote(long_server.long_text))
    settle(page)
    focus = page.evaluate("() => window.attnscope.state.detail.response.focus.thumbnail")
    m = math.ceil(long_server.n_tokens / focus["block"])
    lines, title = csv_download(page)
    assert "max-pooled block" in title
    assert (
        lines[0]
        == "layer,head,query_start,query_end,key_start,key_end,mask,pattern_max,attn_scores_raw_max,attn_scores_max"
    )
    assert len(lines) == 1 + m * m
    first, last = lines[1].split(","), lines[-1].split(",")
    assert first[2:6] == ["0", str(focus["block"]), "0", str(focus["block"])]
    assert last[3] == last[5] == str(long_server.n_tokens)
    assert page.errors == []
