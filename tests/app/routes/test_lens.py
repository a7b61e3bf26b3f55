"""POST /api/lens over JSON, against transformers' hidden states through the final norm and LM head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.interventions import TEXT, final_norm, unembed  # noqa: E402
from tests.kit.interventions_app import SERVED, family_dirs, oracles, refused  # noqa: E402, F401


@pytest.mark.parametrize("name", SERVED)
def test_served_lens_equals_the_hidden_states_through_the_head(name, clients, oracles):  # noqa: F811
    r = clients[name].post("/api/lens", json={"text": TEXT, "top_k": 3})
    assert r.status_code == 200, r.text
    data = r.json()
    model = oracles[name]
    info = clients[name].get("/api/model").json()
    tokenizer = clients[name].app.state.attnscope.service.loaded.tokenizer  # the served model's own
    ids = tokenizer.encode_ids(TEXT)
    assert len(ids) == len(data["tokens"])
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
        logits = [unembed(model, final_norm(model)(h[0])) for h in out.hidden_states[:-1]] + [out.logits[0]]
    assert [e["after"] for e in data["residuals"]] == ["embed", *range(info["n_layer"])]
    for entry, ref in zip(data["residuals"], logits):
        probs = torch.softmax(ref.double(), -1)
        top = torch.topk(probs, 3)
        assert [[p["id"] for p in row] for row in entry["top"]] == top.indices.tolist()
        served = np.array([[p["prob"] for p in row] for row in entry["top"]])
        assert np.abs(served - top.values.numpy()).max() <= 1e-5


def test_lens_refuses_a_top_k_out_of_range(clients):  # noqa: F811
    refused(clients["llama"], "/api/lens", {"text": TEXT, "top_k": 21}, ["top_k"])
    refused(clients["llama"], "/api/lens", {"text": TEXT, "top_k": 0}, ["top_k"])
