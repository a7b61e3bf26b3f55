"""The API over other families, and the compact wire format (thumbnails, focus head, b64).

Served numbers are checked against transformers' own eager ``output_attentions`` and against
each other: the b64 form decodes to the JSON form's numbers, thumbnails are a max-pool of
the full pattern, the focus head is that head of the full answer.
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from tests.kit.app import attention

pytest.importorskip("transformers")

from attnscope.app.main import create_app  # noqa: E402
from attnscope.app.settings import Settings  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.family import family_configs  # noqa: E402

FAMILIES = list(family_configs())
TEXT = "The cat sat on the mat. Then the cat 🎉 saw the dog, and the dog sat on the log."
ALL_FIELDS = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]


def decode(x) -> np.ndarray:
    """The README's recipe: a typed array back to numpy."""
    a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
    return a.reshape([int(n) for n in x["shape"].split(",")])


@pytest.mark.parametrize("family", FAMILIES)
def test_served_pattern_equals_eager_over_json(family, family_dirs, clients):
    data = attention(clients[family], text=TEXT, include=["pattern", "q", "k", "attn_scores_raw"], top_k=3)
    ref = AutoModelForCausalLM.from_pretrained(family_dirs[family], attn_implementation="eager")
    with torch.no_grad():
        out = ref(torch.tensor([data["token_ids"]]), output_attentions=True)
    # eager returns one map per softmax layer (a hybrid's others have none): by the model's numbers
    layers = clients[family].get("/api/model").json()["attention_layers"]
    by_number = dict(zip(layers, [a for a in out.attentions if a is not None], strict=True))
    for lv in data["layers"]:
        expected = by_number[lv["layer"]][0].numpy()  # (nh, T, T)
        for hv in lv["heads"]:
            h = hv["head"]
            if "lambda" in lv:  # differential attention: the pair h, h + nh/2, signed by the layer's λ
                first, second = expected[h], expected[h + len(lv["heads"])]
                assert np.abs(np.array(hv["pattern_parts"]) - np.stack([first, second])).max() <= 2e-3
                assert np.abs(np.array(hv["pattern"]) - (first - lv["lambda"] * second)).max() <= 2e-3
                continue
            assert "pattern_parts" not in hv
            assert np.abs(np.array(hv["pattern"]) - expected[h]).max() <= 2e-3
    # predictions are the model's own top guesses
    top = out.logits[0].argmax(-1).tolist()
    assert [p[0]["id"] for p in data["predictions"]] == top


@pytest.mark.parametrize("family", FAMILIES)
def test_served_raw_scores_are_q_dot_k_of_the_served_q_and_k(family, clients):
    data = attention(clients[family], text=TEXT, include=["q", "k", "attn_scores_raw"], encoding="b64", top_k=0)
    mask = decode(data["mask"]).astype(bool)
    for lv in data["layers"]:
        layer_mask = decode(lv["mask"]).astype(bool) if "mask" in lv else mask
        for hv in lv["heads"]:
            q, k, raw = decode(hv["q"]), decode(hv["k"]), decode(hv["attn_scores_raw"])
            np.testing.assert_allclose(raw[layer_mask], (q @ k.T)[layer_mask], rtol=1e-4, atol=1e-3)
            assert np.isnan(raw[~layer_mask]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_model_facts_and_head_roles(family, clients):
    c = clients[family]
    info = c.get("/api/model").json()
    assert info["family"] == family
    assert len(info["kv_head_of"]) == info["n_head"]
    # every key/value head read (a differential pair: by its first query head, from the first half)
    assert max(info["kv_head_of"]) == (info["n_kv_head"] // 2 if info["differential"] else info["n_kv_head"]) - 1
    assert info["divisor"] > 0 and info["dtype"] == "float32" and info["device"] == "cpu"
    roles = c.get("/api/heads").json()
    assert len(roles["scores"]) == info["n_layer"]  # by the model's layer numbers, null where no softmax
    assert [i for i, row in enumerate(roles["scores"]) if row is not None] == info["attention_layers"]
    scores = np.array([row for row in roles["scores"] if row is not None])
    assert scores.shape == (len(info["attention_layers"]), info["n_head"], len(roles["roles"]))
    assert ((scores >= 0) & (scores <= 1)).all()
    # the what-ifs: causal off sees the future, "none" divides by 1
    first = info["attention_layers"][0]
    opened = attention(c, text=TEXT, include=["pattern"], causal=False, layers=[first], top_k=0)
    assert np.array(opened["mask"]).all()
    plain = attention(c, text=TEXT, include=["stats"], scale="none", layers=[first], top_k=0)
    assert plain["divisor"] == 1.0
    trained = attention(c, text=TEXT, include=["stats"], layers=[first], top_k=0)
    assert trained["divisor"] == pytest.approx(info["divisor"])


@pytest.fixture(scope="module")
def ours(checkpoint_dir):
    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1))) as c:
        yield c


# a layer's own mask (a sliding window) and chunk: the mask, which every view draws as masked cells
MASK_KEYS = {("layer", "mask"), ("layer", "chunk")}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_quirk_an_answer_holds_is_in_the_field_table(family, clients, ours):
    """What a family's answer holds that ours does not (a layer's λ or sink logits, a head's sink share, gate,
    pair or MLA parts, a softcap's step) is a row of `/api/model` `fields`, drawn by its row when it is a quirk."""
    fields = {f["name"]: f for f in clients[family].get("/api/model").json()["fields"]}
    everything = [name for name, f in fields.items() if f["at"] == "head"]
    base = attention(ours, text=TEXT, include=everything, top_k=0)
    data = attention(clients[family], text=TEXT, include=everything, top_k=0)
    extra = {("answer", k) for k in data.keys() - base.keys()}
    for lv in data["layers"]:
        extra |= {("layer", k) for k in lv.keys() - base["layers"][0].keys()}
        for hv in lv["heads"]:
            extra |= {("head", k) for k in hv.keys() - base["layers"][0]["heads"][0].keys()}
    for at, name in extra - MASK_KEYS:
        assert name in fields and fields[name]["at"] == at, (family, at, name)
        assert fields[name].get("sits") or fields[name]["kind"] == "scores", (family, name)


@pytest.mark.parametrize("family", ["ours", "llama", "gemma2"])
def test_b64_decodes_to_the_json_numbers(family, clients, ours):
    c = ours if family == "ours" else clients[family]
    body = dict(text=TEXT, include=ALL_FIELDS, thumbnail=8, focus={"layer": 1, "head": 1, "include": ALL_FIELDS[:4]})
    as_json, as_b64 = attention(c, **body), attention(c, **body, encoding="b64")
    assert as_b64["encoding"] == "b64" and as_json["encoding"] == "json"
    assert (decode(as_b64["mask"]) == np.array(as_json["mask"])).all()
    for lj, lb in zip(as_json["layers"], as_b64["layers"]):
        for hj, hb in zip(lj["heads"], lb["heads"]):
            assert (decode(hb["thumbnail"]) == np.array(hj["thumbnail"])).all()
            for name in ("pattern", "pattern_unscaled"):
                np.testing.assert_allclose(decode(hb[name]), np.array(hj[name]), atol=5.1e-6)
            for name in ("attn_scores_raw", "attn_scores", "q", "k", "v"):
                j = np.array(hj[name], dtype=np.float64)  # null -> nan
                np.testing.assert_allclose(decode(hb[name]), j, atol=5.1e-5, rtol=1e-6)
            for name in ("row_entropy", "row_entropy_unscaled"):
                np.testing.assert_allclose(decode(hb["stats"][name]), hj["stats"][name], atol=5.1e-6)
            assert {k: v for k, v in hb["stats"].items() if not k.startswith("row_")} == {
                k: v for k, v in hj["stats"].items() if not k.startswith("row_")
            }
    for name in ALL_FIELDS[:4]:
        np.testing.assert_allclose(
            decode(as_b64["focus"][name]), np.array(as_json["focus"][name], dtype=np.float64), atol=5.1e-5
        )


def test_thumbnails_are_a_max_pool_of_the_pattern(ours):
    text = " ".join(["The cat sat on the mat and looked at the dog."] * 2)
    data = attention(ours, text=text, include=["pattern"], thumbnail=8, encoding="b64", top_k=0)
    T = len(data["tokens"])
    info = data["thumbnail"]
    k = info["block"]
    assert k == math.ceil(T / 8) > 1 and info["size"] == math.ceil(T / k) <= 8

    def block_max(a: np.ndarray) -> np.ndarray:  # the definition, written out: max over each k×k block
        m = info["size"]
        return np.array([[a[i * k : (i + 1) * k, j * k : (j + 1) * k].max() for j in range(m)] for i in range(m)])

    for lv in data["layers"]:
        for hv in lv["heads"]:
            expected = np.round(block_max(decode(hv["pattern"]).astype(np.float64)) * 255).astype(np.uint8)
            assert np.abs(decode(hv["thumbnail"]).astype(int) - expected).max() <= 1  # float32 vs float64 rounding
    # the thumbnail mask: a block is masked only when every cell in it is
    assert (decode(info["mask"]) == block_max(decode(data["mask"]))).all()
    # short texts are not downsampled
    short = attention(ours, text="The cat", include=[], thumbnail=64, top_k=0)
    assert short["thumbnail"]["block"] == 1


def test_focus_is_that_head_of_the_full_answer(ours):
    full = attention(ours, text=TEXT, include=["pattern", "attn_scores_raw"], top_k=0)
    focus = attention(
        ours,
        text=TEXT,
        include=["stats"],
        thumbnail=16,
        focus={"layer": 1, "head": 1, "include": ["pattern", "attn_scores_raw"]},
    )
    assert (focus["focus"]["layer"], focus["focus"]["head"]) == (1, 1)
    head = full["layers"][1]["heads"][1]
    assert focus["focus"]["pattern"] == head["pattern"]
    assert focus["focus"]["attn_scores_raw"] == head["attn_scores_raw"]
    assert all(set(hv) == {"head", "thumbnail", "stats"} for lv in focus["layers"] for hv in lv["heads"])


def test_a_focus_out_of_range_names_the_field(ours):
    r = ours.post("/api/attention", json={"text": TEXT, "focus": {"layer": 99, "head": 0}})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "focus", "layer"] and "layers" in item["msg"]
    r = ours.post("/api/attention", json={"text": TEXT, "thumbnail": 2})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "thumbnail"]


def test_tiny_probabilities_are_numbers_not_null(ours):
    """temperature 0.01: far-down guesses have probabilities under 1e-300, floored to 0."""
    data = attention(ours, text="The cat sat on the mat.", include=[], top_k=5, temperature=0.01)
    probs = [p["prob"] for row in data["predictions"] for p in row]
    assert all(isinstance(p, float) and 0 <= p <= 1 and not math.isnan(p) for p in probs)


def test_grid_stats_without_rows_and_focus_stats_with_them(ours):
    full = attention(ours, text=TEXT, include=["stats"], top_k=0)
    grid = attention(
        ours, text=TEXT, include=["stats"], stats_rows=False, focus={"layer": 0, "head": 1, "include": ["stats"]}
    )
    for lg, lf in zip(grid["layers"], full["layers"]):
        for hg, hf in zip(lg["heads"], lf["heads"]):
            assert set(hf["stats"]) - set(hg["stats"]) == {"row_entropy", "row_entropy_unscaled"}
            assert all(hg["stats"][k] == hf["stats"][k] for k in hg["stats"])
    assert grid["focus"]["stats"] == full["layers"][0]["heads"][1]["stats"]


@pytest.mark.parametrize("encoding", ["json", "b64"])
def test_a_model_with_learned_sinks_sends_each_rows_sink_share(encoding, family_dirs, clients):
    """gpt-oss: the pattern is the model's own (rows under 1), each head's `sink_mass` is what its
    rows lack, each layer's `sink_logit` the model's parameter; the focus head carries it too."""
    c = clients["gpt_oss"]
    body = dict(text=TEXT, include=["pattern"], top_k=0, focus={"layer": 1, "head": 3, "include": ["pattern"]})
    data = attention(c, **body, encoding=encoding)
    read = decode if encoding == "b64" else np.array
    ref_model = AutoModelForCausalLM.from_pretrained(family_dirs["gpt_oss"], attn_implementation="eager")
    with torch.no_grad():
        out = ref_model(torch.tensor([data["token_ids"]]), output_attentions=True)
    for lv in data["layers"]:
        sinks = ref_model.model.layers[lv["layer"]].self_attn.sinks.detach().numpy()
        np.testing.assert_allclose(lv["sink_logit"], sinks, rtol=1e-6)
        expected = out.attentions[lv["layer"]][0].numpy()  # (nh, T, T)
        for hv in lv["heads"]:
            pattern, sink_mass = read(hv["pattern"]).astype(np.float64), read(hv["sink_mass"]).astype(np.float64)
            assert np.abs(pattern - expected[hv["head"]]).max() <= (1e-5 if encoding == "b64" else 1e-4)
            np.testing.assert_allclose(pattern.sum(-1) + sink_mass, 1.0, atol=len(pattern) * 5.1e-6)
    focus = data["focus"]
    head = data["layers"][1]["heads"][3]
    np.testing.assert_array_equal(read(focus["sink_mass"]), read(head["sink_mass"]))
    # a family without sinks sends neither
    plain = attention(clients["llama"], text=TEXT, include=["pattern"], top_k=0)
    assert all("sink_logit" not in lv and all("sink_mass" not in hv for hv in lv["heads"]) for lv in plain["layers"])


def test_a_hybrid_is_numbered_as_the_model_numbers_it(family_dirs, clients):
    """Qwen3-Next: Gated DeltaNet in layers 0 and 2, softmax attention in 1 and 3. Every answer
    names the softmax layers by those numbers; a Gated DeltaNet layer is sent only when asked for by
    number (as implicit attention, tests/app/routes/test_attention_implicit.py); head effects, roles and
    generation carry null for the layers without softmax heads."""
    c = clients["qwen3_next"]
    info = c.get("/api/model").json()
    assert info["n_layer"] == 4 and info["attention_layers"] == [1, 3]
    assert [layer["type"] for layer in info["layers"]] == ["gated_deltanet", "full", "gated_deltanet", "full"]
    data = attention(c, text=TEXT, include=["pattern"], top_k=0, focus={"layer": 3, "head": 0, "include": ["pattern"]})
    assert [lv["layer"] for lv in data["layers"]] == [1, 3]
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["qwen3_next"], attn_implementation="eager")
    with torch.no_grad():
        out = ref(torch.tensor([data["token_ids"]]), output_attentions=True)
    attentions = [a for a in out.attentions if a is not None]  # eager returns the softmax layers' only
    for lv, expected in zip(data["layers"], attentions):
        for hv in lv["heads"]:
            assert np.abs(np.array(hv["pattern"]) - expected[0, hv["head"]].numpy()).max() <= 1e-4
    assert data["focus"]["pattern"] == data["layers"][1]["heads"][0]["pattern"]
    # its output gates come with the pattern: the model's sigmoid gate, per head and query (a hook on q_proj)
    seen = {}
    for number in (1, 3):
        q_proj = ref.model.layers[number].self_attn.q_proj
        q_proj.register_forward_hook(lambda _m, _i, out, number=number: seen.__setitem__(number, out[0]))
    with torch.no_grad():
        ref(torch.tensor([data["token_ids"]]))
    T, nh, hd = len(data["token_ids"]), info["n_head"], info["head_dim"]
    for lv in data["layers"]:
        gates = torch.sigmoid(seen[lv["layer"]].view(T, nh, 2 * hd)[..., hd:]).mean(-1).T.numpy()  # (nh, T)
        for hv in lv["heads"]:
            np.testing.assert_allclose(hv["gate"], gates[hv["head"]], atol=1e-5)
    assert data["focus"]["gate"] == data["layers"][1]["heads"][0]["gate"]
    asked = attention(c, text=TEXT, layers=[2], include=["pattern"], top_k=0)["layers"]
    assert [(lv["layer"], lv["implicit"], lv["mixer"]) for lv in asked] == [(2, True, "gated_deltanet")]
    r = c.post("/api/attention", json={"text": TEXT, "layers": [4]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "layers", 0]
    # an implicit head may be switched off (its slice of the scan's output), one it does not have is a 422
    assert c.post("/api/head-effects", json={"text": TEXT, "ablate": [{"layer": 0, "head": 0}]}).status_code == 200
    r = c.post("/api/head-effects", json={"text": TEXT, "ablate": [{"layer": 0, "head": 99}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "ablate", 0, "head"]
    effects = c.post("/api/head-effects", json={"text": TEXT, "ablate": [{"layer": 1, "head": 0}]}).json()
    assert [row is None for row in effects["delta"]] == [True, False, True, False]
    # off in every row: switching it off again changes nothing (batched: float noise)
    assert abs(effects["delta"][1][0]) < 1e-5
    step = c.post("/api/generate", json={"text": "The cat", "max_new_tokens": 1}).text.splitlines()[0]
    rows = json.loads(step)["attention"]
    assert [row is None for row in rows] == [True, False, True, False]


@pytest.mark.parametrize("encoding", ["json", "b64"])
def test_mla_sends_q_k_and_v_at_their_sizes_and_the_score_in_two_parts(encoding, clients):
    """DeepSeek V3: q and k of 8 no-RoPE + 4 RoPE dimensions, v of 8; the content part of q·kᵀ is
    the no-RoPE halves' product, the position part the RoPE halves', and they sum to the raw score."""
    c = clients["deepseek_v3"]
    info = c.get("/api/model").json()
    assert (info["head_dim"], info["qk_head_dim"], info["v_head_dim"], info["score_parts"]) == (12, 12, 8, True)
    fields = ["q", "k", "v", "attn_scores_raw", "attn_scores_content", "attn_scores_position"]
    data = attention(c, text=TEXT, include=fields, top_k=0, encoding=encoding)
    read = decode if encoding == "b64" else (lambda x: np.array(x, dtype=np.float64))
    mask = read(data["mask"]).astype(bool)
    for lv in data["layers"]:
        for hv in lv["heads"]:
            q, k, v = read(hv["q"]), read(hv["k"]), read(hv["v"])
            assert q.shape[1] == k.shape[1] == 12 and v.shape[1] == 8
            raw, content, position = (read(hv[n]) for n in fields[3:])
            tol = dict(rtol=1e-4, atol=2e-3)
            np.testing.assert_allclose((q[:, :8] @ k[:, :8].T)[mask], content[mask], **tol)
            np.testing.assert_allclose((q[:, 8:] @ k[:, 8:].T)[mask], position[mask], **tol)
            np.testing.assert_allclose((content + position)[mask], raw[mask], **tol)
            assert np.isnan(content[~mask]).all() and np.isnan(position[~mask]).all()
    # a model without MLA sends neither part
    plain = attention(clients["llama"], text=TEXT, include=fields, top_k=0)
    assert all(n not in hv for lv in plain["layers"] for hv in lv["heads"] for n in fields[4:])


def test_rollout_over_the_api_is_the_papers_product(family_dirs, clients):
    """POST /api/rollout: row `position` of the head-averaged attention multiplied through the layers
    (Abnar & Zuidema), from eager's maps; a 422 naming the field for a position past the text."""
    c = clients["llama"]
    body = {"text": TEXT, "position": 5}
    data = c.post("/api/rollout", json=body).json()
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["llama"], attn_implementation="eager")
    ids = c.post("/api/attention", json={"text": TEXT, "layers": [], "include": [], "top_k": 0}).json()["token_ids"]
    with torch.no_grad():
        attentions = [a[0].double() for a in ref(torch.tensor([ids]), output_attentions=True).attentions]
    for residual in (True, False):
        data = c.post("/api/rollout", json={**body, "residual": residual}).json()
        R = None
        for layer, a in enumerate(attentions):
            A = a.mean(0)
            if residual:
                A = 0.5 * A + 0.5 * torch.eye(len(ids), dtype=torch.float64)
                A = A / A.sum(-1, keepdim=True)
            R = A if R is None else A @ R
            np.testing.assert_allclose(data["rollout"][layer], R[5].numpy(), atol=2e-5)
        assert data["layers"] == [0, 1, 2] and data["position"] == 5 and data["residual"] is residual
    r = c.post("/api/rollout", json={"text": TEXT, "position": 10**6})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "position"]


def test_one_head_on_two_texts_and_their_difference(family_dirs, clients):
    """POST /api/compare-texts: each text's pattern is eager's for that head; texts of as many
    tokens get b − a cell by cell; texts of different lengths say why there is no difference;
    an error in the second text names `text_b`."""
    c = clients["llama"]
    a, b = "The doctor said she", "The doctor said he"
    data = c.post("/api/compare-texts", json={"text": a, "text_b": b, "layer": 1, "head": 4}).json()
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["llama"], attn_implementation="eager")
    patterns = []
    for text, served in zip((a, b), data["texts"]):
        ids = c.post("/api/attention", json={"text": text, "layers": [], "include": [], "top_k": 0}).json()["token_ids"]
        with torch.no_grad():
            expected = ref(torch.tensor([ids]), output_attentions=True).attentions[1][0, 4].numpy()
        np.testing.assert_allclose(served["pattern"], expected, atol=1e-5)
        patterns.append(np.array(served["pattern"]))
    assert len(data["texts"][0]["tokens"]) == len(data["texts"][1]["tokens"])
    np.testing.assert_allclose(data["difference"], patterns[1] - patterns[0], atol=2e-5)
    assert data["max_abs_difference"] == pytest.approx(np.abs(patterns[1] - patterns[0]).max(), abs=2e-5)
    longer = c.post("/api/compare-texts", json={"text": a, "text_b": b + " and then", "layer": 0, "head": 0}).json()
    assert longer["difference"] is None and "tokens" in longer["why_no_difference"]
    r = c.post("/api/compare-texts", json={"text": a, "text_b": "   ", "layer": 0, "head": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "text_b"]
    r = c.post("/api/compare-texts", json={"text": a, "text_b": b, "layer": 7, "head": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "layer"]


def test_the_neuron_view_is_q_and_k_element_by_element(family_dirs, clients):
    """POST /api/neuron: q of the query and k of the key in one head, after rotary (Llama: a
    query head of a group reads its group's key), as /api/attention serves them (held to eager
    through the raw scores above); q ⊙ k sums to the raw score; the key defaults to the query's
    heaviest; the weight is eager's."""
    c = clients["llama"]
    data = c.post("/api/neuron", json={"text": TEXT, "layer": 2, "head": 4, "query": 9}).json()
    full = attention(c, text=TEXT, layers=[2], heads=[4], include=["q", "k", "attn_scores_raw", "pattern"], top_k=0)
    head = full["layers"][0]["heads"][0]
    assert data["key"] == int(np.argmax(head["pattern"][9]))
    np.testing.assert_allclose(data["q"], head["q"][9], atol=1e-4)
    np.testing.assert_allclose(data["k"], head["k"][data["key"]], atol=1e-4)
    np.testing.assert_allclose(data["q_times_k"], np.array(data["q"]) * np.array(data["k"]), rtol=1e-3, atol=1e-3)
    assert sum(data["q_times_k"]) == pytest.approx(data["attn_scores_raw"], rel=1e-3, abs=1e-2)
    assert data["attn_scores_raw"] == pytest.approx(head["attn_scores_raw"][9][data["key"]], abs=1e-3)
    assert data["attn_scores"] == pytest.approx(data["attn_scores_raw"] / data["divisor"], rel=1e-4)
    # the oracle for the pattern is eager
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["llama"], attn_implementation="eager")
    with torch.no_grad():
        weights = ref(torch.tensor([full["token_ids"]]), output_attentions=True).attentions[2][0, 4]
    assert data["weight"] == pytest.approx(float(weights[9, data["key"]]), abs=1e-5)
    masked = c.post("/api/neuron", json={"text": TEXT, "layer": 0, "head": 0, "query": 2, "key": 5}).json()
    assert masked["attn_scores_raw"] is None and masked["weight"] == 0  # a later key: masked
    r = c.post("/api/neuron", json={"text": TEXT, "layer": 0, "head": 0, "query": 500})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "query"]


def test_several_tokens_summed_or_averaged_on_both_sides(family_dirs, clients):
    """POST /api/selection: the selected queries' rows of eager's pattern, averaged or summed (where
    they look), and the selected keys' columns (who looks at them)."""
    c = clients["llama"]
    ids = c.post("/api/attention", json={"text": TEXT, "layers": [], "include": [], "top_k": 0}).json()["token_ids"]
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["llama"], attn_implementation="eager")
    with torch.no_grad():
        P = ref(torch.tensor([ids]), output_attentions=True).attentions[1][0, 2].double().numpy()  # (T, T)
    body = {"text": TEXT, "layer": 1, "head": 2, "queries": [9, 4, 9], "keys": [0, 3]}
    mean = c.post("/api/selection", json=body).json()
    np.testing.assert_allclose(mean["from_queries"], P[[4, 9]].mean(0), atol=2e-5)
    np.testing.assert_allclose(mean["to_keys"], P[:, [0, 3]].mean(1), atol=2e-5)
    assert mean["queries"] == [4, 9] and mean["reduce"] == "mean"
    total = c.post("/api/selection", json={**body, "reduce": "sum"}).json()
    np.testing.assert_allclose(total["from_queries"], P[[4, 9]].sum(0), atol=2e-5)
    assert sum(total["from_queries"]) == pytest.approx(2, abs=1e-4)  # two rows of weights, each summing to 1
    none = c.post("/api/selection", json={"text": TEXT, "layer": 1, "head": 2}).json()
    assert none["from_queries"] is None and none["to_keys"] is None
    r = c.post("/api/selection", json={**body, "keys": [0, 999]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "keys", 1]


def test_a_differential_pattern_counts_its_two_parts_against_the_cell_limit(family_dirs):
    """pattern_parts comes with pattern: two more T×T matrices per head, counted before computing."""
    from fastapi.testclient import TestClient

    path = family_dirs["diffllama"]
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1))) as c:
        T = len(attention(c, text=TEXT, include=[], top_k=0)["tokens"])
    heads = 2 * 2  # 2 layers × 2 pairs
    limit = 6 * T * T * heads // 4  # room for the patterns alone (4 T²), not with their parts (12 T²)
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1, max_matrix_cells=limit))) as c:
        r = c.post("/api/attention", json={"text": TEXT, "include": ["pattern"], "top_k": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "include"]
        assert f"{heads * 3 * T * T:,} cells" in r.json()["detail"][0]["msg"]
