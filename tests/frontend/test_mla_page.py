"""The page on multi-head latent attention (DeepSeek V3, built in the test): the badge gives q/k
and v their own sizes, and the head heatmap's hover splits each raw score into its content
(no-RoPE) and position (RoPE) parts, the server's numbers, which sum to it."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

FAMILY = "deepseek_v3"  # served by conftest's family_server
SENTENCE = "The cat sat on the mat. The dog sat on the log."


def test_the_hover_splits_each_raw_score_into_content_and_position(family_tab):
    tab = family_tab
    tab.open("/#layer=1&head=2&text=" + quote(SENTENCE))
    assert "d_k 12, d_v 8" in tab.page.get_by_test_id("model-info").inner_text()
    trace = tab.figure("head-heatmap")["data"][0]
    assert "= content %{customdata[4]:.3f} + position %{customdata[5]:.3f}" in trace["hovertemplate"]
    include = ["attn_scores_raw", "attn_scores_content", "attn_scores_position"]
    body = {"text": SENTENCE, "layers": [1], "heads": [2], "include": include, "top_k": 0}
    head = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]
    i, j = 6, 2  # a visible cell
    label_i, label_j, raw, _, content, position = trace["customdata"][i][j]
    assert [raw, content, position] == pytest.approx([head[n][i][j] for n in include], abs=1e-3)
    assert content + position == pytest.approx(raw, abs=2e-3)
    assert not tab.unexpected_console_errors()
