"""An atlas with ``divergence`` (``--compare-model``) of a quantized GGUF file against its transformers
original: over a corpus the divergence is small but not 0 and equals transformers' eager attention of
both (the original's folder; transformers reading the GGUF file); GET /api/atlas serves it to 6
significant digits and names the compare model in its definition, and a head's card holds its
histogram and the rows where the two models disagree most."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from attnscope.model.atlas.build import atlas
from attnscope.model.atlas.read import read_atlas
from attnscope.model.registry import load_model
from fastapi.testclient import TestClient

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from tests.kit.atlas import TEXTS, js_rows, reference_windows  # noqa: E402
from tests.kit.gguf import eager_reference, transformers_original, write  # noqa: E402

SEQ_LEN = 24
DOCS = [t.strip() for t in TEXTS]  # as a .txt corpus's paragraphs read back


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the original's folder, its Q8_0 GGUF file, the atlas folder)."""
    root = tmp_path_factory.mktemp("atlas-divergence")
    original = transformers_original(root / "original")
    quantized = write("gpt2", root / "q8" / "tiny-gpt2-Q8_0.gguf", "Q8_0")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(DOCS), encoding="utf-8")
    out = atlas(corpus, root / "atlas", checkpoint=original, compare_model=quantized, seq_len=SEQ_LEN, batch_size=2,
                exemplars=3, progress=False)
    return original, quantized, out


def test_a_quantized_files_divergence_is_small_and_equals_eager_attention_of_both(made):
    original, quantized, out = made
    ref = transformers.AutoModelForCausalLM.from_pretrained(original, attn_implementation="eager").eval()
    rows = []
    for ids in reference_windows(load_model(original, "cpu").tokenizer, DOCS, SEQ_LEN):
        with torch.no_grad():
            pa = torch.stack(ref(torch.tensor([ids]), output_attentions=True).attentions)[:, 0].double().numpy()
        pb = eager_reference(quantized, ids)[0].double().numpy()
        rows.append(js_rows(pa, pb)[..., 1:])  # rows t >= 1
    want = np.concatenate(rows, axis=-1)
    got = read_atlas(out)
    assert (got.counts["divergence"] == want.shape[-1]).all()
    np.testing.assert_allclose(got.maps["divergence"], want.mean(-1), rtol=1e-3, atol=1e-7)
    assert (got.maps["divergence"] > 0).all() and got.maps["divergence"].max() < 1e-2


def test_the_api_serves_it_to_six_significant_digits(made):
    original, quantized, out = made
    got = read_atlas(out)
    with TestClient(create_app(Settings(checkpoint=original, device="cpu", torch_threads=1, atlas=[out]))) as c:
        body = c.get("/api/atlas").json()
        assert "divergence" in body["atlases"][0]["metrics"]
        assert "tiny-gpt2" in body["atlases"][0]["definitions"]["divergence"]  # the compare model, by name
        np.testing.assert_allclose(np.array(body["maps"]["divergence"]), got.maps["divergence"], rtol=1e-5, atol=0)
        layer = got.layers[-1]
        card = c.get(f"/api/atlas/heads/{layer}/0").json()
    d = card["metrics"]["divergence"]
    assert sum(d["histogram"]) == d["count"] == got.counts["divergence"][-1, 0]
    assert d["bin_edges"][0] == 0 and d["bin_edges"][-1] == 1
    shown = [e for e in card["exemplars"] if e["metric"] == "divergence"]
    assert 0 < len(shown) <= 3 and shown[0]["value"] == max(e["value"] for e in shown) > 0
