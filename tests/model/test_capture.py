"""The blockwise capture: a layer computed a block of query rows at a time keeps the numbers of
the whole layer at once, and those of transformers' eager attention, for every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnscope.model.backends import OursBackend
from attnscope.model.capture import Capture, CapturePlan
from attnscope.model.ours.gpt import GPT, AttentionOptions, GPTConfig
from attnscope.model.pooling import thumbnail_block
from attnscope.model.stats import STAT_ROWS, STAT_SCALARS
from torch.nn import functional as F

pytest.importorskip("transformers")

from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.family import build, family_configs  # noqa: E402

FAMILIES = list(family_configs())
TEXT = "The cat sat on the mat. Then the cat 🎉 saw the dog, and the dog sat on the log by the door."
FIELDS = frozenset({"pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled"})
SMALL_BUDGET = 1  # one query row per block: the most blocks there can be
WHOLE = 1 << 40  # every row in one block


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("capture-families")
    return {name: (load_model(build(name, root / name), "cpu"), root / name) for name in FAMILIES}


def capture(backend, ids, budget, opts=AttentionOptions(), **sel) -> Capture:
    facts = backend.facts
    selection = dict(layers=list(range(facts.n_layer)), heads=list(range(facts.n_head)), budget_bytes=budget)
    cap = Capture(CapturePlan(**{**selection, **sel}))
    backend.hidden(ids, opts, cap)
    cap.finish()
    return cap


def eager_patterns(path, ids) -> np.ndarray:
    ref = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).numpy()  # (L, nh, T, T)


def softmax_maps(fields: dict[str, np.ndarray]) -> np.ndarray:
    """(nh, T, T) a layer's softmaxes as eager returns them: the pattern, or a differential layer's
    two parts (query heads h and h + nh/2)."""
    parts = fields.get("pattern_parts")  # (H, 2, T, T)
    return fields["pattern"] if parts is None else np.concatenate([parts[:, 0], parts[:, 1]])


@pytest.mark.parametrize("family", FAMILIES)
def test_blocks_equal_the_whole_layer_and_eager_attention(family, loaded):
    lm, path = loaded[family]
    ids = lm.tokenizer.encode_ids(TEXT)
    T = len(ids)
    kw = dict(fields=FIELDS, stats=True, thumbnail=8)
    blocks = capture(lm.backend, ids, SMALL_BUDGET, **kw)
    whole = capture(lm.backend, ids, WHOLE, **kw)
    assert set(blocks.blocks_per_layer) == {T} and set(whole.blocks_per_layer) == {1}
    ref = eager_patterns(path, ids)
    for layer, (lb, lw) in enumerate(zip(blocks.layers, whole.layers)):
        assert np.abs(softmax_maps(lb.fields) - ref[layer]).max() <= 1e-5
        assert np.abs(softmax_maps(lw.fields) - ref[layer]).max() <= 1e-5
        assert np.abs(lb.fields["pattern"] - lw.fields["pattern"]).max() <= 1e-5
        # the rest up to float32 rounding: a q·k sum of large terms (q/k weights ×12) summed in another
        # order by a one-row product, and the unscaled softmax, 4-5× steeper, amplifying it
        for name in FIELDS - {"pattern"}:
            scale = max(1.0, float(np.nanmax(np.abs(lw.fields[name]))))
            np.testing.assert_allclose(lb.fields[name], lw.fields[name], rtol=1e-4, atol=1e-5 * scale, equal_nan=True)
        assert np.array_equal(np.isnan(lb.fields["attn_scores"]), ~lb.mask[None].repeat(lm.facts.n_head, 0))
        assert np.abs(lb.thumbnail.astype(int) - lw.thumbnail.astype(int)).max() <= 1
        for name in (*STAT_SCALARS, *STAT_ROWS):
            np.testing.assert_allclose(lb.stats[name], lw.stats[name], rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_focus_thumbnail_is_a_max_pool_of_its_pattern_and_a_region_is_that_block(family, loaded):
    lm, path = loaded[family]
    ids = lm.tokenizer.encode_ids(TEXT)
    T = len(ids)
    layer, head, n = 1, 2, 6
    region = (5, 17, 2, 11)
    focus = dict(focus=(layer, head), focus_fields=frozenset({"pattern", "attn_scores_raw"}))
    cap = capture(lm.backend, ids, 3000, layers=[], **focus, focus_thumbnail=n, focus_region=region)
    pattern = torch.from_numpy(eager_patterns(path, ids)[layer, head])  # (T, T)
    k = thumbnail_block(T, n)
    expected = F.max_pool2d(pattern[None], k, ceil_mode=True)[0].numpy()
    assert cap.focus_pooled["pattern"].shape == expected.shape
    assert np.abs(cap.focus_pooled["pattern"] - expected).max() <= 1e-5
    q0, q1, k0, k1 = region
    assert np.abs(cap.focus_region["pattern"] - pattern[q0:q1, k0:k1].numpy()).max() <= 1e-5
    # the scores of the region: NaN exactly where the focus layer's mask hides the key
    assert np.array_equal(np.isnan(cap.focus_region["attn_scores_raw"]), ~cap.focus_mask[q0:q1, k0:k1])
    # a pooled score block is the largest unmasked score in it, NaN where all of it is masked
    whole = capture(lm.backend, ids, WHOLE, layers=[], **focus)
    raw = torch.from_numpy(whole.focus["attn_scores_raw"]).nan_to_num(nan=float("-inf"))
    pooled = F.max_pool2d(raw[None], k, ceil_mode=True)[0]
    expected_raw = pooled.masked_fill(torch.isneginf(pooled), float("nan")).numpy()
    np.testing.assert_allclose(cap.focus_pooled["attn_scores_raw"], expected_raw, rtol=1e-5, equal_nan=True)


def test_layers_after_the_last_one_asked_for_run_the_fast_path(loaded):
    lm, _ = loaded["qwen2"]
    ids = lm.tokenizer.encode_ids(TEXT)
    cap = capture(lm.backend, ids, WHOLE, layers=[0], stats=True)
    assert len(cap.blocks_per_layer) == 1  # layer 1 never reached the sink


def test_a_long_text_never_builds_a_whole_layer():
    """4,100 tokens on a small model: blocks of rows under the budget, numbers equal to the whole layer's."""
    torch.manual_seed(0)
    T = 4100
    model = GPT(GPTConfig(block_size=T, vocab_size=64, n_layer=2, n_head=2, n_embd=16))
    with torch.no_grad():
        model.transformer.h[1].attn.c_attn.weight.mul_(8)  # peaky patterns in layer 1
    backend = OursBackend(model, None, torch.device("cpu"))
    ids = torch.randint(0, 64, (T,)).tolist()
    budget = 24 << 20
    sel = dict(layers=[1], heads=[0, 1], stats=True, thumbnail=64, budget_bytes=budget)
    focus = dict(
        focus=(1, 1), focus_fields=frozenset({"pattern"}), focus_thumbnail=256, focus_region=(4000, 4100, 3900, 4100)
    )
    cap = Capture(CapturePlan(**sel, **focus))
    backend.hidden(ids, AttentionOptions(), cap)
    cap.finish()
    rows = budget // (2 * T * 4 * 8)
    assert cap.blocks_per_layer == [-(-T // rows)] * 2 and cap.blocks_per_layer[0] > 10
    (lc,) = cap.layers
    m = -(-T // thumbnail_block(T, 256))  # 242 cells of 17 tokens: at most 256
    assert lc.thumbnail.shape == (2, 64, 64) and cap.focus_pooled["pattern"].shape == (m, m)
    assert "pattern" not in cap.focus  # pooled and a region, never T×T
    # the oracle: the same layer computed whole by the explicit path into a plain list
    trace: list = []
    backend.hidden(ids, AttentionOptions(), trace)
    pattern = trace[1].pattern[0]  # (nh, T, T)
    k = thumbnail_block(T, 64)
    expected = (F.max_pool2d(pattern, k, ceil_mode=True) * 255).round().to(torch.uint8).numpy()
    assert np.abs(lc.thumbnail.astype(int) - expected.astype(int)).max() <= 1
    assert np.abs(cap.focus_region["pattern"] - pattern[1, 4000:4100, 3900:4100].numpy()).max() <= 1e-6
    rows_entropy = -(pattern * pattern.clamp_min(1e-30).log()).sum(-1).numpy()  # (nh, T)
    np.testing.assert_allclose(lc.stats["row_entropy"], rows_entropy, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("budget", [SMALL_BUDGET, WHOLE])
def test_a_differential_heads_pooled_focus_keeps_its_negative_cells(loaded, budget):
    """DiffLlama's pattern is signed: asked max-pooled at one token a cell (block 1, as the page
    asks a short text), the focus is the exact signed map, never a max taken from 0; pooled
    coarser, it is the block maxima of |pattern|."""
    lm, _ = loaded["diffllama"]
    ids = lm.tokenizer.encode_ids(TEXT)
    T = len(ids)
    focus = dict(focus=(1, 0), focus_fields=frozenset({"pattern"}))
    exact = capture(lm.backend, ids, WHOLE, layers=[], **focus).focus["pattern"]  # (T, T)
    assert exact.min() < -0.01
    cell = capture(lm.backend, ids, budget, layers=[], **focus, focus_thumbnail=T)
    np.testing.assert_allclose(cell.focus_pooled["pattern"], exact, atol=1e-5)  # blocks: another summation order
    parts = cell.focus_pooled["pattern_parts"]  # (2, T, T): the pair's two softmaxes, beside it
    np.testing.assert_allclose(exact, parts[0] - lm.facts.lambdas[1] * parts[1], atol=1e-5)
    n = 6
    coarse = capture(lm.backend, ids, budget, layers=[], **focus, focus_thumbnail=n).focus_pooled["pattern"]
    expected = F.max_pool2d(torch.from_numpy(np.abs(exact))[None], thumbnail_block(T, n), ceil_mode=True)[0].numpy()
    np.testing.assert_allclose(coarse, expected, atol=1e-5)


def test_a_gpu_block_takes_an_eighth_of_the_free_memory_up_to_a_cap(monkeypatch):
    """Blocks on a GPU are as large as its free memory allows (fewer launches); the CPU keeps its own budget."""
    from attnscope.model.blocks import BLOCK_BUDGET_BYTES, GPU_BUDGET_MAX_BYTES, block_budget

    gib = 1 << 30
    assert block_budget(torch.device("cpu")) == BLOCK_BUDGET_BYTES
    for free, expected in [(80 * gib, GPU_BUDGET_MAX_BYTES), (8 * gib, gib), (256 << 20, BLOCK_BUDGET_BYTES)]:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, free=free: (free, 80 * gib))
        assert block_budget(torch.device("cuda")) == expected
        assert block_budget(torch.device("cuda"), cpu_bytes=7) == max(7, min(GPU_BUDGET_MAX_BYTES, free // 8))


@pytest.mark.parametrize("T,S,nh,budget", [(1, 1, 1, 1), (100, 100, 4, 1 << 16), (4097, 4200, 9, 96 << 20)])
def test_query_blocks_cover_the_rows_once_within_the_budget(T, S, nh, budget):
    from attnscope.model.blocks import BLOCK_TEMPORARIES, query_blocks

    blocks = query_blocks(T, S, nh, budget)
    assert blocks[0][0] == 0 and blocks[-1][1] == T
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    rows = max(q1 - q0 for q0, q1 in blocks)
    assert rows == 1 or nh * rows * S * 4 * BLOCK_TEMPORARIES <= budget


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_layer_is_one_block_and_equals_eager(loaded):
    lm, path = loaded["llama"]
    cuda = load_model(path, "cuda")
    ids = lm.tokenizer.encode_ids(TEXT)
    kw = dict(fields=frozenset({"pattern"}), stats=True, thumbnail=8)
    cap = capture(cuda.backend, ids, None, **kw)
    rows = capture(cuda.backend, ids, SMALL_BUDGET, **kw)
    assert set(cap.blocks_per_layer) == {1} and set(rows.blocks_per_layer) == {len(ids)}
    ref = eager_patterns(path, ids)
    for layer, (lc, lr) in enumerate(zip(cap.layers, rows.layers)):
        assert np.abs(lc.fields["pattern"] - ref[layer]).max() <= 1e-5
        assert np.abs(lc.fields["pattern"] - lr.fields["pattern"]).max() <= 1e-5
