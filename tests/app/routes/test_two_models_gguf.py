"""``POST /api/compare-models`` of a quantized GGUF file against its transformers original: the served
model is a tiny GPT-2 saved by transformers, the second the same weights written to GGUF in Q8_0 (as
llama.cpp's converter writes them, tests/kit/gguf.py) and found in LM Studio's folder. The divergence
is small but not 0, and every number equals transformers' eager ``output_attentions`` of both (the
original's folder, and transformers reading the GGUF file: the same dequantized weights)."""

from __future__ import annotations

import numpy as np
import pytest
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi.testclient import TestClient

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from tests.app.routes.test_two_models import eager_patterns, oracle  # noqa: E402
from tests.kit.app import compare_models  # noqa: E402
from tests.kit.gguf import eager_reference, transformers_original, write  # noqa: E402

TEXT = "The cat sat on the mat, and the dog watched the cat from the door."
FAMILY, QTYPE = "gpt2", "Q8_0"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(the transformers original's folder, the Q8_0 GGUF file of the same weights, the test's HOME)."""
    home = tmp_path_factory.mktemp("home")
    gguf_file = write(FAMILY, home / ".lmstudio" / "models" / "tiny" / f"tiny-{FAMILY}-{QTYPE}.gguf", QTYPE)
    original = transformers_original(tmp_path_factory.mktemp("original"))  # write()'s model, seed 0
    return original, gguf_file, home


@pytest.fixture(scope="module")
def client(files, tmp_path_factory):
    original, _, home = files
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hub")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("OLLAMA_MODELS", str(home / "no-ollama"))
        mp.setenv("HOME", str(home))
        with TestClient(create_app(Settings(checkpoint=original, device="cpu", torch_threads=1))) as c:
            yield c




def test_a_quantized_file_diverges_a_little_from_its_original(client, files):
    original, gguf_file, _ = files
    shown = gguf_file.relative_to(gguf_file.parents[1]).as_posix()  # relative to LM Studio's folder
    listed = [m for m in client.get("/api/models").json()["models"] if m.get("path") == shown]
    assert len(listed) == 1 and listed[0]["status"] == "ok", listed
    r = compare_models(client, text=TEXT, model_b=listed[0]["name"], layer=1, head=0)
    assert r.status_code == 200, r.text
    out = r.json()
    ids = transformers.AutoTokenizer.from_pretrained(original).encode(TEXT)
    assert len(out["tokens"]) == len(ids)
    pa = eager_patterns(original, ids)
    pb = eager_reference(gguf_file, ids)[0].double().numpy()
    js, max_abs, agree = oracle(pa, pb)
    got = np.array(out["divergence"])
    np.testing.assert_allclose(got, js, rtol=1e-3, atol=1e-7)  # ~1e-4 bits: float32 rounding is far below
    np.testing.assert_allclose(np.array(out["max_abs"]), max_abs, atol=2e-6)
    np.testing.assert_allclose(np.array(out["argmax_agreement"]), agree, atol=1e-12)
    np.testing.assert_allclose(np.array(out["b"]), pb[1, 0], atol=2e-6)
    # quantization moves every head a little: never 0, far below the divergence of unrelated rows
    assert (got > 0).all() and got.max() < 1e-2 and (js > 0).all()
