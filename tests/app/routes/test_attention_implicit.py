"""A hybrid's value-linear layers in POST /api/attention and /api/model: M, exact, under the model's numbers.

The served M of each implicit head equals M recomputed from a separate transformers load of the same
checkpoint (its scans recorded, model/families/implicit.py), whose Σ_s M v (+ skip · v) the model
tests hold equal to each scan's own output (tests/model/families/test_implicit.py).
"""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")

from attnscope.model.families.implicit import recording_scans  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.family import build, random_download  # noqa: E402
from tests.kit.implicit import BAMBA, JAMBA, KIMI, MINIMAX  # noqa: E402

TEXT = "The cat sat on the mat. Then the dog saw the cat."
FAMILIES = ["qwen3_next", "lfm2", "bamba", "jamba", "minimax", "kimi_linear"]
MIXERS = {
    "qwen3_next": "gated_deltanet", "lfm2": "short_conv", "bamba": "mamba2", "jamba": "mamba1", "minimax": "lightning",
    "kimi_linear": "kimi_delta",
}
PER_CHANNEL = ("lfm2", "jamba")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("implicit")
    return {
        "qwen3_next": build("qwen3_next", root / "qwen3_next"),
        "lfm2": build("lfm2", root / "lfm2"),
        "bamba": random_download(root / "bamba", "bamba", **BAMBA),
        "jamba": random_download(root / "jamba", "jamba", **JAMBA),
        "minimax": random_download(root / "minimax", "minimax", **MINIMAX),
        "kimi_linear": random_download(root / "kimi_linear", "kimi_linear", **KIMI),
    }


def reference(path, ids: list[int]) -> dict:
    """layer -> (heads, T, T) M from transformers' own model of the checkpoint, recorded here."""
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad(), recording_scans(model) as scans:
        model(torch.tensor([ids]))
    T = len(ids)
    out = {}
    for layer, scan in scans.items():
        rows = scan.rows(0, T)
        skip = None if scan.per_channel else scan.skip  # a per-channel skip is not sent
        out[layer] = (rows.abs().mean(0, keepdim=True) if scan.per_channel else rows).numpy(), skip
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_model_names_each_layers_mixer(family, clients):
    info = clients[family].get("/api/model").json()
    implicit = [layer for layer in info["layers"] if layer.get("implicit")]
    assert implicit
    for layer in implicit:
        assert layer["type"] == MIXERS[family]
        assert layer["index"] not in info["attention_layers"]
        assert layer["heads"] >= 1


@pytest.mark.parametrize("family", FAMILIES)
def test_served_m_equals_the_layers_own_scan(family, clients, family_dirs):
    info = clients[family].get("/api/model").json()
    numbers = [layer["index"] for layer in info["layers"] if layer.get("implicit")]
    asked = sorted([*numbers, info["attention_layers"][0]])
    data = attention(clients[family], text=TEXT, include=["pattern"], layers=asked, top_k=0)
    assert [lv["layer"] for lv in data["layers"]] == asked  # the model's own numbers, in order
    expected = reference(family_dirs[family], data["token_ids"])
    for lv in data["layers"]:
        if lv["layer"] not in numbers:
            assert "implicit" not in lv
            continue
        M, skip = expected[lv["layer"]]
        assert lv["implicit"] is True and lv["mixer"] == MIXERS[family]
        assert lv["per_channel"] == (family in PER_CHANNEL)
        assert (lv["skip"] is None) == (skip is None)
        if skip is not None:
            np.testing.assert_allclose(lv["skip"], skip.numpy(), rtol=1e-6)
        served = np.array([hv["pattern"] for hv in lv["heads"]])
        assert served.shape == M.shape
        assert np.abs(served - M).max() <= 1e-5 + 1e-5 * np.abs(M).max()
        assert np.all(np.triu(served, 1) == 0)  # nothing after the query


def test_b64_is_the_json_numbers(clients):
    body = dict(text=TEXT, include=["pattern"], layers=[0], top_k=0)
    as_json = attention(clients["qwen3_next"], **body)["layers"][0]["heads"]
    as_b64 = attention(clients["qwen3_next"], encoding="b64", **body)["layers"][0]["heads"]
    for a, b in zip(as_json, as_b64, strict=True):
        x = b["pattern"]
        typed = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]).reshape(np.array(a["pattern"]).shape)
        assert np.abs(typed - np.array(a["pattern"])).max() <= 1e-5


def test_default_layers_stay_the_attention_layers(clients):
    info = clients["qwen3_next"].get("/api/model").json()
    data = attention(clients["qwen3_next"], text=TEXT, include=["pattern"], top_k=0)
    assert [lv["layer"] for lv in data["layers"]] == info["attention_layers"]


def test_an_implicit_layer_without_pattern_is_a_422(clients):
    r = clients["qwen3_next"].post("/api/attention", json={"text": TEXT, "include": ["stats"], "layers": [0]})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "include"]


def signed_pool(M: np.ndarray, k: int) -> np.ndarray:
    """(heads, T, T) -> (heads, m, m) by hand: each k × k block's entry of largest |M|, its sign kept."""
    H, T, _ = M.shape
    m = -(-T // k)
    out = np.zeros((H, m, m))
    for i in range(m):
        for j in range(m):
            block = M[:, i * k : (i + 1) * k, j * k : (j + 1) * k].reshape(H, -1)
            out[:, i, j] = block[np.arange(H), np.abs(block).argmax(-1)]
    return out


@pytest.mark.parametrize("family", ["qwen3_next", "bamba", "jamba"])
def test_grid_thumbnails_of_implicit_heads_keep_the_sign(family, clients, family_dirs):
    """The grid's request naming every layer: softmax heads as levels, implicit heads as M pooled by hand
    (the entry of largest |M| of each block), over the causal mask; their statistics of |M| normalised per row."""
    info = clients[family].get("/api/model").json()
    every = [layer["index"] for layer in info["layers"] if layer.get("implicit")] + info["attention_layers"]
    data = attention(clients[family], text=TEXT, include=["stats"], thumbnail=8, layers=sorted(every), top_k=0)
    expected = reference(family_dirs[family], data["token_ids"])
    k = data["thumbnail"]["block"]
    assert k > 1
    for lv in data["layers"]:
        if not lv.get("implicit"):
            assert all(0 <= v <= 255 for h in lv["heads"] for row in h["thumbnail"] for v in row)
            continue
        M = expected[lv["layer"]][0].astype(np.float64)
        served = np.array([h["thumbnail"] for h in lv["heads"]])
        by_hand = signed_pool(M, k)
        assert np.abs(served - by_hand).max() <= 1e-5 + 1e-5 * np.abs(M).max()
        assert np.array_equal(np.array(lv["thumbnail_mask"]), np.tril(np.ones_like(served[0])))
        p = np.abs(M) / np.abs(M).sum(-1, keepdims=True)
        entropy = -(p * np.log(np.where(p > 0, p, 1))).sum(-1).mean(-1)
        for h, head in enumerate(lv["heads"]):
            assert head["stats"]["entropy"] == pytest.approx(entropy[h], rel=1e-4)
            assert head["stats"]["max_weight"] == pytest.approx(p[h].max(-1).mean(), rel=1e-4)
            assert head["stats"]["var_q"] is None and head["stats"]["entropy_unscaled"] is None
        if family == "qwen3_next":
            assert (served < 0).any()


def test_falcon_h1s_mamba2_beside_attention_is_an_entry_of_the_same_number(tmp_path):
    """Falcon-H1 runs Mamba-2 beside attention in every layer: /api/model names it as the layer's `mixer`, and
    `mixers` sends it as an implicit entry of the same number after the softmax one, its M the scan's own."""
    path = build("falcon_h1", tmp_path / "falcon_h1")
    with served({"falcon_h1": path}) as clients:
        client = clients["falcon_h1"]
        info = client.get("/api/model").json()
        assert info["attention_layers"] == [layer["index"] for layer in info["layers"]]
        assert all(layer["mixer"] == "mamba2" and layer["mixer_heads"] >= 1 for layer in info["layers"])
        assert not any(layer.get("implicit") for layer in info["layers"])
        data = attention(client, text=TEXT, include=["pattern"], layers=[0, 1], mixers=[1], top_k=0)
        assert [(lv["layer"], bool(lv.get("implicit"))) for lv in data["layers"]] == [(0, False), (1, False), (1, True)]
        mamba = data["layers"][2]
        M, skip = reference(path, data["token_ids"])[1]
        assert mamba["mixer"] == "mamba2" and np.allclose(mamba["skip"], skip.numpy())
        served_m = np.array([h["pattern"] for h in mamba["heads"]])
        assert served_m.shape == M.shape and np.abs(served_m - M).max() <= 1e-5 + 1e-5 * np.abs(M).max()
        # the attention entry of layer 1 is a softmax, as without `mixers`
        rows = np.array(data["layers"][1]["heads"][0]["pattern"]).sum(-1)
        assert np.allclose(rows, 1, atol=1e-4)
        grid = attention(client, text=TEXT, include=["stats"], thumbnail=8, mixers=[0], top_k=0)
        assert [(lv["layer"], bool(lv.get("implicit"))) for lv in grid["layers"]] == [(0, False), (0, True), (1, False)]
        r = client.post("/api/attention", json={"text": TEXT, "include": ["pattern"], "mixers": [5]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "mixers"]


def zeroing_at_norm(model, layer: int, head: int):
    """The oracle of switching an implicit head off: transformers' own model, the head's slice of the scan's output
    zeroed by a forward pre-hook on the mixer's norm (what the scan hands its gate, norm and projection)."""
    mixer = next(m for m in model.modules() if getattr(m, "layer_idx", None) == layer and hasattr(m, "norm"))
    heads = next(getattr(mixer, n) for n in ("num_v_heads", "num_heads", "num_attention_heads") if hasattr(mixer, n))

    def zero(_m, inp):
        x = inp[0].reshape(-1, heads, inp[0].shape[-1] // heads if inp[0].dim() == 3 else inp[0].shape[-1]).clone()
        x[:, head] = 0  # Gated DeltaNet's norm is per head: (batch · T · heads, dv); the others' (batch, T, heads · dv)
        return (x.reshape(inp[0].shape), *inp[1:])

    return mixer.norm.register_forward_pre_hook(zero)


@pytest.mark.parametrize("family", ["qwen3_next", "bamba", "minimax"])
def test_switching_an_implicit_head_off_is_zeroing_its_slice_of_the_scan(family, clients, family_dirs):
    """`ablate` naming an implicit head: the predictions are transformers' own with that head's slice of the scan's
    output zeroed by a hook on the mixer's norm input, and differ from the model's own."""
    layer = next(lv["index"] for lv in clients[family].get("/api/model").json()["layers"] if lv.get("implicit"))
    body = dict(text=TEXT, include=[], layers=[], top_k=5, encoding="json")
    before = attention(clients[family], **body)
    after = attention(clients[family], ablate=[{"layer": layer, "head": 1}], **body)
    model = AutoModelForCausalLM.from_pretrained(family_dirs[family], attn_implementation="eager").eval()
    with torch.no_grad():
        handle = zeroing_at_norm(model, layer, 1)
        probs = torch.softmax(model(torch.tensor([after["token_ids"]])).logits[0].double(), -1)
        handle.remove()
    for t, top in enumerate(after["predictions"]):
        for p in top:
            assert p["prob"] == pytest.approx(float(probs[t, p["id"]]), abs=2e-5)
    assert after["predictions"] != before["predictions"]


def test_a_per_channel_mixers_head_cannot_be_switched_off(clients):
    r = clients["jamba"].post("/api/attention", json={"text": TEXT, "ablate": [{"layer": 0, "head": 0}], "top_k": 1})
    assert r.status_code == 422 and "per channel" in r.json()["detail"][0]["msg"]


def test_writing_tokens_with_an_implicit_head_off_is_a_422(clients):
    """A new token runs the mixer's recurrent step, which is not switched off: refused, naming the layer."""
    body = {"text": TEXT, "max_new_tokens": 2, "ablate": [{"layer": 0, "head": 0}]}
    r = clients["qwen3_next"].post("/api/generate", json=body)
    assert r.status_code == 422 and "[0]" in r.json()["detail"][0]["msg"]


SCAN_ARGS = {"qwen3_next": ("torch_chunk_gated_delta_rule", 2, "value")}  # the scan, its values: index, keyword


# a tiny random Bamba's M is too small where a text can see it (its Δ and B·C are): knocked out, nothing moves
@pytest.mark.parametrize("family", ["qwen3_next"])
def test_an_implicit_edge_knocked_out_is_its_values_term_removed(family, clients, family_dirs, monkeypatch):
    """Knocking out edges (queries 8-11, keys 8-11: the diagonal and after it, where a tiny model's M is largest) of
    head 1 of an implicit layer: the log-probability at 11 is transformers' own with those queries' scan output
    taken from a second scan whose values at those keys are 0 in that head (M is linear in the values; Mamba-2's
    skip D v_t, no edge, added back), the other queries' as they were."""
    import importlib

    layer = next(lv["index"] for lv in clients[family].get("/api/model").json()["layers"] if lv.get("implicit"))
    edge = {"layer": layer, "head": 1, "query": [8, 12], "key": [8, 12]}
    got = clients[family].post("/api/knockout", json={"text": TEXT, "edges": [edge], "position": 11})
    assert got.status_code == 200, got.text
    got = got.json()
    ids = attention(clients[family], text=TEXT, include=[], layers=[], top_k=0)["token_ids"]
    name, index, keyword = SCAN_ARGS[family]
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    scan = getattr(module, name)
    calls = []

    def knocked(*args, **kwargs):
        out = scan(*args, **kwargs)
        calls.append(1)
        if len(calls) != layer + 1:  # only that layer's scan (the first mixers run in order)
            return out
        args = list(args)
        v = (args[index] if len(args) > index else kwargs[keyword]).clone()  # (batch, T, heads, dv)
        skip = 0.0 if kwargs.get("D") is None else kwargs["D"][1] * v[:, 8:12, 1]
        v[:, 8:12, 1] = 0
        if len(args) > index:
            args[index] = v
        else:
            kwargs[keyword] = v
        zeroed = scan(*args, **kwargs)
        first, other = (out[0], zeroed[0]) if isinstance(out, tuple) else (out, zeroed)
        first = first.clone()
        first[:, 8:12, 1] = other[:, 8:12, 1] + skip
        return (first, *out[1:]) if isinstance(out, tuple) else first

    monkeypatch.setattr(module, name, knocked)
    model = AutoModelForCausalLM.from_pretrained(family_dirs[family], attn_implementation="eager").eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    logp = torch.log_softmax(logits[0, got["position"]].double(), -1)[got["token_id"]]
    assert got["logprob_after"] == pytest.approx(float(logp), abs=1e-4)
    assert got["logprob_after"] != got["logprob_before"]


def test_a_lightning_edge_cannot_be_knocked_out(clients):
    edge = {"layer": 0, "head": 0, "query": 3, "key": 1}
    r = clients["minimax"].post("/api/knockout", json={"text": TEXT, "edges": [edge]})
    assert r.status_code == 422 and "lightning" in r.json()["detail"][0]["msg"]


def test_head_effects_switch_each_implicit_head_off(clients, family_dirs):
    """Head effects on Qwen3-Next: each implicit head's delta is transformers' own log-prob with that head's slice of
    the scan's output zeroed at the norm's input, minus the log-prob with nothing off."""
    data = clients["qwen3_next"].post("/api/head-effects", json={"text": TEXT}).json()
    assert [(e["layer"], e["mixer"]) for e in data["implicit"]] == [(0, "gated_deltanet"), (2, "gated_deltanet")]
    ids = attention(clients["qwen3_next"], text=TEXT, include=[], layers=[], top_k=0)["token_ids"]
    ids = ids[: data["position"] + 1]
    model = AutoModelForCausalLM.from_pretrained(family_dirs["qwen3_next"], attn_implementation="eager").eval()
    for entry in data["implicit"]:
        for head, delta in enumerate(entry["delta"]):
            with torch.no_grad():
                handle = zeroing_at_norm(model, entry["layer"], head)
                logits = model(torch.tensor([ids])).logits[0, -1].double()
                handle.remove()
            logp = float(torch.log_softmax(logits, -1)[data["token_id"]])
            assert delta == pytest.approx(logp - data["logprob"], abs=1e-4)
    mean = clients["qwen3_next"].post("/api/head-effects", json={"text": TEXT, "ablation": "mean"}).json()
    assert "implicit" not in mean  # mean ablation: not defined for implicit heads here
