"""Attention rollout: held to the paper's formula written out here in float64 on transformers'
eager ``output_attentions`` (a GPT-2 exported from ours, a Llama with grouped-query attention,
gpt-oss with learned sinks, a hybrid), with and without the residual, and to its invariants."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from dataclasses import replace  # noqa: E402

from attnscope.model.backends import OursBackend  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.ours.gpt import GPT  # noqa: E402
from attnscope.model.ours.gpt2_format import export_hf  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.rollout import rollout_rows  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.family import build_all  # noqa: E402
from tests.model.conftest import randomize  # noqa: E402

TEXT = "The cat sat on the mat. Then the cat saw the dog, and the dog sat on the log."


def paper_rollout(attentions, residual: bool) -> list[torch.Tensor]:
    """Abnar & Zuidema: Â = mean over heads (+ I, rows renormalised, with the residual); R_l = Â_l R_{l-1}."""
    out, R = [], None
    for a in attentions:  # (nh, T, T) per softmax layer
        A = a.double().mean(0)
        if residual:
            A = 0.5 * A + 0.5 * torch.eye(A.shape[0], dtype=torch.float64)
            A = A / A.sum(-1, keepdim=True)
        R = A if R is None else A @ R
        out.append(R)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer, tiny_config):
    root = tmp_path_factory.mktemp("rollout")
    dirs = build_all(["llama", "gpt_oss", "qwen3_next"], root)
    torch.manual_seed(3)
    ours = randomize(GPT(replace(tiny_config, block_size=64)), seed=4).eval()
    dirs["ours"] = export_hf(ours, tokenizer, root / "ours")
    return dirs


@pytest.mark.parametrize("family", ["ours", "llama", "gpt_oss", "qwen3_next"])
@pytest.mark.parametrize("residual", [True, False])
def test_rollout_is_the_papers_product_of_eager_attention(family, residual, models):
    lm = load_model(models[family], "cpu")
    ids = lm.tokenizer.encode_ids(TEXT)
    position = len(ids) - 3
    layers, rows = rollout_rows(lm.backend, ids, position, residual, AttentionOptions())
    assert layers == lm.facts.attention_layers and rows.shape == (len(layers), len(ids))
    ref = AutoModelForCausalLM.from_pretrained(models[family], attn_implementation="eager")
    with torch.no_grad():
        attentions = [a[0] for a in ref(torch.tensor([ids]), output_attentions=True).attentions if a is not None]
    expected = torch.stack([R[position] for R in paper_rollout(attentions, residual)]).float()
    torch.testing.assert_close(rows, expected, rtol=1e-5, atol=1e-6)
    assert (rows[:, position + 1 :] == 0).all()  # causal: nothing flows from later tokens
    if residual or family != "gpt_oss":  # a sink takes its share from every row (rows under 1) unless renormalised
        torch.testing.assert_close(rows.sum(-1), torch.ones(len(layers)), rtol=0, atol=1e-5)
    else:
        assert (rows.sum(-1) < 1 - 1e-3).all()


def test_rollout_follows_the_what_ifs(models):
    lm = load_model(models["ours"], "cpu")
    assert isinstance(lm.backend, OursBackend)  # the export opens in our own GPT again
    ids = lm.tokenizer.encode_ids(TEXT)
    _, causal = rollout_rows(lm.backend, ids, 2, True, AttentionOptions())
    _, open_ = rollout_rows(lm.backend, ids, 2, True, AttentionOptions(causal=False))
    assert (causal[:, 3:] == 0).all() and (open_[:, 3:] > 0).any()  # without the mask later tokens flow in


def test_switched_off_heads_are_left_out_of_the_mean(models):
    """A head switched off writes nothing: its layer's map averages the others; with every head of
    a layer off the layer mixes nothing, and the rollout after it is the one before it."""
    lm = load_model(models["ours"], "cpu")
    ids = lm.tokenizer.encode_ids(TEXT)
    p = len(ids) - 1
    n_head = lm.facts.n_head
    everything_off = AttentionOptions(ablate=frozenset((1, h) for h in range(n_head)))
    _, rows = rollout_rows(lm.backend, ids, p, False, everything_off)
    torch.testing.assert_close(rows[1], rows[0])  # layer 1 mixes nothing
    trace: list = []
    one_off = AttentionOptions(ablate=frozenset({(0, 2)}))
    lm.backend.run(ids, one_off, trace, logits=False)
    _, rows = rollout_rows(lm.backend, ids, p, False, one_off)
    kept = [h for h in range(n_head) if h != 2]
    torch.testing.assert_close(rows[0], trace[0].pattern[0, kept, p].double().mean(0).float(), rtol=1e-5, atol=1e-6)
