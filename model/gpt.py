"""A GPT-2 style causal transformer whose every attention step can be read out.

Read it top to bottom: the config, one attention layer, the MLP, a block, the model.

Shapes use B = batch, T = tokens, C = n_embd, nh = n_head, hs = head_dim = C // nh.

Attention has two paths that compute the same thing:

* the fast path, ``F.scaled_dot_product_attention``, used for training and for plain
  forward passes;
* the explicit path, used when a ``trace`` sink is passed in: each step is a named tensor
  (``q``, ``k``, ``v``, ``attn_scores_raw``, ``attn_scores``, ``pattern``, ``z``, ``mask``)
  and the layer appends them to the sink as an :class:`AttentionTrace`. A plain ``list``
  keeps every layer; :mod:`model.capture` has sinks that keep only what a view needs.

``AttentionOptions`` lets a caller rerun the model as a what-if (no causal mask, another
divisor) in every layer without touching any module state.

:class:`AttentionTrace` is also what the transformers backend (:mod:`model.hf_backend`)
records for the other families, so everything above the model is written once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F


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


@dataclass(frozen=True)
class AttentionOptions:
    """How every attention layer runs.

    ``causal=False`` removes the mask (an encoder-style what-if); ``divisor`` is the number
    the raw scores are divided by, ``None`` meaning the model's own (``sqrt(head_dim)`` here).
    ``ablate`` switches heads off: :func:`ablate_heads` replaces their output before the
    layer's output projection.
    """

    causal: bool = True
    divisor: float | None = None
    # ablation: these (layer, head) outputs are replaced before the output projection, in every batch row
    ablate: frozenset[tuple[int, int]] = frozenset()
    # per batch row, one more set of heads switched off in that row only (head effects: row i ablates head i)
    ablate_rows: tuple[frozenset[tuple[int, int]], ...] | None = None
    # per layer (nh, hs): what an ablated head's output becomes instead of zeros (mean-ablation)
    ablate_values: tuple[torch.Tensor, ...] | None = None

    def divisor_for(self, default: float) -> float:
        return default if self.divisor is None else float(self.divisor)

    def switched_off(self, layer: int, B: int, nh: int, device) -> torch.Tensor | None:
        """(B, nh, 1, 1) bool, True where head h of this layer is ablated in batch row b; None if none is."""
        off = [h for (lay, h) in self.ablate if lay == layer]
        rows = self.ablate_rows
        if not off and not (rows and any(lay == layer for row in rows for (lay, _) in row)):
            return None
        mask = torch.zeros(B, nh, dtype=torch.bool)
        mask[:, off] = True
        for b, row in enumerate(rows or ()):
            mask[b, [h for (lay, h) in row if lay == layer]] = True
        return mask.to(device)[:, :, None, None]


def ablate_heads(z: torch.Tensor, layer: int, opts: AttentionOptions) -> torch.Tensor:
    """Each head's output ``z`` (B, nh, T, hs) with the switched-off heads replaced: zeros, or
    the mean output ``opts.ablate_values[layer]`` (nh, hs) given. Called right before the output
    projection, so every later layer and the predictions see the change."""
    B, nh = z.shape[0], z.shape[1]
    off = opts.switched_off(layer, B, nh, z.device)  # (B, nh, 1, 1)
    if off is None:
        return z
    if opts.ablate_values is None:
        return z.masked_fill(off, 0.0)
    replacement = opts.ablate_values[layer].to(z.dtype)[None, :, None, :]  # (1, nh, 1, hs)
    return torch.where(off, replacement, z)  # (B, nh, T, hs)


@dataclass
class AttentionTrace:
    """Every step of one layer's attention, each ``(B, nh, T, ·)``; ``mask`` is ``(T, T)``.

    With grouped-query attention ``k`` and ``v`` are already expanded to one per query head.
    ``pattern_unscaled`` is ``None`` when the sink said it does not need it
    (``needs_unscaled = False``): it costs one more T×T softmax per layer.
    """

    q: torch.Tensor  # (B, nh, T, hs)
    k: torch.Tensor  # (B, nh, T, hs)
    v: torch.Tensor  # (B, nh, T, hs)
    attn_scores_raw: torch.Tensor  # (B, nh, T, T)  q @ kᵀ
    attn_scores: torch.Tensor  # (B, nh, T, T)  raw / divisor (then softcapped), -inf where masked
    pattern: torch.Tensor  # (B, nh, T, T)  softmax(attn_scores)
    pattern_unscaled: torch.Tensor | None  # (B, nh, T, T)  the same with divisor 1
    z: torch.Tensor  # (B, nh, T, hs)  pattern @ v
    mask: torch.Tensor  # (T, T) bool, True = may attend
    divisor: float = field(default=1.0)
    softcap: float | None = None  # scores = softcap · tanh(scores / softcap) before the mask (Gemma 2)
    layer: int = 0
    window: int | None = None  # the sliding window the mask applied, in tokens (the query and the W − 1 before it)
    attn_scores_uncapped: torch.Tensor | None = None  # (B, nh, T, T) raw / divisor before the softcap, if any


def needs_unscaled(sink) -> bool:
    """Whether a trace sink wants ``pattern_unscaled`` (a plain list does)."""
    return getattr(sink, "needs_unscaled", True)


@functools.lru_cache(maxsize=2)
def attention_mask(T: int, causal: bool, device: torch.device | str = "cpu") -> torch.Tensor:
    """(T, T) boolean mask, True where query row t may attend to key column s. One tensor for
    every layer of a forward pass (the last two kept for the next request): never written to."""
    full = torch.ones(T, T, dtype=torch.bool, device=device)
    return torch.tril(full) if causal else full


def masked_scores(
    raw: torch.Tensor, m: torch.Tensor, divisor: torch.Tensor | float | None = None, scaling: float | None = None
) -> torch.Tensor:
    """``raw`` (..., t, s) divided by ``divisor`` or multiplied by ``scaling`` (or neither), with
    -inf where the (t, s) mask ``m`` is False: each result bitwise what the scaling then
    ``masked_fill`` gives. On the CPU in one pass, the mask added as a (t, s) bias of 0 and -inf
    (``torch.addcdiv``, ``torch.add(alpha=)``): ``masked_fill`` with a mask broadcast over the
    heads costs 8× a plain pass there (torch 2.13). On a GPU ``masked_fill`` itself, so that a
    score that overflowed to +inf in a masked half-precision cell becomes -inf, not NaN."""
    if raw.device.type == "cpu":
        bias = torch.zeros(m.shape, dtype=raw.dtype, device=raw.device).masked_fill_(~m, float("-inf"))
        if divisor is not None:
            if not isinstance(divisor, torch.Tensor):
                divisor = torch.full((), divisor, dtype=raw.dtype)
            return torch.addcdiv(bias, raw, divisor)  # bias + raw / divisor
        if scaling is not None:
            return torch.add(bias, raw, alpha=scaling)  # bias + scaling · raw
        return raw + bias
    scaled = raw / divisor if divisor is not None else raw * scaling if scaling is not None else raw
    return scaled.masked_fill(~m, float("-inf"))


def wants(sink, layer: int) -> bool:
    """Whether ``sink`` wants this layer's steps: a plain list wants every layer; a sink with a
    ``wants`` method (:class:`model.capture.Capture`) may leave a layer to the fast path."""
    return sink is not None and getattr(sink, "wants", lambda _: True)(layer)


def traced_attention(trace, layer, q, k, v, mask, divisor, steps, causal=True, softcap=None, window=None):
    """The explicit path into ``trace``; returns z ``(B, nh, T, hs)``.

    ``steps(q0, q1, s)`` computes the named steps of query rows ``q0 .. q1`` over the first ``s``
    keys. A plain list gets all rows at once, as one :class:`AttentionTrace`. A *blockwise* sink
    (:class:`model.capture.Capture`) gets them a block of rows at a time (``trace.blocks``) and
    reduces each block as it comes, so no ``(nh, T, S)`` tensor ever exists; with a causal mask a
    block's keys stop at its last query (every later key is masked for all its rows).
    """
    T, S = mask.shape
    if not getattr(trace, "blockwise", False):
        st = steps(0, T, S)
        trace.append(
            AttentionTrace(q=q, k=k, v=v, mask=mask, divisor=divisor, softcap=softcap, layer=layer, window=window, **st)
        )
        return st["z"]
    trace.begin(layer, q, k, v, mask, divisor, softcap, window)
    zs = []
    for q0, q1 in trace.blocks(T, S, q.shape[1]):
        st = steps(q0, q1, min(S, S - T + q1) if causal else S)
        trace.block(q0, q1, st)
        zs.append(st["z"])
    z = torch.cat(zs, dim=2) if len(zs) > 1 else zs[0]  # (B, nh, T, hs)
    trace.end(z)
    return z


class CausalSelfAttention(nn.Module):
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

    def forward(
        self,
        x: torch.Tensor,
        opts: AttentionOptions = AttentionOptions(),
        trace=None,
    ) -> torch.Tensor:
        B, T, C = x.size()
        nh, hs = self.n_head, self.head_dim
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T, C)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        divisor = opts.divisor_for(math.sqrt(hs))

        if not wants(trace, self.layer_idx):
            # fast path: one fused kernel, nothing kept
            z = F.scaled_dot_product_attention(
                q,
                k,
                v,
                dropout_p=self.attn_dropout if self.training else 0.0,
                is_causal=opts.causal,
                scale=1.0 / divisor,
            )  # (B, nh, T, hs)
        else:
            # explicit path: the same computation, one named tensor per step
            mask = attention_mask(T, opts.causal, x.device)  # (T, T)
            unscaled = needs_unscaled(trace)
            # the divisor as a tensor of the model's dtype, as GPT-2's eager attention holds its own
            divisor_t = torch.full((), divisor, dtype=q.dtype, device=q.device)

            def steps(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
                """Query rows q0..q1 (t of them) over the first s keys (all T for a plain list sink)."""
                m = mask[q0:q1, :s]  # (t, s)
                attn_scores_raw = q[:, :, q0:q1] @ k[:, :, :s].transpose(-2, -1)  # (B, nh, t, hs) @ (B, nh, hs, s)
                attn_scores = masked_scores(attn_scores_raw, m, divisor=divisor_t)  # raw / divisor, -inf masked: (B, nh, t, s)
                pattern = F.softmax(attn_scores, dim=-1)  # (B, nh, t, s)
                z = pattern @ v[:, :, :s]  # (B, nh, t, s) @ (B, nh, s, hs) -> (B, nh, t, hs)
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
        nh, hs = self.n_head, self.head_dim
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T_new, C)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)
        k, v = cache.extend(
            self.layer_idx,
            k.view(B, T, nh, hs).transpose(1, 2),  # (B, nh, T_new, hs)
            v.view(B, T, nh, hs).transpose(1, 2),
        )  # (B, nh, S, hs): earlier tokens' keys and values, then the new ones
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)  # new token t sees keys ≤ S − T + t
        scores = (q @ k.transpose(-2, -1)) / opts.divisor_for(math.sqrt(hs))  # (B, nh, T_new, S)
        pattern = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, nh, T_new, S)
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

    def hidden_states(
        self,
        idx: torch.Tensor,
        opts: AttentionOptions = AttentionOptions(),
        trace=None,
    ) -> torch.Tensor:
        """idx (B, T) token ids -> the final LayerNorm's output (B, T, C), what the LM head reads.
        A view that needs only the attention (no predictions) stops here."""
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than the context of {self.config.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)  # (T,)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C) -> (B, T, C)
        x = self.transformer.drop(x)
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
        start = cache.length
        T = idx.size(1)
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than the context of {self.config.block_size}")
        pos = torch.arange(start, start + T, dtype=torch.long, device=idx.device)  # (T_new,)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T_new, C)
        patterns = []
        for block in self.transformer.h:
            x, pattern = block.decode(x, cache, opts)
            patterns.append(pattern)
        return self.lm_head(self.transformer.ln_f(x)), patterns  # (B, T_new, vocab)
