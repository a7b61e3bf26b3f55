"""The answer holds what the page draws: each layer's mask, divisor, softcap and window, the
scores softmax sees, and statistics that are null where they have no value.

The oracle is transformers' own eager attention: the model is loaded a second time with an
attention function that calls the family's ``eager_attention_forward`` and records what it was
given (query, key, the additive mask, ``scaling``, ``softcap``, ``sliding_window``) and the
weights it returned. The scores are eager's lines written out on those tensors, and checked
against eager's own weights before they are used.
"""

from __future__ import annotations

import base64
import sys

import numpy as np
import pytest
import torch

from tests.kit.app import attention

pytest.importorskip("transformers")



TEXT = "The cat sat on the mat. Then the dog sat on the log, and the cat saw the dog."
FAMILIES = ["mistral", "gemma2"]


def eager_record(model_dir, ids: list[int]) -> list[dict]:
    """Per layer, what transformers' eager attention was given and what it computed."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    records: list[dict] = []

    def oracle(module, query, key, value, attention_mask, scaling=None, softcap=None, sliding_window=None, **kw):
        eager = sys.modules[type(module).__module__].eager_attention_forward
        kwargs = {"scaling": scaling, **kw}
        if softcap is not None:
            kwargs["softcap"] = softcap
        out, weights = eager(module, query, key, value, attention_mask, **kwargs)
        records.append(
            dict(
                q=query[0],
                k=key[0].repeat_interleave(query.shape[1] // key.shape[1], dim=0),
                mask=attention_mask[0, 0] == 0,  # eager's additive mask: 0 where the key is seen
                scaling=scaling,
                softcap=softcap,
                window=sliding_window,
                weights=weights[0],
            )
        )
        return out, weights

    AttentionInterface.register("truth-oracle", oracle)
    AttentionMaskInterface.register("truth-oracle", eager_mask)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="truth-oracle").eval()
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=False)
    for r in records:  # eager's lines on eager's tensors; they must give eager's weights
        s = (r["q"] @ r["k"].transpose(-1, -2)) * r["scaling"]
        r["uncapped"] = s
        if r["softcap"] is not None:
            s = torch.tanh(s / r["softcap"]) * r["softcap"]
        r["scores"] = s
        p = torch.softmax(s.masked_fill(~r["mask"], float("-inf")), dim=-1)
        torch.testing.assert_close(p, r["weights"], atol=1e-5, rtol=1e-4)
    return records


def as_array(m) -> np.ndarray:
    return np.array(m, dtype=np.float64)  # null -> nan


def decode(x) -> np.ndarray:
    """The README's recipe: a typed array back to numpy."""
    a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
    return a.reshape([int(n) for n in x["shape"].split(",")])


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_holds_its_mask_divisor_softcap_and_window(family, family_dirs, clients):
    data = attention(clients[family], text=TEXT, include=["stats"], top_k=0)
    T = len(data["tokens"])
    records = eager_record(family_dirs[family], data["token_ids"])
    top = np.array(data["mask"], dtype=bool)
    windowed = 0
    for lv, rec in zip(data["layers"], records, strict=True):
        expected = rec["mask"].numpy()
        mask = np.array(lv["mask"], dtype=bool) if "mask" in lv else top
        assert (mask == expected).all(), f"layer {lv['layer']}: the served mask is not eager's"
        assert lv["divisor"] == pytest.approx(1 / rec["scaling"], rel=1e-6)
        assert lv["softcap"] == rec["softcap"]
        assert lv["window"] == rec["window"]
        if rec["window"] is not None and rec["window"] < T:
            # the text is longer than the window: some earlier keys are masked, not only later ones
            before = np.tril(np.ones((T, T), dtype=bool))
            assert (before & ~mask).any()
            windowed += 1
    assert windowed >= 1, "no layer masked by a window shorter than the text"
    if family == "gemma2":
        assert all(lv["divisor"] != pytest.approx(np.sqrt(16)) for lv in data["layers"])  # not √head_dim
        assert {lv["divisor_rule"] for lv in data["layers"]} == {"sqrt(query_pre_attn_scalar)"}
        assert {lv["softcap"] for lv in data["layers"]} == {20.0}
        assert [lv["window"] for lv in data["layers"]] == [6, None]
        assert "mask" in data["layers"][1] or "mask" in data["layers"][0]  # the layers' masks differ
    else:
        assert {lv["divisor_rule"] for lv in data["layers"]} == {"sqrt(head_dim)"}
        assert {lv["window"] for lv in data["layers"]} == {5}
    # a what-if names its own divisor; with the mask off no window is applied
    plain = attention(clients[family], text=TEXT, include=[], scale="none", causal=False, top_k=0)
    assert {(lv["divisor"], lv["divisor_rule"], lv["window"]) for lv in plain["layers"]} == {(1.0, "1", None)}
    assert np.array(plain["mask"]).all() and all("mask" not in lv for lv in plain["layers"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("encoding", ["json", "b64"])
def test_attn_scores_are_what_eager_softmaxes_softcap_included(family, encoding, family_dirs, clients):
    include = ["attn_scores_raw", "attn_scores_uncapped", "attn_scores"]
    data = attention(clients[family], text=TEXT, include=include, top_k=0)
    if encoding == "b64":
        b64 = attention(clients[family], text=TEXT, include=include, top_k=0, encoding="b64")
    records = eager_record(family_dirs[family], data["token_ids"])
    for li, (lv, rec) in enumerate(zip(data["layers"], records, strict=True)):
        mask = rec["mask"].numpy()
        for hv in lv["heads"]:
            h = hv["head"]
            sent = b64["layers"][li]["heads"][h] if encoding == "b64" else hv
            # the step before the softcap comes only from a layer that has one: else it is attn_scores
            assert ("attn_scores_uncapped" in sent) == (rec["softcap"] is not None)
            if "attn_scores_uncapped" not in sent:
                sent = {**sent, "attn_scores_uncapped": sent["attn_scores"]}
            if encoding == "b64":
                got = {name: decode(sent[name]).astype(np.float64) for name in include}
            else:
                got = {name: as_array(sent[name]) for name in include}
            expected = {
                "attn_scores_raw": (rec["q"][h] @ rec["k"][h].T).numpy(),
                "attn_scores_uncapped": rec["uncapped"][h].numpy(),
                "attn_scores": rec["scores"][h].numpy(),
            }
            for name in include:
                assert np.isnan(got[name][~mask]).all(), name  # masked: null
                np.testing.assert_allclose(got[name][mask], expected[name][mask], rtol=1e-4, atol=2e-4, err_msg=name)
            if rec["softcap"] is not None:  # the softcap bends the scores: not raw / divisor
                assert np.abs(got["attn_scores"][mask]).max() <= rec["softcap"]
                bent = np.abs(got["attn_scores"][mask] - got["attn_scores_raw"][mask] / lv["divisor"]).max()
                assert bent > 1e-2  # far beyond the 4-decimal rounding


def one_token_text(client) -> str:
    for text in ("A", "a", "I", "the", "."):
        if len(attention(client, text=text, include=[], top_k=0)["tokens"]) == 1:
            return text
    raise AssertionError("no one-token text found")


@pytest.mark.parametrize("encoding", ["json", "b64"])
def test_a_one_token_text_has_no_variance_ratio(client, encoding, family_dirs, clients):
    for c in (client, clients["mistral"]):
        data = attention(c, text=one_token_text(c), include=["stats"], top_k=0, encoding=encoding)
        assert len(data["tokens"]) == 1
        for lv in data["layers"]:
            for hv in lv["heads"]:
                s = hv["stats"]
                # one score: both variances 0, so their ratio is 0 / 0, which has no value
                assert s["var_scores_raw"] == 0 and s["var_scores"] == 0
                assert s["variance_ratio"] is None
                # everything else is defined: the one key takes all the weight
                assert s["entropy"] == 0 and s["max_weight"] == 1
                assert all(v is not None for k, v in s.items() if k != "variance_ratio")


def test_statistics_hold_the_means_the_variance_figure_draws(clients):
    """mean and variance of the served scores over unmasked entries, as the histogram draws them."""
    data = attention(clients["gemma2"], text=TEXT, include=["attn_scores_raw", "attn_scores", "stats"], top_k=0)
    for lv in data["layers"]:
        for hv in lv["heads"]:
            raw, scores = as_array(hv["attn_scores_raw"]), as_array(hv["attn_scores"])
            raw, scores = raw[~np.isnan(raw)], scores[~np.isnan(scores)]
            s = hv["stats"]
            assert s["mean_scores_raw"] == pytest.approx(raw.mean(), rel=1e-3, abs=1e-3)
            assert s["mean_scores"] == pytest.approx(scores.mean(), rel=1e-3, abs=1e-3)
            assert s["var_scores_raw"] == pytest.approx(raw.var(), rel=1e-3)
            assert s["var_scores"] == pytest.approx(scores.var(), rel=1e-3)
            assert s["variance_ratio"] == pytest.approx(raw.var() / scores.var(), rel=1e-3)


def test_inspect_says_undefined_for_a_one_token_text(client, checkpoint_dir, capsys):
    from attnscope.app.cli.main import main

    text = one_token_text(client)
    assert main(["inspect", text, "--checkpoint", str(checkpoint_dir), "--device", "cpu"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    ratios = [r[6] for r in rows if len(r) == 7]
    assert ratios and set(ratios) == {"undefined"}
