"""Tiny hybrid configs for the implicit-attention tests (model and route): transformers config
arguments of each mixer's family, without ``model_type`` and ``vocab_size`` (each test sets its own)."""

from __future__ import annotations

import torch

BAMBA = dict(
    num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
    attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8,
    mamba_chunk_size=8, mamba_expand=2,
)
JAMBA = dict(
    num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
    attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, num_experts=2,
    num_experts_per_tok=1, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False,
)
MINIMAX = dict(
    num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    intermediate_size=64, block_size=8, num_local_experts=2, num_experts_per_tok=1,
    layer_types=["linear_attention", "full_attention"],
)
KIMI = dict(
    hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=4,
    qk_nope_head_dim=8, v_head_dim=8, moe_intermediate_size=16, intermediate_size=64, num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "dense"],
    linear_attn_config={"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 4}, pad_token_id=0,
)


@torch.no_grad()
def expected_hybrid_attribution(path, ids: list[int], position: int, token_id: int) -> dict:
    """A hybrid's direct attribution recomputed from a separate transformers load with hooks: ``heads``
    (softmax layers, nh) from each head's slice of ``o_proj``'s input, ``mixers`` (layer -> the mixer module's
    output), ``mlps`` (the feed-forward's output), ``embed``; each through the final RMSNorm at its scale on the
    text (written out) and dotted with the LM head's row; and ``logit``, transformers' own."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    seen: dict = {"z": {}, "mixer": {}, "mlp": {}}

    def keep(kind, layer):
        return lambda m, a, out: seen[kind].__setitem__(layer, (out[0] if isinstance(out, tuple) else out)[0])

    handles = [model.model.embed_tokens.register_forward_hook(lambda m, a, out: seen.__setitem__("embed", out[0]))]
    for i, block in enumerate(model.model.layers):
        if hasattr(block, "self_attn"):
            proj = block.self_attn.o_proj
            handles.append(proj.register_forward_pre_hook(lambda m, a, i=i: seen["z"].__setitem__(i, a[0][0])))
        else:
            handles.append(block.mamba.register_forward_hook(keep("mixer", i)))
        handles.append(block.feed_forward.register_forward_hook(keep("mlp", i)))
    norm = model.model.final_layernorm
    handles.append(norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("final", a[0][0])))
    logits = model(torch.tensor([ids[: position + 1]])).logits[0, position]
    for handle in handles:
        handle.remove()
    x = seen["final"][position].double()
    scale = norm.weight.double() * torch.rsqrt(x.pow(2).mean() + norm.variance_epsilon)
    direction = scale * model.get_output_embeddings().weight[token_id].double()
    heads = []
    for i, z in sorted(seen["z"].items()):
        w = model.model.layers[i].self_attn.o_proj.weight.double()  # (C, nh · hs)
        nh = model.config.num_attention_heads
        zh, wh = z[position].double().view(nh, -1), w.view(w.shape[0], nh, -1)
        heads.append(torch.stack([(wh[:, h] @ zh[h]) @ direction for h in range(nh)]))
    return {
        "heads": torch.stack(heads),
        "mixers": {i: float(out[position].double() @ direction) for i, out in seen["mixer"].items()},
        "mlps": torch.stack([seen["mlp"][i][position].double() @ direction for i in range(len(model.model.layers))]),
        "embed": float(seen["embed"][position].double() @ direction),
        "logit": float(logits[token_id]),
    }
