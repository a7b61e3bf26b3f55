"""The notebook on an encoder: a folder opens as the server opens it; a masked-LM object is refused in one line."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import attnscope  # noqa: E402
from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

from tests.kit.encoders import build_encoder  # noqa: E402

TEXT = "The cat [MASK] on the mat."


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_encoder("bert", tmp_path_factory.mktemp("bert") / "bert")


def test_a_folder_gives_the_encoders_answer(folder):
    got = attnscope.capture(TEXT, checkpoint=folder)
    reference = AutoTokenizer.from_pretrained(folder)
    assert got["token_ids"] == reference(TEXT)["input_ids"]
    assert got["stack"] == "encoder" and got["causal"] is False


def test_a_masked_lm_object_is_refused_naming_the_folder_way(folder):
    model, tokenizer = AutoModelForMaskedLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.raises(TypeError, match="encoder.*checkpoint=FOLDER"):
        attnscope.capture(TEXT, model=model, tokenizer=tokenizer)
