"""model/chat.py: a conversation laid out by the model's own chat template, a folder's or a GGUF
file's, with the ids transformers' ``apply_chat_template`` gives and a span per message."""

from __future__ import annotations

import pytest
import torch
from attnscope.model.chat import ChatError, content_ranges, folder_template

from tests.kit.chat import CONVERSATION, build_chat, hf_ids, write_chat_gguf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat(tmp_path_factory.mktemp("chat") / "tiny-chat")


def check_layout(got, tokenizer, messages) -> None:
    """Each span decodes to its message; every other token is markup."""
    inside = set()
    for span, message in zip(got.spans, messages):
        assert tokenizer.decode(got.ids[span["start"] : span["end"]]) == message["content"]
        inside |= set(range(span["start"], span["end"]))
    assert got.kinds == ["text" if t in inside else "marker" for t in range(len(got.ids))]
    assert [s["start"] for s in got.spans] == sorted(s["start"] for s in got.spans)


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_folder_template_gives_transformers_ids(chat_dir, generation_prompt):
    from attnscope.model.ours.tokenizer import BPETokenizer

    tokenizer = BPETokenizer.load(chat_dir / "tokenizer.json")
    got = folder_template(chat_dir).layout(tokenizer, CONVERSATION, generation_prompt)
    assert got.ids == hf_ids(chat_dir, CONVERSATION, generation_prompt)
    check_layout(got, tokenizer, CONVERSATION)
    text_tokens = [t for t, k in enumerate(got.kinds) if k == "text"]
    assert all(got.offsets[t][1] > got.offsets[t][0] for t in text_tokens)  # each in its own message's characters


def test_a_refused_order_is_a_chat_error(chat_dir):
    from attnscope.model.ours.tokenizer import BPETokenizer

    tokenizer = BPETokenizer.load(chat_dir / "tokenizer.json")
    with pytest.raises(ChatError, match="opens with the system or the user"):
        folder_template(chat_dir).layout(tokenizer, [{"role": "assistant", "content": "x"}], False)


def test_a_folder_without_a_template_has_none(tmp_path):
    from tests.kit.family import build

    assert folder_template(build("qwen2", tmp_path / "plain")) is None


def test_gguf_template_gives_transformers_ids(tmp_path):
    from attnscope.model.sources.gguf_load import load_gguf

    path = write_chat_gguf(tmp_path / "chat.gguf")
    backend = load_gguf(path, torch.device("cpu"))
    assert backend.facts.chat
    got = backend.chat_template.layout(backend.tokenizer, CONVERSATION, True)
    assert got.ids == hf_ids(tmp_path, CONVERSATION, True, gguf_file=path.name)
    check_layout(got, backend.tokenizer, CONVERSATION)


def test_content_ranges_follow_the_order_and_trimmed_contents():
    text = "[u] hi [/u][a] hi [/a][u]padded[/u]"
    assert content_ranges(text, ["hi", "hi", "  padded  ", ""]) == [(4, 6), (15, 17), (25, 31), (31, 31)]
