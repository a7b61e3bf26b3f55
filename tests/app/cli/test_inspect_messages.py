"""``attnscope inspect --messages FILE``: the conversation goes in as /api/attention's ``messages`` (the
ids are the chat template's); a file that cannot be read, a conversation the model refuses, or a model
without a template is one line naming --messages and exit status 1."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from attnscope.app.cli.main import main  # noqa: E402

from tests.kit.chat import CONVERSATION, build_chat, hf_ids  # noqa: E402


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat(tmp_path_factory.mktemp("cli_chat") / "chat")


@pytest.fixture
def conversation(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": CONVERSATION}))
    return path


def test_inspect_json_has_the_templates_ids_and_spans(chat_dir, conversation, capsys):
    args = ["inspect", "--messages", str(conversation), "--json", "--checkpoint", str(chat_dir), "--device", "cpu"]
    assert main([*args, "--top-k", "1", "--include", "stats"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["token_ids"] == hf_ids(chat_dir, CONVERSATION, True)
    assert [s["role"] for s in got["spans"]] == [m["role"] for m in CONVERSATION]
    assert main(["inspect", "--messages", str(conversation), "--checkpoint", str(chat_dir), "--device", "cpu"]) == 0
    assert "layer" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, says",
    [
        ("not json", "not JSON"),
        (json.dumps([{"role": "tool", "content": "x"}]), "at 0.role"),
        (json.dumps([]), "at least 1"),
    ],
)
def test_a_bad_file_is_one_line_naming_messages(chat_dir, tmp_path, capsys, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code = main(["inspect", "--messages", str(path), "--checkpoint", str(chat_dir), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.count("\n") == 0
    assert f"--messages {path}" in err and says in err


def test_a_model_without_a_template_is_one_line(checkpoint_dir, conversation, capsys):
    code = main(["inspect", "--messages", str(conversation), "--checkpoint", str(checkpoint_dir), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.count("\n") == 0 and "chat template" in err and "--messages" in err
