"""Other families through the transformers backend: every number equals transformers' own.

Each family is a tiny random-weight model built in the test (tests/kit/family.py), with query
and key weights scaled up so patterns are far from uniform, and a tokenizer beside it.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.families import Features, deberta  # noqa: E402
from attnscope.model.fields import HEAD_FIELDS, LAYER_DEPENDENT  # noqa: E402
from attnscope.model.inspection import head_stats, inspect  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED, CheckpointError  # noqa: E402
from attnscope.model.ours.gpt import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from tests.kit.family import DIVISOR_RULES, build_all, family_configs, first_softmax, softmaxes  # noqa: E402

FAMILIES = list(family_configs())
TEXT = "The cat sat on the mat. Then the cat 🎉 saw the dog, and the dog sat on the log."


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    return build_all(FAMILIES, tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="module")
def loaded(family_dirs):
    return {name: load_model(path, "cpu") for name, path in family_dirs.items()}


def eager(path, ids):
    ref = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    with torch.no_grad():
        return ref(torch.tensor([ids]), output_attentions=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_pattern_and_logits_equal_eager_output_attentions(family, family_dirs, loaded):
    lm = loaded[family]
    trace = inspect(lm.backend, None, TEXT)
    out = eager(family_dirs[family], trace.token_ids)
    ref = torch.stack([a[0] for a in out.attentions])  # (L, nh, T, T)
    maps = softmaxes(trace)  # the pattern; a differential pair's two softmaxes
    assert maps.shape == ref.shape
    assert (maps - ref).abs().max() <= 1e-5
    assert (trace.logits - out.logits[0]).abs().max() <= 1e-4
    # far from uniform (whose row maximum is 1 / (t + 1)): a wrong mask or scale would show
    T = trace.pattern.shape[-1]
    uniform_max = (1.0 / torch.arange(1, T + 1)).mean()
    assert maps.amax(-1).mean() > 3 * uniform_max


@pytest.mark.parametrize("family", FAMILIES)
def test_every_step_is_what_its_name_says(family, loaded):
    lm = loaded[family]
    tr = inspect(lm.backend, None, TEXT)
    facts = lm.facts
    L, nh, T, hs = tr.q.shape
    assert (L, nh, hs) == (len(facts.attention_layers), facts.n_head, facts.head_dim)
    assert tr.k.shape == tr.q.shape  # one key per query head, grouped-query attention expanded
    assert tr.v.shape == (L, nh, T, facts.v_head_dim)  # MLA: v at its own size
    torch.testing.assert_close(tr.attn_scores_raw, tr.q @ tr.k.transpose(-2, -1), rtol=1e-5, atol=1e-4)
    # rows sum to 1 (with learned sinks: 1 − the sink's share), masked entries exactly 0, the upper triangle masked
    sink_mass = tr.sink_mass if tr.sink_mass is not None else torch.zeros(L, nh, T)
    if facts.differential:  # a pair's first softmax − λ · its second: rows sum to 1 − λ
        sink_mass = torch.tensor([facts.lambdas[n] for n in facts.attention_layers])[:, None, None].expand(L, nh, T)
    torch.testing.assert_close(tr.pattern.sum(-1) + sink_mass, torch.ones(L, nh, T))
    masks = tr.layer_masks[:, None].expand_as(tr.pattern)  # (L, nh, T, T), sliding windows included
    assert (tr.pattern[~masks] == 0).all()
    assert not tr.layer_masks.triu(1).any()
    # the model's own divisor per layer (and softcap) turn raw scores into the scores
    divisors = torch.tensor(tr.layer_divisors)[:, None, None, None]
    scaled = tr.attn_scores_raw / divisors
    if facts.softcap:
        scaled = torch.tanh(scaled / facts.softcap) * facts.softcap
    visible = masks
    torch.testing.assert_close(tr.attn_scores[visible], scaled[visible], rtol=1e-5, atol=1e-5)
    # grouped-query attention: query heads of one group read the same key head
    for h, kv in enumerate(facts.kv_head_of):
        first = facts.kv_head_of.index(kv)
        torch.testing.assert_close(tr.k[:, h], tr.k[:, first])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_record_holds_every_step_its_layers_compute_by_the_field_tables_names(family, loaded):
    lm = loaded[family]
    facts = lm.facts
    tr = inspect(lm.backend, None, TEXT)
    has = {"all": True, "softcap": bool(facts.softcap), "sinks": tr.sink_logit is not None, "mla": facts.score_parts}
    has |= {"gates": facts.output_gates, "differential": facts.differential, "deberta": False}  # no decoder's
    for f in HEAD_FIELDS:
        if f.kind != "stats":
            assert (getattr(tr, f.name) is not None) == has[f.layers], f.name
    visible = tr.layer_masks[:, None].expand_as(tr.pattern)
    if facts.softcap:  # the scores before the cap: capped, they are the scores softmax saw
        capped = torch.tanh(tr.attn_scores_uncapped / facts.softcap) * facts.softcap
        torch.testing.assert_close(capped[visible], tr.attn_scores[visible])
    if facts.score_parts:  # MLA: content + position = raw
        parts = tr.attn_scores_content + tr.attn_scores_position
        torch.testing.assert_close(parts, tr.attn_scores_raw, rtol=1e-5, atol=1e-4)
    with pytest.raises(AttributeError):
        getattr(tr, "no_such_field")  # noqa: B009  (a name outside the table is no field)


def test_what_only_some_layers_compute_is_what_the_features_add():
    everything = Features(softcap=1.0, sink_logit=torch.zeros(1), nope=1, gate=torch.zeros(1), differential=True)
    # DeBERTa's terms come from its own module's steps (model/families/deberta.py), not from a feature
    assert everything.extras == set(LAYER_DEPENDENT) - set(deberta.FIELDS) and Features().extras == set()


@pytest.mark.parametrize("family", FAMILIES)
def test_what_ifs_behave(family, loaded):
    lm = loaded[family]
    trained = inspect(lm.backend, None, TEXT)
    open_ = inspect(lm.backend, None, TEXT, causal=False)
    assert open_.mask.all()
    assert (softmaxes(open_)[..., trained.mask.logical_not()] > 0).any()  # the future is now seen
    # layer 0 has the same q and k whatever the what-if: the first layer's raw scores agree
    torch.testing.assert_close(open_.attn_scores_raw[0], trained.attn_scores_raw[0])
    # dividing by 1 instead of the model's divisor: larger score variance by divisor², peakier rows
    unscaled = inspect(lm.backend, None, TEXT, scale="none")
    assert unscaled.divisor == 1.0
    assert trained.divisor == pytest.approx(lm.facts.divisor)
    torch.testing.assert_close(first_softmax(unscaled)[0], trained.pattern_unscaled[0], rtol=1e-4, atol=1e-5)
    s_trained, s_unscaled = head_stats(trained), head_stats(unscaled)
    assert s_unscaled.max_weight[0].mean() > s_trained.max_weight[0].mean()
    if not lm.facts.softcap:  # each layer's own divisor² (GPT-2's scale_attn_by_inverse_layer_idx: they differ)
        squares = torch.tensor(trained.layer_divisors, dtype=s_trained.variance_ratio.dtype)[:, None] ** 2
        torch.testing.assert_close(
            s_trained.variance_ratio, squares.expand_as(s_trained.variance_ratio), rtol=1e-3, atol=0
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_offsets_tile_the_text(family, loaded):
    tok = loaded[family].tokenizer
    for text in (TEXT, "Hello", "  two  spaces\nand a newline", "naïve café — ok?"):
        enc = tok.encode(text)
        assert len(enc.ids) == len(enc.tokens) == len(enc.offsets)
        pos, pieces = 0, []
        for a, b in enc.offsets:
            assert a <= b and a <= pos  # no gap: each span starts where the text so far ends, or inside
            assert b >= pos or a == b  # and never goes backwards (a shared character at most)
            pieces.append(text[pos:b] if b > pos else "")
            pos = max(pos, b)
        assert "".join(pieces) == text


def test_sentencepiece_tokens_read_as_text(loaded):
    tok = loaded["llama"].tokenizer
    enc = tok.encode("The cat 🎉")
    assert tok.bos_id is not None and enc.ids[0] == tok.bos_id and enc.offsets[0] == (0, 0)
    assert enc.tokens[0] == "<s>"
    assert "␣cat" in enc.tokens  # ▁ shown as a visible space
    assert any(t.startswith("<0x") for t in enc.tokens)  # byte fallback for the emoji, byte by byte
    assert not any("▁" in t for t in enc.tokens)


def test_facts_describe_the_model(loaded):
    llama = loaded["llama"].facts
    assert (llama.n_head, llama.n_kv_head, llama.kv_head_of) == (6, 2, [0, 0, 0, 1, 1, 1])
    assert llama.positions == "rotary" and llama.bos_token == "<s>"
    gemma = loaded["gemma2"].facts
    assert gemma.divisor == pytest.approx(math.sqrt(64)) and gemma.divisor_rule == "sqrt(query_pre_attn_scalar)"
    assert gemma.softcap == 20.0
    gpt2 = loaded["gpt2"].facts
    assert gpt2.family == "gpt2" and gpt2.positions == "learned"
    assert gpt2.divisor_rule.startswith("per layer")  # scale_attn_by_inverse_layer_idx
    assert gemma.sliding_window == [6, None]  # Gemma 2 alternates sliding-window and global layers


# each layer's divisor as its config defines it: GPT-2's scale_attn_by_inverse_layer_idx multiplies
# sqrt(head_dim) by the layer's number (layer 0: sqrt(head_dim) itself), Gemma 2 divides by
# sqrt(query_pre_attn_scalar); every other family here by sqrt(head_dim)
LAYER_RULES = {
    "gpt2": ["sqrt(head_dim)", "sqrt(head_dim) * (layer + 1)"],
    "gemma2": ["sqrt(query_pre_attn_scalar)"] * 2,
    "deepseek_v3": ["sqrt(head_dim) / mscale^2"] * 2,
    # hybrids: no divisor where a layer has no softmax attention
    "qwen3_next": [None, "sqrt(head_dim)", None, "sqrt(head_dim)"],
    "lfm2": [None, "sqrt(head_dim)", None, "sqrt(head_dim)"],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layers_divisor_and_its_rule_follow_the_config(family, family_dirs, loaded):
    lm = loaded[family]
    facts = lm.facts
    cfg = AutoConfig.from_pretrained(family_dirs[family])
    rules = LAYER_RULES.get(family, ["sqrt(head_dim)"] * facts.n_layer)
    assert facts.layer_divisor_rules == rules
    by_config = [DIVISOR_RULES[rule](cfg, layer) if rule else None for layer, rule in enumerate(rules)]
    assert [d is None for d in facts.layer_divisors] == [d is None for d in by_config]
    assert [d for d in facts.layer_divisors if d] == pytest.approx([d for d in by_config if d], rel=1e-6)
    if family == "gpt2":
        assert cfg.scale_attn_by_inverse_layer_idx and by_config[1] == 2 * by_config[0]
    # the divisors a forward pass applies are these, attention layer by attention layer
    assert inspect(lm.backend, None, TEXT).layer_divisors == [facts.layer_divisors[i] for i in facts.attention_layers]
    # the model's one divisor and rule are its first attention layer's, "per layer" when the layers differ
    first = facts.attention_layers[0]
    assert facts.divisor == facts.layer_divisors[first]
    assert facts.divisor_rule == ("per layer: " if family == "gpt2" else "") + rules[first]


def test_learned_sinks_take_their_share_of_every_row_as_the_model_does(family_dirs, loaded):
    """gpt-oss: each head's sink logit is a column of the softmax that is then dropped. The pattern
    is eager's (rows well under 1), the sink's share is what the row lacks, and it is the softmax
    of the sink logit against the row's scores: taken from the model's own parameter."""
    lm = loaded["gpt_oss"]
    tr = inspect(lm.backend, None, TEXT)
    ref = torch.stack([a[0] for a in eager(family_dirs["gpt_oss"], tr.token_ids).attentions])  # (L, nh, T, T)
    assert (tr.pattern - ref).abs().max() <= 1e-5
    sums = ref.sum(-1)
    assert sums.min() < 0.5 and sums.max() > 0.99  # heads from a large share to none
    torch.testing.assert_close(tr.sink_mass, 1 - sums, rtol=0, atol=1e-5)
    model = lm.backend.model
    for layer in range(lm.facts.n_layer):
        logits = model.model.layers[layer].self_attn.sinks.detach()  # (nh,)
        torch.testing.assert_close(tr.sink_logit[layer], logits)
        scores = tr.attn_scores[layer]  # (nh, T, T), -inf where masked
        by_hand = torch.softmax(torch.cat([scores, logits[:, None, None].expand(-1, scores.shape[1], 1)], -1), -1)[
            ..., -1
        ]
        torch.testing.assert_close(tr.sink_mass[layer], by_hand, rtol=0, atol=1e-6)
    # the entropy and the unscaled statistics are those of the whole softmax, the sink's column included
    stats = head_stats(tr)
    p, m = ref.double(), (1 - ref.sum(-1)).double().clamp_min(0)  # eager's key weights and the sink's share
    whole = -(torch.where(p > 0, p * p.log(), 0).sum(-1)) - torch.where(m > 0, m * m.log(), 0)  # (L, nh, T)
    torch.testing.assert_close(stats.row_entropy.double(), whole, rtol=0, atol=2e-4)
    sink_col = torch.stack([model.model.layers[i].self_attn.sinks.detach() for i in range(lm.facts.n_layer)])  # (L, nh)
    raw = tr.attn_scores_raw.masked_fill(~tr.layer_masks[:, None], float("-inf"))  # (L, nh, T, T)
    sinks = sink_col[:, :, None, None].expand(-1, -1, raw.shape[2], 1)  # (L, nh, T, 1)
    unscaled = torch.softmax(torch.cat([raw, sinks], -1).double(), -1)
    h_u = -(torch.where(unscaled > 0, unscaled * unscaled.log(), 0).sum(-1))
    torch.testing.assert_close(stats.row_entropy_unscaled.double(), h_u, rtol=0, atol=2e-4)
    # the what-ifs keep the sink: without the mask the sink still takes its share
    open_ = inspect(lm.backend, None, TEXT, causal=False)
    torch.testing.assert_close(open_.pattern.sum(-1) + open_.sink_mass, torch.ones_like(open_.sink_mass))


def test_the_output_gate_is_the_models_sigmoid_gate_of_each_head_and_query(family_dirs, loaded):
    """Qwen3-Next multiplies each head's output by sigmoid(gate) before o_proj, the gate made by
    q_proj beside the query. The oracle: transformers' eager model with a hook on q_proj."""
    lm = loaded["qwen3_next"]
    assert lm.facts.output_gates and not loaded["llama"].facts.output_gates
    tr = inspect(lm.backend, None, TEXT)
    ref = AutoModelForCausalLM.from_pretrained(family_dirs["qwen3_next"], attn_implementation="eager")
    seen = {}
    for number in lm.facts.attention_layers:
        q_proj = ref.model.layers[number].self_attn.q_proj
        q_proj.register_forward_hook(lambda _m, _i, out, number=number: seen.__setitem__(number, out[0]))
    with torch.no_grad():
        ref(torch.tensor([tr.token_ids]))
    nh, hd, T = lm.facts.n_head, lm.facts.head_dim, len(tr.token_ids)
    for i, number in enumerate(lm.facts.attention_layers):
        gate = torch.sigmoid(seen[number].view(T, nh, 2 * hd)[..., hd:])  # (T, nh, hd): the model's own gate
        torch.testing.assert_close(tr.gate[i], gate.mean(-1).T)  # (nh, T)
    assert 0 < tr.gate.min() and tr.gate.max() < 1 and tr.gate.std() > 0.01  # gates that differ: worth showing
    assert inspect(loaded["llama"].backend, None, TEXT).gate is None
    # concurrent requests (the server runs them in threads) each get their own gates
    from concurrent.futures import ThreadPoolExecutor

    texts = [TEXT, "The cat sat."]
    alone = {t: inspect(lm.backend, None, t).gate for t in texts}
    with ThreadPoolExecutor(4) as pool:
        for text, gate in zip(texts * 20, pool.map(lambda t: inspect(lm.backend, None, t).gate, texts * 20)):
            torch.testing.assert_close(gate, alone[text])


def test_an_encoder_decoder_without_its_tokenizer_says_why(tmp_path):
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    cfg = AutoConfig.for_model("t5", vocab_size=64, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)
    AutoModelForSeq2SeqLM.from_config(cfg).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_model(tmp_path, "cpu")


def test_models_without_softmax_attention_say_why(tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    MambaForCausalLM(MambaConfig(vocab_size=4096, hidden_size=16, num_hidden_layers=1, state_size=4)).save_pretrained(
        tmp_path
    )
    (tmp_path / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    with pytest.raises(CheckpointError, match="softmax attention"):
        load_model(tmp_path, "cpu")


def test_differential_attention_is_each_pairs_two_softmaxes_weighted_by_the_models_lambda(family_dirs, loaded):
    """DiffLlama: a head is a pair of query heads (h, h + nh/2) over the same keys, its map
    softmax₁ − λ · softmax₂ with λ learned per layer. The two softmaxes are eager's weights of those
    two query heads; λ is the module's own; the signed map has negative cells; the model's output
    is eager's (the second attention call per layer runs unrecorded)."""
    lm = loaded["diffllama"]
    facts = lm.facts
    tr = inspect(lm.backend, None, TEXT)
    ref_out = eager(family_dirs["diffllama"], tr.token_ids)
    ref = torch.stack([a[0] for a in ref_out.attentions])  # (L, 2H, T, T)
    H = facts.n_head
    assert facts.differential and ref.shape[1] == 2 * H and tr.pattern.shape[1] == H
    torch.testing.assert_close(tr.pattern_parts[:, :, 0], ref[:, :H], rtol=0, atol=1e-5)
    torch.testing.assert_close(tr.pattern_parts[:, :, 1], ref[:, H:], rtol=0, atol=1e-5)
    model = AutoModelForCausalLM.from_pretrained(family_dirs["diffllama"], attn_implementation="eager")
    for layer in facts.attention_layers:
        a = model.model.layers[layer].self_attn
        lam = (
            ((a.lambda_q1 * a.lambda_k1).sum().exp() - (a.lambda_q2 * a.lambda_k2).sum().exp()).detach()
            + a.lambda_init
        )
        assert facts.lambdas[layer] == pytest.approx(float(lam), abs=1e-6)
        signed = ref[layer, :H] - facts.lambdas[layer] * ref[layer, H:]
        torch.testing.assert_close(tr.pattern[layer], signed, rtol=0, atol=1e-5)
    assert tr.pattern.min() < -0.01  # a signed map: worth a diverging colour scale
    # the steps before the softmax are the pair's first query head's
    torch.testing.assert_close(tr.attn_scores_raw, tr.q @ tr.k.transpose(-2, -1), rtol=1e-5, atol=1e-4)
    # what-ifs: without the mask both softmaxes see the future, the pair stays their signed difference
    open_ = inspect(lm.backend, None, TEXT, causal=False)
    lam = torch.tensor(facts.lambdas)[:, None, None, None]
    torch.testing.assert_close(open_.pattern, open_.pattern_parts[:, :, 0] - lam * open_.pattern_parts[:, :, 1])
    assert (open_.pattern_parts[..., ~tr.mask] > 0).any()
    assert inspect(loaded["llama"].backend, None, TEXT).pattern_parts is None  # other families: no parts


def test_switching_a_differential_pair_off_zeroes_its_output_as_eager_with_a_hook_does(family_dirs, loaded):
    """Pair h switched off writes nothing: the oracle is eager DiffLlama with the pair's columns
    of o_proj's input zeroed (after the group norm each pair has 2·head_dim columns)."""
    from attnscope.model.options import AttentionOptions

    lm = loaded["diffllama"]
    ids = lm.tokenizer.encode(TEXT).ids
    layer, pair, width = 1, 1, 2 * lm.facts.head_dim
    off = lm.backend.last_logits(torch.tensor([ids]), AttentionOptions(ablate=frozenset({(layer, pair)})))[0]
    model = AutoModelForCausalLM.from_pretrained(family_dirs["diffllama"], attn_implementation="eager")

    def zero_pair(_module, args):
        x = args[0].clone()
        x[..., pair * width : (pair + 1) * width] = 0
        return (x,)

    model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero_pair)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(off, ref, rtol=0, atol=1e-4)
    clean = lm.backend.last_logits(torch.tensor([ids]), AttentionOptions())[0]
    assert (off - clean).abs().max() > 1e-3  # the pair mattered


def test_half_precision_needs_a_gpu(family_dirs):
    with pytest.raises(CheckpointError, match="needs a GPU"):
        load_model(family_dirs["llama"], "cpu", dtype="bf16")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_families_on_cuda(family_dirs, dtype):
    lm = load_model(family_dirs["llama"], "cuda", dtype=dtype)
    tr = inspect(lm.backend, None, TEXT)
    assert tr.pattern.device.type == "cuda"
    # the oracle: transformers' eager attention on the same device in the same dtype
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    ref_model = AutoModelForCausalLM.from_pretrained(
        family_dirs["llama"], attn_implementation="eager", dtype=torch_dtype
    )
    with torch.no_grad():
        out = ref_model.to("cuda")(torch.tensor([tr.token_ids], device="cuda"), output_attentions=True)
    ref = torch.stack([a[0] for a in out.attentions]).float().cpu()
    assert (tr.pattern.float().cpu() - ref).abs().max() <= (1e-5 if dtype == "fp32" else 1e-2)
    if dtype == "fp32":  # fp32 on the GPU is fp32 (no TF32): it agrees with the CPU too
        cpu = inspect(load_model(family_dirs["llama"], "cpu").backend, None, TEXT)
        assert (tr.pattern.cpu() - cpu.pattern).abs().max() <= 1e-4
    options = AttentionOptions(causal=False)
    trace: list = []
    lm.backend.run(tr.token_ids, options, trace, logits=False)
    assert trace[0].mask.all()


@pytest.mark.parametrize(("window", "q_offset", "q_length"), [(None, 0, 9), (4, 0, 9), (3, 5, 2), (None, 7, 1)])
def test_the_boolean_mask_is_eagers_mask_before_its_floats(window, q_offset, q_length):
    """attnscope asks transformers for eager's mask as booleans (one byte a cell): the same cells."""
    from attnscope.model.families.attention import boolean_mask
    from transformers.masking_utils import causal_mask_function, eager_mask, sliding_window_causal_mask_function

    fn = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    args = dict(batch_size=1, q_length=q_length, kv_length=q_offset + q_length, q_offset=q_offset, mask_function=fn)
    ours = boolean_mask(**args, dtype=torch.float32)
    theirs = eager_mask(**args, dtype=torch.float32)
    assert ours.dtype == torch.bool and ours.shape == theirs.shape == (1, 1, q_length, q_offset + q_length)
    assert torch.equal(ours, theirs == 0)


# what each layer is (ModelFacts.layers), from the config and from which layers called the attention function
LAYER_TYPES = {
    # value-linear mixers are named by their mixer (model/families/implicit.py mark_mixers)
    "qwen3_next": ["gated_deltanet", "full", "gated_deltanet", "full"],
    "lfm2": ["short_conv", "full", "short_conv", "full"],
    "falcon_h1": ["full", "full"],
    "llama4_text": ["chunked", "nope"],
    "gpt_oss": ["sliding", "full"],
    "gemma2": ["sliding", "full"],
    "llama": ["full"] * 3,
}


@pytest.mark.parametrize("family", list(LAYER_TYPES))
def test_every_layer_is_numbered_and_typed_as_the_model_has_it(family, loaded):
    facts = loaded[family].facts
    assert [layer["index"] for layer in facts.layers] == list(range(facts.n_layer))
    assert [layer["type"] for layer in facts.layers] == LAYER_TYPES[family]
    softmax = [layer["index"] for layer in facts.layers if layer["type"] in ("full", "sliding", "chunked", "nope")]
    assert facts.attention_layers == softmax
    # a forward pass records exactly those layers, under the model's own numbers
    trace: list = []
    loaded[family].backend.run(loaded[family].tokenizer.encode_ids(TEXT), AttentionOptions(), trace, logits=False)
    assert [t.layer for t in trace] == facts.attention_layers
    sizes = {layer["index"]: layer.get("window") or layer.get("chunk") for layer in facts.layers}
    if family in ("gpt_oss", "gemma2"):
        assert sizes[0] == family_configs()[family]["sliding_window"]
    if family == "llama4_text":
        assert sizes[0] == 4 and "floor_scale" in facts.layers[1]["note"]  # NoPE: the query temperature said
    if family == "falcon_h1":
        assert all("Mamba" in layer["note"] for layer in facts.layers)


def test_chunked_attention_sees_only_the_earlier_tokens_of_its_own_chunk(loaded):
    """Llama 4's chunked layers: query i sees key j when j ≤ i and both lie in one chunk of 4
    tokens; its NoPE layer sees every earlier token. Written out here, held to the mask eager used."""
    tr = inspect(loaded["llama4_text"].backend, None, TEXT)
    T = tr.pattern.shape[-1]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    assert torch.equal(tr.layer_masks[0], (j <= i) & (j // 4 == i // 4))
    assert torch.equal(tr.layer_masks[1], j <= i)
    assert (tr.pattern[0][:, ~tr.layer_masks[0]] == 0).all()
