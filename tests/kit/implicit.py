"""Tiny hybrid configs for the implicit-attention tests (model and route): transformers config
arguments of each mixer's family, without ``model_type`` and ``vocab_size`` (each test sets its own)."""

from __future__ import annotations

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
