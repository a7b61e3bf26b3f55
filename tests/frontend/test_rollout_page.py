"""The Rollout view: the chosen token's attention rollout, layer by layer, the server's numbers,
with and without the residual, following the chosen token and the link; at 390 px too."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The dog sat on the log."


@pytest.mark.parametrize("width", [1280, 390])
def test_the_rollout_of_the_chosen_token_is_the_servers(tab, width):
    served = post_json(tab.base_url + "/api/rollout", {"text": TEXT, "position": 5})
    page = tab.page
    tab.open_at(width, "/#view=rollout&pos=5&text=" + quote(TEXT))
    fig = tab.drawn("rollout-plot")
    assert fig["data"][0]["z"] == served["rollout"]
    assert fig["layout"]["yaxis"]["ticktext"] == [f"after L{layer}" for layer in served["layers"]]
    caption = page.get_by_test_id("rollout-caption").inner_text()
    assert f"“{served['tokens'][5]}” (token 5)" in caption and "With the residual" in caption
    box = page.get_by_test_id("rollout-plot").bounding_box()
    assert box["width"] <= width and box["height"] > 200
    # without the residual: another answer, said in the caption and kept in the link
    page.get_by_test_id("rollout-residual").uncheck()
    page.wait_for_function("() => window.attnscope.state.rollout?.response?.residual === false")
    tab.settle()
    plain = post_json(tab.base_url + "/api/rollout", {"text": TEXT, "position": 5, "residual": False})
    page.wait_for_function(
        "() => document.querySelector('[data-testid=rollout-caption]').innerText.includes('Without')"
    )
    assert tab.figure("rollout-plot")["data"][0]["z"] == plain["rollout"]
    page.wait_for_function("() => window.location.hash.includes('rollres=0')")
    assert not tab.unexpected_console_errors()
