"""Models by their Hugging Face name: the cache first (offline), a download otherwise, one line
when neither can be done; the cache's causal LMs listed. The cache is built by the test."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnscope.model.ours.checkpoint import SHIPPED, CheckpointError  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.sources.hub import cached_models, hub_name_of, is_hub_name, resolve_hub, split_name  # noqa: E402

from tests.kit.family import build  # noqa: E402
from tests.kit.hub import put_in_cache  # noqa: E402


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("hub-src") / "llama")


@pytest.fixture
def cache(tmp_path, monkeypatch, llama_dir):
    root = tmp_path / "hub"
    put_in_cache(root, "tiny-org/tiny-llama", llama_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return root


def test_names_read_as_the_hub_writes_them():
    assert split_name("HuggingFaceTB/SmolLM2-135M") == ("HuggingFaceTB/SmolLM2-135M", None)
    assert split_name("org/model.v2@refs/pr/1") == ("org/model.v2", "refs/pr/1")
    assert is_hub_name("openai-community/gpt2") and not is_hub_name("gpt2") and not is_hub_name(str(SHIPPED))
    with pytest.raises(CheckpointError, match="not a Hugging Face model name"):
        split_name("no slash")


def test_a_cached_model_opens_offline_by_its_name(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = resolve_hub("tiny-org/tiny-llama")
    assert path.parent.parent.name == "models--tiny-org--tiny-llama" and (path / "config.json").is_file()
    assert hub_name_of(path) == "tiny-org/tiny-llama"
    lm = load_model(path, "cpu")
    assert lm.facts.name == "tiny-org/tiny-llama" and lm.facts.family == "llama"


def test_a_model_neither_cached_nor_downloadable_is_one_line(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as e:
        resolve_hub("tiny-org/not-here")
    line = str(e.value)
    assert "\n" not in line and "tiny-org/not-here" in line and "HF_HUB_OFFLINE" in line and "hf download" in line
    # online, but the Hub cannot be reached: a closed port stands in for no network
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(CheckpointError) as e:
        resolve_hub("tiny-org/not-here@v1")
    line = str(e.value)
    assert "\n" not in line and line.startswith("cannot download tiny-org/not-here@v1") and "--revision v1" in line


def test_the_cache_lists_its_causal_lms(cache, tmp_path):
    # a repository that is neither a causal LM nor a masked LM (no ForCausalLM, no ForMaskedLM head) is left out
    other = tmp_path / "encoder"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert", "architectures": ["BertModel"]}')
    put_in_cache(cache, "tiny-org/an-encoder", other)
    masked = tmp_path / "masked"
    masked.mkdir()
    (masked / "config.json").write_text('{"model_type": "bert", "architectures": ["BertForMaskedLM"]}')
    put_in_cache(cache, "tiny-org/a-masked-lm", masked)  # an encoder with its masked-LM head: listed
    found = {m["name"]: m for m in cached_models()}
    assert set(found) == {"tiny-org/tiny-llama", "tiny-org/a-masked-lm"}
    assert found["tiny-org/a-masked-lm"]["family"] == "bert"
    listed = found["tiny-org/tiny-llama"]
    assert listed["name"] == "tiny-org/tiny-llama" and listed["source"] == "hub-cache"
    assert listed["family"] == "llama" and listed["size_bytes"] > 0
    assert listed["path"].endswith("0123456789abcdef0123456789abcdef01234567")
