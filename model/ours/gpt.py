"""A GPT-2 style causal transformer whose every attention step can be read out.

Read it top to bottom: the config, one attention layer, its key/value cache, the MLP, a block,
the model.

Shapes use B = batch, T = tokens, C = n_embd, nh = n_head, hs = head_dim = C // nh.

Attention has two paths that compute the same thing:

* the fast path, ``F.scaled_dot_product_attention``, used for training and for plain
  forward passes;
* the explicit path, used when a ``trace`` sink is passed in: each step is a named tensor
  (``q``, ``k``, ``v``, ``attn_scores_raw``, ``attn_scores``, ``pattern``, ``z``, ``mask``)
  and :func:`~model.trace.traced_attention` hands them to the sink. A plain ``list`` keeps an
  :class:`~model.trace.AttentionTrace` of every layer; :mod:`model.capture` has sinks that keep
  only what a view needs.

:class:`~model.options.AttentionOptions` lets a caller rerun the model as a what-if (no causal
mask, another divisor, heads switched off) in every layer without touching any module state.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from ..options import AttentionOptions, ablate_heads
from ..trace import attention_mask, head_major, masked_scores, needs_unscaled, traced_attention, wants


@dataclass
class GPTConfig:
    """Architecture hyper-parameters; saved next to every checkpoint as JSON."""

    block_size: int = 256  # context length in tokens
    vocab_size: int = 4096
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    layer_norm_epsilon: float = 1e-5
    name: str = "attnscope"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; with a ``trace`` sink, every step a named tensor."""

    def __init__(self, config: GPTConfig, layer_idx: int = 0):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.layer_idx = layer_idx
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.head_dim = config.head_dim
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # fused q, k, v projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, C) -> q, k, v, each (B, nh, T, hs): one projection, split into heads."""
        B, T, C = x.size()
        nh, hs = self.n_head, self.head_dim
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T, C)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        return q, k, v

    def forward(self, x: torch.Tensor, opts: AttentionOptions = AttentionOptions(), trace=None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C); each layer's steps go to ``trace`` if it wants them."""
        B, T, C = x.size()
        q, k, v = self.heads(x)  # 3 × (B, nh, T, hs)
        divisor = opts.divisor_for(math.sqrt(self.head_dim))

        mask = attention_mask(T, opts.causal, x.device)  # (T, T)
        edited = opts.knocked_mask(self.layer_idx, mask, self.n_head)  # (T, T), or (nh, T, T) with edges knocked out
        if not wants(trace, self.layer_idx):
            # fast path: one fused kernel, nothing kept
            z = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if edited is mask else edited,
                dropout_p=self.attn_dropout if self.training else 0.0,
                is_causal=opts.causal and edited is mask,
                scale=1.0 / divisor,
            )  # (B, nh, T, hs)
        else:
            # explicit path: the same computation, one named tensor per step
            unscaled = needs_unscaled(trace, self.layer_idx)  # only in a layer that keeps it
            # the divisor as a tensor of the model's dtype, as GPT-2's eager attention holds its own
            divisor_t = torch.full((), divisor, dtype=q.dtype, device=q.device)
            kb, vb = head_major(k), head_major(v)  # a block's keys: one matrix per head

            def steps(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
                """Query rows q0..q1 (t of them) over the first s keys (all T for a plain list sink)."""
                m = edited[..., q0:q1, :s]  # (t, s), or (nh, t, s) with edges knocked out
                attn_scores_raw = q[:, :, q0:q1] @ kb[:, :, :s].transpose(-2, -1)  # (B, nh, t, hs) @ (B, nh, hs, s)
                # raw / divisor, -inf where masked
                attn_scores = masked_scores(attn_scores_raw, m, divisor=divisor_t)  # (B, nh, t, s)
                pattern = F.softmax(attn_scores, dim=-1)  # (B, nh, t, s)
                z = pattern @ vb[:, :, :s]  # (B, nh, t, s) @ (B, nh, s, hs) -> (B, nh, t, hs)
                pattern_unscaled = None
                if unscaled:
                    pattern_unscaled = F.softmax(masked_scores(attn_scores_raw, m), dim=-1)  # (B, nh, t, s)
                return dict(
                    attn_scores_raw=attn_scores_raw,
                    attn_scores=attn_scores,
                    pattern=pattern,
                    pattern_unscaled=pattern_unscaled,
                    z=z,
                )

            z = traced_attention(trace, self.layer_idx, q, k, v, mask, divisor, steps, causal=opts.causal)

        z = ablate_heads(z, self.layer_idx, opts)  # (B, nh, T, hs), switched-off heads replaced
        y = z.transpose(1, 2).contiguous().view(B, T, C)  # (B, nh, T, hs) -> (B, T, C): heads side by side
        return self.resid_dropout(self.c_proj(y))

    def decode(self, x: torch.Tensor, cache: KVCache, opts: AttentionOptions = AttentionOptions()):
        """Generation: ``x`` (B, T_new, C) holds only the new tokens; the keys and values of the
        tokens before them come from ``cache`` (and the new ones are appended to it), so a step
        costs one token's work. Returns the output (B, T_new, C) and the pattern rows
        (B, nh, T_new, S) of the new tokens over all S tokens so far. Always causal."""
        B, T, C = x.size()
        q, k, v = self.heads(x)  # 3 × (B, nh, T_new, hs)
        k, v = cache.extend(self.layer_idx, k, v)  # (B, nh, S, hs): earlier tokens' keys and values, then the new ones
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)  # new token t sees keys ≤ S − T + t
        attn_scores_raw = q @ k.transpose(-2, -1)  # (B, nh, T_new, S)
        attn_scores = attn_scores_raw / opts.divisor_for(math.sqrt(self.head_dim))  # (B, nh, T_new, S)
        pattern = F.softmax(attn_scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, nh, T_new, S)
        z = ablate_heads(pattern @ v, self.layer_idx, opts)  # (B, nh, T_new, hs)
        y = z.transpose(1, 2).contiguous().view(B, T, C)  # (B, T_new, C)
        return self.c_proj(y), pattern


@dataclass
class KVCache:
    """Keys and values of every token seen so far, one ``(B, nh, S, hs)`` pair per layer."""

    k: list[torch.Tensor | None]
    v: list[torch.Tensor | None]

    @classmethod
    def empty(cls, n_layer: int) -> KVCache:
        return cls([None] * n_layer, [None] * n_layer)

    @property
    def length(self) -> int:
        """S: how many tokens the cache holds."""
        return 0 if self.k[0] is None else int(self.k[0].shape[2])

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' keys and values (B, nh, T_new, hs); returns all of them (B, nh, S, hs)."""
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.c_fc(x), approximate="tanh")  # GPT-2's "gelu_new"
        return self.dropout(self.c_proj(x))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig, layer_idx: int = 0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x, opts: AttentionOptions = AttentionOptions(), trace=None):
        x = x + self.attn(self.ln_1(x), opts, trace)
        x = x + self.mlp(self.ln_2(x))
        return x

    def decode(self, x, cache: KVCache, opts: AttentionOptions = AttentionOptions()):
        """:meth:`forward` for the new tokens only, with the cache; also returns their pattern rows."""
        a, pattern = self.attn.decode(self.ln_1(x), cache, opts)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, pattern


def sinusoidal_positions(n_pos: int, dim: int) -> torch.Tensor:
    """(n_pos, dim) sine/cosine table of "Attention Is All You Need"."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]  # (n_pos, 1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (dim/2,)
    table = torch.zeros(n_pos, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2's scaled init of residual projections
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        # Learned positions, started from a small sinusoid: still a plain GPT-2 wpe table,
        # but position is readable from the first step, which helps previous-token heads form.
        with torch.no_grad():
            self.transformer.wpe.weight.copy_(0.1 * sinusoidal_positions(config.block_size, config.n_embd))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """idx (B, T) token ids at positions ``start .. start + T - 1`` -> token plus position
        embeddings (B, T, C), the residual stream entering the first block."""
        T = idx.size(1)
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than the context of {self.config.block_size}")
        pos = torch.arange(start, start + T, dtype=torch.long, device=idx.device)  # (T,)
        return self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C) -> (B, T, C)

    def hidden_states(self, idx: torch.Tensor, opts: AttentionOptions = AttentionOptions(), trace=None) -> torch.Tensor:
        """idx (B, T) token ids -> the final LayerNorm's output (B, T, C), what the LM head reads.
        A view that needs only the attention (no predictions) stops here."""
        x = self.transformer.drop(self.embed(idx))  # (B, T, C)
        for block in self.transformer.h:
            x = block(x, opts, trace)
        return self.transformer.ln_f(x)  # (B, T, C)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        opts: AttentionOptions = AttentionOptions(),
        trace=None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids -> logits (B, T, vocab), and the mean cross-entropy if targets given."""
        x = self.hidden_states(idx, opts, trace)  # (B, T, C)
        logits = self.lm_head(x)  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def decode(
        self, idx: torch.Tensor, cache: KVCache, opts: AttentionOptions = AttentionOptions()
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Generation with a cache: ``idx`` (B, T_new) the tokens after the ``cache.length`` already
        seen (all of the prompt at first, then one token a step) -> logits (B, T_new, vocab) and
        each layer's pattern rows (B, nh, T_new, S)."""
        x = self.embed(idx, start=cache.length)  # (B, T_new, C)
        patterns = []
        for block in self.transformer.h:
            x, pattern = block.decode(x, cache, opts)
            patterns.append(pattern)
        return self.lm_head(self.transformer.ln_f(x)), patterns  # (B, T_new, vocab)
