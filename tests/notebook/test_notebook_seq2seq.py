"""``show(text, target=..., stack=...)`` on a tiny BART built in the test: the widget's answers are the chosen
stack's, over the target given or the one the model wrote; the stack's own shape holds the chosen head; "Write it"
(``write_target``) puts the model's own target in the field, the very target a blank field is answered with."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

pytestmark = pytest.mark.notebook
pytest.importorskip("transformers")
if importlib.util.find_spec("anywidget") is None:
    pytest.skip("anywidget is not installed (pip install -e '.[notebook]')", allow_module_level=True)

import attnscope  # noqa: E402
from attnscope.app.notebook.service import decode_answer  # noqa: E402

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

TEXT = "The cat sat on the mat, and the dog saw the cat."
TARGET = "The dog sat."


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_seq2seq("bart", tmp_path_factory.mktemp("nbbart") / "bart")


def answer(trait: str) -> dict:
    return decode_answer(json.loads(trait)["answer"])


def stacks_of(widget) -> dict:
    return {s["name"]: s for s in json.loads(widget.model_info)["stacks"]}


def test_show_answers_the_chosen_stack_over_the_target(folder):
    widget = attnscope.show(TEXT, checkpoint=folder, target=TARGET, stack="cross", head=1)
    assert widget.error == "" and (widget.stack, widget.target) == ("cross", TARGET)
    detail, grid = answer(widget.detail), answer(widget.grid)
    assert detail["stack"] == grid["stack"] == "cross" and detail["target"] == TARGET
    assert detail["target_generated"] is False
    pattern = detail["layers"][0]["heads"][0]["pattern"]
    # a cross map: the target's tokens are its rows, the source's its columns; each row a distribution
    assert pattern.shape == (len(detail["target_tokens"]), len(detail["source_tokens"]))
    np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-5)
    assert len(grid["layers"]) == stacks_of(widget)["cross"]["n_layer"]
    # the tag names the stack and the target it answers, as the page keys its answers
    tag = json.loads(widget.detail)
    assert (tag["stack"], tag["target"], tag["head"]) == ("cross", TARGET, 1)
    # the static snapshot names the stack and the target, each query's strongest keys among the source's tokens
    html = widget.snapshot_html()
    assert "Stack: cross" in html and f"target <code>{TARGET}</code>" in html
    strongest = detail["source_tokens"][int(np.argmax(pattern[0]))]
    assert f"{strongest} {pattern[0].max():.2f}" in html
    # the same numbers as capture's for the same subject
    same = attnscope.capture(TEXT, checkpoint=folder, target=TARGET, stack="cross", layers=[widget.layer], heads=[1])
    np.testing.assert_allclose(same["layers"][0]["heads"][0]["pattern"], pattern, atol=1e-6)


def test_another_stack_fits_the_head_into_its_shape(folder):
    widget = attnscope.show(TEXT, checkpoint=folder, target=TARGET, stack="cross")
    widget.head = 99  # beyond every stack's heads: the last head of the stack
    for name in ("encoder", "decoder", "cross"):
        widget.stack = name
        detail = answer(widget.detail)
        shape = stacks_of(widget)[name]
        assert detail["stack"] == name and widget.head == shape["n_head"] - 1
        assert 0 <= widget.layer < shape["n_layer"]
        queries = detail["source_tokens"] if name == "encoder" else detail["target_tokens"]
        keys = detail["target_tokens"] if name == "decoder" else detail["source_tokens"]
        assert detail["layers"][0]["heads"][0]["pattern"].shape == (len(queries), len(keys))


def test_write_target_is_the_target_a_blank_field_gets(folder):
    widget = attnscope.show(TEXT, checkpoint=folder)
    blank = answer(widget.detail)
    assert blank["target_generated"] is True and widget.target == ""
    written = widget.write_target()
    assert written == blank["target"] == widget.target
    after = answer(widget.detail)
    assert after["target"] == written and after["target_generated"] is False
    assert after["target_tokens"] == blank["target_tokens"]


def test_a_stack_the_model_lacks_is_the_widgets_error(folder):
    widget = attnscope.show("The cat sat.", stack="cross")  # the shipped decoder-only model
    assert "stack" in widget.error and widget.detail == ""
