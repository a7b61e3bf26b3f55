"""The API over GGUF files: served patterns equal transformers' eager attention on the same file.

Files are written by the test (tests/kit/gguf.py): a quantized Llama (Q8_0, SentencePiece-style
tokenizer with a BOS) and an unquantized GPT-2 (F32, byte-level BPE), each served from its path
as ``ATTNSCOPE_CHECKPOINT`` would give it; a third, in a fake Ollama folder, by its blob.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.kit.app import attention

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason='needs the gguf extra: pip install "attnscope[gguf]"')
pytest.importorskip("accelerate", reason='needs the gguf extra: pip install "attnscope[gguf]"')

from attnscope.app.main import create_app  # noqa: E402
from attnscope.app.settings import Settings  # noqa: E402
from attnscope.model.sources.ollama import resolve_ollama  # noqa: E402

from tests.kit import gguf as ggufkit  # noqa: E402

FILES = {"llama": "Q8_0", "gpt2": "F32"}
TEXT = "The cat sat on the mat. Then the cat 🎉 saw the dog, and the dog sat on the log."


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-gguf")
    return {fam: ggufkit.write(fam, root / f"tiny-{fam}-{q}.gguf", q) for fam, q in FILES.items()}


@pytest.fixture(scope="module")
def clients(files):
    out, stack = {}, []
    for fam, path in files.items():
        c = TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1)))
        c.__enter__()
        stack.append(c)
        out[fam] = c
    yield out
    for c in stack:
        c.__exit__(None, None, None)


@pytest.mark.parametrize("family", list(FILES))
def test_served_pattern_equals_eager_on_the_same_file_over_json(family, files, clients):
    data = attention(clients[family], text=TEXT, include=["pattern"], top_k=3)
    ref, logits = ggufkit.eager_reference(files[family], data["token_ids"])
    for lv in data["layers"]:
        for hv in lv["heads"]:
            assert np.abs(np.array(hv["pattern"]) - ref[lv["layer"], hv["head"]].numpy()).max() <= 2e-3
    assert [p[0]["id"] for p in data["predictions"]] == logits.argmax(-1).tolist()


@pytest.mark.parametrize("family", list(FILES))
def test_offsets_rebuild_the_text(family, clients):
    for text in (TEXT, "  two  spaces\nand a newline", "naïve café — ok?"):
        data = attention(clients[family], text=text, include=["pattern"], layers=[0], heads=[0], top_k=0)
        assert len(data["offsets"]) == len(data["tokens"]) == len(data["token_ids"])
        assert "".join(text[a:b] for a, b in data["offsets"]) == text


@pytest.mark.parametrize("family", list(FILES))
def test_model_facts_say_gguf_and_the_quantization(family, files, clients):
    info = clients[family].get("/api/model").json()
    assert info["source_format"] == "gguf" and info["quantization"] == FILES[family]
    assert info["family"] == family and info["name"] == files[family].name
    assert info["checkpoint"].endswith(files[family].name)
    assert info["bos_token"] == ("<s>" if family == "llama" else None)
    roles = clients[family].get("/api/heads").json()
    assert np.array(roles["scores"]).shape[:2] == (info["n_layer"], info["n_head"])


def test_the_environment_variable_and_an_ollama_blob(files, tmp_path, monkeypatch):
    root = ggufkit.ollama_folder(tmp_path / "ollama", files["llama"], name="library/tinyllama", tag="q8")
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("ATTNSCOPE_CHECKPOINT", str(resolve_ollama("tinyllama:q8")))
    with TestClient(create_app(Settings(device="cpu", torch_threads=1))) as c:
        info = c.get("/api/model").json()
        assert info["name"] == "tinyllama:q8" and info["quantization"] == "Q8_0"
        assert attention(c, text="The cat", include=["pattern"], top_k=0)["tokens"][0] == "<s>"


def test_other_formats_say_theirs(client):
    info = client.get("/api/model").json()
    assert info["source_format"] == "safetensors" and info["quantization"] is None
