"""An atlas over conversations (model/atlas/messages.py): a JSONL line ``{"messages": [...]}`` goes
through the model's chat template (the ids transformers' ``apply_chat_template`` gives), and each
exemplar says the message its query sits in; a model without a template, or a bad line, is refused
in one line before anything runs."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from attnscope.app.cli.main import main
from attnscope.model.atlas.build import atlas

from tests.kit.chat import CONVERSATION, build_chat, hf_ids

pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TEXT = "The cat sat on the mat, and the dog sat on the log. " * 3
OTHER = [{"role": "user", "content": "Where is the cat?"}, {"role": "assistant", "content": "On the mat."}]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat(tmp_path_factory.mktemp("atlas_chat") / "chat")


def corpus(path, docs) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def test_exemplars_name_the_message_of_their_query(chat_dir, tmp_path):
    from transformers import AutoTokenizer

    docs = [{"messages": CONVERSATION}, {"text": TEXT}, {"messages": OTHER}] * 3
    out = atlas([corpus(tmp_path / "chats.jsonl", docs)], tmp_path / "atlas", checkpoint=chat_dir, seq_len=48,
                batch_size=2, exemplars=6, progress=False)
    # the oracle stream: transformers' template ids for a conversation, the tokenizer's for a text
    tok = AutoTokenizer.from_pretrained(chat_dir, local_files_only=True)
    stream, owner = [], []
    for d in docs:
        if "messages" in d:
            ids = hf_ids(chat_dir, d["messages"], False)
            owner += [d["messages"]] * len(ids)
        else:
            ids = tok(d["text"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            owner += [None] * len(ids)
        stream += ids
    rows = pq.read_table(out / "exemplars.parquet").to_pylist()
    with_role = [r for r in rows if r["role"] is not None]
    assert with_role and len(with_role) < len(rows)
    for r in rows:
        at = r["window"] * 48 + r["position"]
        assert stream[at] == r["token_id"]
        if r["role"] is not None:
            message = owner[at][r["message"]]
            assert message["role"] == r["role"]
            piece = tok.decode([r["token_id"]]).strip()
            assert piece in message["content"]


def test_a_model_without_a_template_is_refused_before_it_runs(tmp_path, capsys):
    path = corpus(tmp_path / "chats.jsonl", [{"messages": CONVERSATION}])
    out = tmp_path / "atlas"
    assert main(["atlas", "--corpus", path, "--out", str(out)]) == 1  # the shipped model has no chat template
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "chat template" in err and "chats.jsonl" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "line, says",
    [
        ({"messages": []}, "not a non-empty list"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "message 0"),
        ({"messages": [{"role": "user", "content": 3}]}, "message 0"),
    ],
)
def test_a_bad_conversation_line_is_one_line(chat_dir, tmp_path, capsys, line, says):
    path = corpus(tmp_path / "bad.jsonl", [{"messages": CONVERSATION}, line])
    assert main(["atlas", "--corpus", path, "--out", str(tmp_path / "atlas"), "--checkpoint", str(chat_dir)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.jsonl:2" in err and says in err
