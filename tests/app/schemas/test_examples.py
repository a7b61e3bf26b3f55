"""The explorer's examples do what their labels promise, on the shipped model.

The example texts are read from the page's own source (frontend/js/state.js), so these tests
follow any edit of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from attnscope.model.ours.checkpoint import SHIPPED
from fastapi.testclient import TestClient

STATE_JS = Path(__file__).resolve().parents[3] / "frontend" / "js" / "state.js"

pytestmark = pytest.mark.skipif(
    not (SHIPPED / "model.safetensors").is_file(), reason="the shipped checkpoint is not there"
)


def example(label_start: str) -> str:
    """The text of the example whose label starts with ``label_start``, as the page holds it."""
    source = STATE_JS.read_text()
    block = source[source.index("export const EXAMPLES") :]
    pattern = r'label:\s*"' + re.escape(label_start) + r'[^"]*",\s*(?://[^\n]*\n\s*)*text:\s*("(?:[^"\\]|\\.)*")'
    match = re.search(pattern, block)
    assert match, f"no example labelled {label_start!r} with a one-string text in {STATE_JS}"
    return json.loads(match.group(1))  # a JS double-quoted string without escapes JSON lacks


@pytest.fixture(scope="module")
def shipped():
    with TestClient(create_app(Settings(checkpoint=SHIPPED, device="cpu", torch_threads=1))) as c:
        yield c


def test_the_repeated_phrase_ends_where_the_copy_is_the_top_guess(shipped):
    text = example("Repeated phrase")
    r = shipped.post("/api/attention", json={"text": text, "layers": [], "include": [], "top_k": 5})
    assert r.status_code == 200, r.text
    answer = r.json()
    tokens, predictions = answer["tokens"], answer["predictions"]
    T = len(tokens)
    # the text's last token occurred before; the token that followed it then is the copy
    last = tokens[-1]
    earlier = [i for i in range(T - 1) if tokens[i] == last]
    assert earlier, f"{last!r} does not occur earlier in {tokens}"
    e = earlier[-1]
    copied = tokens[e + 1]
    # a phrase, not one token, is repeated: the tokens before the end match those before e
    same = 0
    while same <= e and tokens[T - 1 - same] == tokens[e - same]:
        same += 1
    assert same >= 4, f"only {same} tokens repeat before the end: {tokens}"
    # and the model's top guess at the last position is that copied token
    top = predictions[-1][0]
    assert top["token"] == copied, (copied, predictions[-1][:3])
