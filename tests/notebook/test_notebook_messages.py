"""``capture(messages=...)``, ``lens(messages=...)`` and ``show(messages=...)`` with a chat model: the
conversation laid out by its template, the same answer as /api/attention's; a model without a template
is the widget's error naming messages."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

pytestmark = pytest.mark.notebook

pytest.importorskip("transformers")

from attnscope.app import notebook  # noqa: E402

from tests.kit.chat import CONVERSATION, build_chat  # noqa: E402


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat(tmp_path_factory.mktemp("nb_chat") / "chat")


@pytest.fixture(scope="module")
def api(chat_dir):
    from tests.kit.app import served

    with served({"chat": chat_dir}) as clients:
        r = clients["chat"].post("/api/attention", json={"messages": CONVERSATION, "include": ["pattern"], "top_k": 0})
        assert r.status_code == 200
        yield r.json()


def test_capture_and_lens_take_messages(chat_dir, api):
    got = notebook.capture(messages=CONVERSATION, checkpoint=chat_dir, include=["pattern"], top_k=0)
    assert got["token_ids"] == api["token_ids"] and got["spans"] == api["spans"]
    np.testing.assert_allclose(np.array(got["span_mass"], dtype=float), np.array(api["span_mass"], dtype=float))
    for layer, want in zip(got["layers"], api["layers"]):
        for head, want_head in zip(layer["heads"], want["heads"]):
            np.testing.assert_allclose(head["pattern"], np.array(want_head["pattern"]), atol=1e-5, rtol=0)
    read = notebook.lens(messages=CONVERSATION, checkpoint=chat_dir, top_k=2)
    assert read["spans"] == api["spans"] and len(read["tokens"]) == len(api["tokens"])


@pytest.mark.skipif(importlib.util.find_spec("anywidget") is None, reason="anywidget not installed")
def test_show_a_conversation(chat_dir, api, tmp_path):
    from tests.kit.app import build_checkpoint

    w = notebook.show(messages=CONVERSATION, checkpoint=chat_dir)
    assert w.error == ""
    assert json.loads(w.grid)["answer"]["spans"] == api["spans"]
    plain = build_checkpoint(tmp_path / "plain")  # a model with no chat template
    assert "messages" in notebook.show(messages=CONVERSATION, checkpoint=plain).error
