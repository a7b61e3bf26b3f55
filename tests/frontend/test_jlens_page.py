"""The Lens view with a Jacobian lens loaded (``serve --jlens``): the switch appears, each lens's table
and each head's write are the server's answer, the link keeps them; at 1280 and 390 px. Without a
lens the switch stays hidden (test_causal_page.py's server)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import torch

from tests.kit.live import checkpoint_dir, get_json, post_json, serving

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The cat sat"
WIDTHS = [1280, 390]


@pytest.fixture(scope="module")
def jlens_server(tmp_path_factory, server):
    from attnscope.model.jlens.lensfile import save_lens

    d = get_json(server.url + "/api/model")["d_model"]
    n_layer = get_json(server.url + "/api/model")["n_layer"]
    g = torch.Generator().manual_seed(0)
    J = {layer: torch.eye(d) + 0.3 * torch.randn(d, d, generator=g) for layer in range(n_layer - 2)}  # not all
    lens = save_lens(tmp_path_factory.mktemp("jlens") / "lens.pt", J, 12, {"model": "test"})
    with checkpoint_dir() as (ckpt, _), serving(ckpt, "jlens", env={"ATTNSCOPE_JLENS": str(lens)}) as s:
        yield s


def table_cells(page, selector: str) -> list[list[tuple[str, float]]]:
    return page.evaluate(
        """(sel) => [...document.querySelectorAll(sel + ' tbody tr')].map((tr) =>
            [...tr.querySelectorAll('td')].map((td) => [td.textContent, Number(td.dataset.prob ?? NaN)]))""",
        selector,
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_both_lenses_and_each_heads_write_are_the_servers(tab, jlens_server, width):
    tab.base_url = jlens_server.url
    page = tab.page
    tab.open_at(width, f"/#view=lens&pos=5&text={quote(TEXT)}")
    page.wait_for_selector("[data-testid=lens-box] table")
    assert page.get_by_test_id("lens-kind").is_visible()
    page.get_by_test_id("lens-kind").select_option("both")
    page.get_by_test_id("lens-heads").check()
    tab.settle()
    page.wait_for_selector("[data-lens=jacobian] [data-testid=lens-heads-table]")
    page.wait_for_function("() => location.hash.includes('lensj=both') && location.hash.includes('lensheads=1')")
    for kind in ("logit", "jacobian"):
        served = post_json(jlens_server.url + "/api/lens", {"text": TEXT, "top_k": 5, "lens": kind, "heads": True})
        rows = table_cells(page, f"[data-lens={kind}] .lens-table:not(.lens-heads)")
        assert len(rows) == len(served["residuals"])
        for row, residual in zip(rows, served["residuals"], strict=True):
            assert [p for _, p in row] == [top[0]["prob"] for top in residual["top"]]
        heads = table_cells(page, f"[data-lens={kind}] .lens-heads")
        for row, per_head in zip(heads, served["heads"], strict=True):
            if per_head is None:  # a block the lens has no J for
                assert all(text == "—" for text, _ in row)
            else:
                assert [p for _, p in row] == [h["top"][5][0]["prob"] for h in per_head]
    # shaded by how likely each write makes the model's own guess (the answer's final_prob)
    page.get_by_test_id("lens-shade").select_option("final")
    page.wait_for_selector("[data-lens=jacobian] .lens-heads[data-shade=final]")
    served = post_json(jlens_server.url + "/api/lens", {"text": TEXT, "top_k": 5, "lens": "jacobian", "heads": True})
    shaded = table_cells(page, "[data-lens=jacobian] .lens-heads")
    for row, per_head in zip(shaded, served["heads"], strict=True):
        if per_head is not None:
            assert [p for _, p in row] == [h["final_prob"][5] for h in per_head]
    page.wait_for_function("() => location.hash.includes('lensshade=final')")
    jac = post_json(jlens_server.url + "/api/lens", {"text": TEXT, "lens": "jacobian", "heads": True})
    assert None in jac["heads"]  # the fixture's lens leaves a block out: its row is drawn as dashes
    caption = page.get_by_test_id("lens-caption").inner_text()
    assert "over the 12 prompts" in caption and "not a share of the logit" in caption
    assert tab.inside("lens-box", width)
    # the link keeps both switches
    page.reload()
    tab.settle()
    page.wait_for_selector("[data-lens=jacobian] [data-testid=lens-heads-table]")
    assert page.get_by_test_id("lens-kind").input_value() == "both"
    assert not tab.unexpected_console_errors()


def test_without_a_lens_the_switch_is_hidden_and_the_heads_still_read(tab):
    page = tab.page
    tab.open_at(1280, f"/#view=lens&pos=5&lensj=jacobian&text={quote(TEXT)}")
    page.wait_for_selector("[data-testid=lens-box] table")
    assert page.get_by_test_id("lens-kind").is_hidden()
    assert page.locator("[data-lens=jacobian]").count() == 0  # no lens on this server: the logit lens
    page.get_by_test_id("lens-heads").check()
    tab.settle()
    page.wait_for_selector("[data-testid=lens-heads-table]")
    served = post_json(tab.base_url + "/api/lens", {"text": TEXT, "top_k": 5, "heads": True})
    heads = table_cells(page, ".lens-heads")
    assert [[p for _, p in row] for row in heads] == [[h["top"][5][0]["prob"] for h in row] for row in served["heads"]]
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_head_view_says_what_the_chosen_head_writes(tab, jlens_server, width):
    tab.base_url = jlens_server.url
    page = tab.page
    tab.open_at(width, f"/#view=head&layer=0&head=1&pos=5&text={quote(TEXT)}")
    page.wait_for_selector("[data-testid=head-writes] li")
    served = post_json(jlens_server.url + "/api/lens", {"text": TEXT, "top_k": 5, "lens": "jacobian", "heads": True})
    rows = page.locator("[data-testid=head-writes] li").all_inner_texts()
    column = served["heads"][0][1]["top"]
    assert len(rows) == len(served["tokens"]) == len(column)
    for row, guesses in zip(rows, column, strict=True):
        assert f"{guesses[0]['prob']:.2f}" in row.split("→")[1]
    assert page.locator("[data-testid=head-writes] li.chosen").get_attribute("data-position") == "5"
    assert "averaged over 12 prompts" in page.get_by_test_id("head-writes-caption").inner_text()
    assert "as trained" not in page.get_by_test_id("head-writes-caption").inner_text()
    assert tab.inside("head-writes", width)
    # with the mask off the heatmap is a what-if; the reading is the model as trained, and says so
    page.get_by_test_id("causal-toggle").uncheck()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=head-writes-caption]').textContent.includes('as trained')"
    )
    page.get_by_test_id("causal-toggle").check()
    # a block the lens has no J for says so (the fixture's lens leaves out the blocks from n_layer - 2)
    last_fitted = max(i for i, row in enumerate(served["heads"]) if row is not None and i < len(served["heads"]) - 1)
    page.get_by_test_id("layer-select").select_option(str(last_fitted + 1))
    tab.settle()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=head-writes-caption]').textContent.includes('no J for block')"
    )
    assert not tab.unexpected_console_errors()
