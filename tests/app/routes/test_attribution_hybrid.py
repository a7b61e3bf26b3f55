"""POST /api/attribution on hybrids: Bamba and Jamba split (each mixer layer one component, checked against a
separate hooked transformers load), Qwen3-Next refused with a 422 naming its mixer layers."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.app import attention  # noqa: E402
from tests.kit.family import build, random_download  # noqa: E402
from tests.kit.implicit import BAMBA, JAMBA, expected_hybrid_attribution  # noqa: E402

TEXT = "The cat sat on the mat. Then the dog saw the cat."
TOL = 1e-3  # the answers' numbers are rounded to 6 significant digits


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("attr-hybrid")
    return {
        "bamba": random_download(root / "bamba", "bamba", **BAMBA),
        "jamba": random_download(root / "jamba", "jamba", **JAMBA),
        "qwen3_next": build("qwen3_next", root / "qwen3_next"),
    }


@pytest.mark.parametrize("name", ["bamba", "jamba"])
def test_a_hybrids_answer_is_each_write_and_adds_up(name, clients, family_dirs):
    client = clients[name]
    body = client.post("/api/attribution", json={"text": TEXT, "position": 8}).json()
    ids = attention(client, text=TEXT, include=["pattern"], top_k=0)["token_ids"]
    want = expected_hybrid_attribution(family_dirs[name], ids, 8, body["token_id"])
    layers = client.get("/api/model").json()["layers"]
    scale = TOL * (1.0 + want["heads"].abs().max().item() + want["mlps"].abs().max().item())
    rows = [row for row in body["heads"] if row is not None]
    assert (torch.tensor(rows, dtype=torch.float64) - want["heads"]).abs().max() <= scale
    assert (torch.tensor(body["mlps"], dtype=torch.float64) - want["mlps"]).abs().max() <= scale
    for i, layer in enumerate(layers):
        assert (body["mixers"][i] is None) == (not layer.get("implicit"))  # a mixer where /api/model has one
        assert (body["heads"][i] is None) == (body["mixers"][i] is not None)
        if body["mixers"][i] is not None:
            assert body["mixers"][i] == pytest.approx(want["mixers"][i], abs=scale)
            assert f"layer {i} ({layer['type']})" in body["unsplit"]
    total = sum(map(sum, rows)) + sum(body["mlps"]) + sum(m for m in body["mixers"] if m is not None)
    total += body["embed"] + body["rest"]
    assert total == pytest.approx(body["logit"], abs=TOL * (1.0 + abs(body["logit"])))
    assert body["logit"] == pytest.approx(want["logit"], abs=TOL * (1.0 + abs(body["logit"])))


def test_a_hybrid_not_worked_out_is_a_422_naming_its_mixers(clients):
    response = clients["qwen3_next"].post("/api/attribution", json={"text": TEXT})
    assert response.status_code == 422
    assert "layer 0 (gated_deltanet)" in response.text and "bamba" in response.text
