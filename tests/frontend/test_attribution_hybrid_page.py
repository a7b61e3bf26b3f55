"""The Attribution view on a hybrid (Bamba: a Mamba-2 layer, then a softmax layer): the map holds the
softmax layer's heads, the table a row for the mixer layer's whole write with the server's number, and the
caption says that write is not split per head; at 1280 and at 390 px."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat. The dog sat on the log."


@pytest.fixture(scope="module")
def bamba_server(tmp_path_factory, server):
    from tests.kit.family import random_download
    from tests.kit.implicit import BAMBA
    from tests.kit.live import serving

    path = random_download(tmp_path_factory.mktemp("bamba") / "bamba", "bamba", **BAMBA)
    with serving(path, "bamba") as s:
        yield s


@pytest.mark.parametrize("width", [1280, 390])
def test_a_mixer_layers_write_is_one_row_and_the_caption_says_so(tab, bamba_server, width):
    tab.base_url = bamba_server.url
    tab.open_at(width, "/#view=attribution&text=" + quote(SENTENCE))
    fig = tab.drawn("attribution-heads")
    position = tab.page.evaluate("() => window.attnscope.state.attribution.response.position")
    served = post_json(tab.base_url + "/api/attribution", {"text": SENTENCE, "position": position})
    mixers = [i for i, m in enumerate(served["mixers"]) if m is not None]
    assert mixers and all(served["heads"][i] is None for i in mixers)
    assert fig["data"][0]["y"] == [f"L{i}" for i, row in enumerate(served["heads"]) if row is not None]
    assert fig["data"][0]["z"] == [row for row in served["heads"] if row is not None]
    parts = tab.page.get_by_test_id("attribution-parts").inner_text()
    for i in mixers:
        assert f"mixer {i}" in parts and f"{served['mixers'][i]:+.3f}" in parts
    caption = tab.page.get_by_test_id("attribution-caption").inner_text()
    assert served["unsplit"] in caption and "not split per head" in caption
    assert tab.inside("attribution-heads", width) and tab.inside("attribution-parts", width)
    assert not tab.unexpected_console_errors()
