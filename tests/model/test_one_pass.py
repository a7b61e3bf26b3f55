"""The grid's pass over each block (issue 47): its statistics, taken beside the thumbnail and without the
unscaled softmax, equal the statistics taken alone on every family's tiny model, less the unscaled
softmax's; its thumbnail is the max-pool of the pattern the same pass kept, filled a few rows at a time
or all at once; the maxima over runs of keys (max_pool1d for short runs) are torch's max-pool."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnscope.model.capture import Capture, CapturePlan
from attnscope.model.ours.gpt import AttentionOptions
from attnscope.model.pooling import Pool, thumbnail_block, thumbnails
from attnscope.model.stats import POOL_BELOW, STAT_ROWS, STAT_SCALARS, group_max
from torch.nn import functional as F

pytest.importorskip("transformers")

from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.family import build, family_configs  # noqa: E402

FAMILIES = list(family_configs())
TEXT = "The cat sat on the mat. Then the cat saw the dog, and the dog sat on the log by the door of the house."
UNSCALED = ("entropy_unscaled", "max_weight_unscaled", "row_entropy_unscaled")
BUDGETS = [3000, 1 << 40]  # a few rows a block (blocks that start inside a thumbnail row), and one block


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-pass")
    return {name: load_model(build(name, root / name), "cpu") for name in FAMILIES}


def run(lm, ids, **plan) -> Capture:
    facts = lm.backend.facts
    cap = Capture(CapturePlan(layers=list(range(facts.n_layer)), heads=list(range(facts.n_head)), **plan))
    lm.backend.hidden(ids, AttentionOptions(), cap)
    cap.finish()
    return cap


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_grids_statistics_equal_the_separate_passes(family, budget, loaded):
    """Every statistic equals the one taken alone, the unscaled ones left out where not asked for, and
    the thumbnail is the max-pool of the pattern the same pass kept."""
    lm = loaded[family]
    ids = lm.tokenizer.encode_ids(TEXT)
    common = dict(stats=True, budget_bytes=budget)
    one = run(lm, ids, **common, thumbnail=8, stats_unscaled=False, fields=frozenset({"pattern"}))
    alone = run(lm, ids, **common)
    assert len(one.layers) == len(alone.layers) > 0
    for lo, la in zip(one.layers, alone.layers):
        assert set(la.stats) - set(lo.stats) == set(UNSCALED)
        for name in set(STAT_SCALARS + STAT_ROWS) - set(UNSCALED):
            np.testing.assert_array_equal(lo.stats[name], la.stats[name], err_msg=f"{family} {name}")
        shown = torch.from_numpy(lo.fields["pattern"])
        if "pattern_parts" in lo.fields:  # a differential pair's thumbnail is of |pattern|
            shown = shown.abs()
        assert np.array_equal(lo.thumbnail, thumbnails(shown.clamp(0, 1), 8).numpy())


@pytest.mark.parametrize("s", [1, 9, 130, 257])
@pytest.mark.parametrize("k", [2, 3, 5, POOL_BELOW - 1, POOL_BELOW, 100])
def test_the_maxima_of_runs_of_keys_are_a_max_pool_by_either_kernel(s, k):
    x = torch.randn(3, 6, s, generator=torch.Generator().manual_seed(s * 7 + k))
    assert torch.equal(group_max(x, k), F.max_pool2d(x, (1, k), ceil_mode=True))
    strided = x.transpose(1, 2)  # not contiguous: as the pool's rows are grouped
    assert torch.equal(group_max(strided, k), F.max_pool2d(strided, (1, k), ceil_mode=True))


@pytest.mark.parametrize("rows", [1, 3, 5, 8, 37])
@pytest.mark.parametrize("T,n", [(37, 8), (64, 64), (100, 6)])
def test_a_pool_filled_a_few_rows_at_a_time_is_the_max_pool_of_the_whole(T, n, rows):
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = torch.randn(2, T, T, generator=torch.Generator().manual_seed(T + rows)).masked_fill(~causal, -torch.inf)
    x = x.softmax(-1)  # 0 after each query, as a causal pattern
    k = thumbnail_block(T, n)
    pool = Pool(2, T, T, k, "cpu")
    for q0 in range(0, T, rows):
        q1 = min(T, q0 + rows)
        pool.add(x[:, q0:q1, :q1], q0)  # causal blocks: keys up to the last query
    expected = F.max_pool2d(x, k, ceil_mode=True) if k > 1 else x
    assert torch.equal(pool.acc, expected)


class _Seen(Capture):
    """A capture that notes which layers' steps held the unscaled softmax."""

    def __init__(self, plan):
        super().__init__(plan)
        self.unscaled_in: set[int] = set()

    def block(self, q0, q1, steps):
        if steps.get("pattern_unscaled") is not None:
            self.unscaled_in.add(self._layer.layer)
        super().block(q0, q1, steps)


def only_where_kept(lm, layer: int, head: int) -> None:
    """The unscaled softmax is built in the focus layer alone (the attention layers before it only feed it),
    and its numbers are those of the same layer captured with every layer asking for it."""
    ids = lm.tokenizer.encode_ids(TEXT)
    focus = dict(focus=(layer, head), focus_fields=frozenset({"pattern_unscaled"}))
    one = _Seen(CapturePlan(layers=[], heads=[], **focus))
    every = _Seen(CapturePlan(layers=list(range(layer + 1)), heads=[head], fields=frozenset({"pattern_unscaled"})))
    for cap in (one, every):
        lm.backend.hidden(ids, AttentionOptions(), cap)
        cap.finish()
    attention = [c.layer for c in every.layers]  # a hybrid's mixer layers have no softmax
    assert one.unscaled_in == {layer} and every.unscaled_in == set(attention) and attention[-1] == layer
    assert np.array_equal(one.focus["pattern_unscaled"], every.layers[-1].fields["pattern_unscaled"][0])


def test_the_unscaled_softmax_is_built_only_in_the_layer_that_keeps_it():
    """Our GPT, at a middle layer of the shipped model."""
    from attnscope.model.ours.checkpoint import SHIPPED

    lm = load_model(SHIPPED, "cpu")
    only_where_kept(lm, lm.facts.n_layer - 2, 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_transformers_family_builds_the_unscaled_softmax_only_where_kept(family, loaded):
    """Every decoder family through transformers' attention hook: the last layer's, none before it."""
    lm = loaded[family]
    only_where_kept(lm, lm.backend.facts.n_layer - 1, 0)


@pytest.mark.parametrize("family", ["bert", "deberta-v2"])
def test_an_encoder_builds_the_unscaled_softmax_only_where_kept(family, tmp_path):
    """Encoders too: BERT through the hook, DeBERTa through its own attention module."""
    from tests.kit.encoders import build_encoder

    lm = load_model(build_encoder(family, tmp_path / family), "cpu")
    only_where_kept(lm, lm.backend.facts.n_layer - 1, 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_layers_after_the_kept_one_run_sdpas_causal_kernel_where_the_mask_is_the_triangle(
    family, loaded, monkeypatch
):
    """Where a layer's mask is the causal triangle and nothing else, the fast path asks SDPA for its causal
    kernel (no mask tensor), and what the LM head reads is bitwise what SDPA with the mask gives."""
    from attnscope.model.families import attention

    lm = loaded[family]
    ids = lm.tokenizer.encode_ids(TEXT)
    real, kinds = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        kinds.append(kwargs.get("attn_mask") is None and kwargs.get("is_causal", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    fast = lm.backend.hidden(ids, AttentionOptions(), Capture(CapturePlan(layers=[0], heads=[0])))
    causal = list(kinds)
    monkeypatch.setattr(attention._Recording, "causal_only", lambda self, mask: False)
    masked = lm.backend.hidden(ids, AttentionOptions(), Capture(CapturePlan(layers=[0], heads=[0])))
    assert torch.equal(fast, masked)
    if family in ("llama", "qwen2", "gpt_neox"):  # every layer full causal attention
        assert causal and all(causal)
