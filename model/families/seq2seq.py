"""Encoder-decoders (T5, BART and their kin): three attention stacks, a source and a target.

A folder whose config says ``is_encoder_decoder`` is opened with transformers'
``AutoModelForSeq2SeqLM`` and ``attn_implementation="attnscope"``: T5 / Flan-T5 / mT5 / UMT5,
BART / mBART / Marian / Pegasus and T5Gemma call transformers' AttentionInterface in each of their
three kinds of attention module, so every call is recorded by
:func:`~model.families.attention.attnscope_attention` as eager computes it. The same ``layer_idx``
names an encoder layer, a decoder layer and that decoder layer's cross-attention, so the calls are
told apart by module: :class:`Places` maps each attention module to its stack (``encoder``:
source × source; ``decoder``: target × target, causal; ``cross``: target queries over source keys)
and its layer in that stack, once, in the order of the first pass. A pass records one stack
(:func:`~model.families.attention.stacked`): its calls go to the sink and take the what-ifs (a
divisor, ablated heads, knocked-out edges); the other stacks run as trained.

T5 adds a learned bias per head and relative position to the scores and does not divide q·kᵀ by
√d_k (``scaling=1.0``: T5 folds the 1/√d_k into the initialisation of its query weights), so its
divisor is 1. T5Gemma 2 merges the decoder's self and cross keys into one softmax: each row is shown as
two exact key blocks, the decoder stack's and the cross stack's (:mod:`model.families.merged`).

:class:`Seq2SeqBackend` works on both sides; a request's subject binds a source and a target to it
(:meth:`Seq2SeqBackend.with_target`, :class:`~model.families.target.TargetBound`), and the model
code then runs it as it runs a decoder. A subclass for another encoder-decoder (Whisper's speech)
overrides:

* :meth:`Seq2SeqBackend.source_input` and :meth:`Seq2SeqBackend.encode`: what the encoder reads for a
  source and the source through the encoder (Whisper: input features, not ids);
* :meth:`Seq2SeqBackend.decoder_start`: the ids the target starts with (Whisper: its task tokens);
* :meth:`Seq2SeqBackend.write`: the model's own greedy target for a source (``generate``);
* :meth:`Seq2SeqBackend.head`: the decoder's hidden state to logits, where a family adds a step;
* :meth:`Seq2SeqBackend.read_target`: a typed target's ids after the start, and their character ranges.

Every pass goes through :meth:`Seq2SeqBackend._pass` (a request's, :meth:`~Seq2SeqBackend.run_pair`) and
generation through :meth:`~Seq2SeqBackend.step_pair`; a subclass keeps them and :class:`Places`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from ..options import AttentionOptions
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer, tile_offsets
from ..precision import exact_fp32
from .attention import recording, stacked, watch_merged
from .backend import TransformersBackend, _Discard, _Probe, _Rows, load_transformers_dir
from .merged import BLOCKS, is_merged

STACKS = ("encoder", "decoder", "cross")
SIDES = {"encoder": ("source", "source"), "decoder": ("target", "target"), "cross": ("target", "source")}
CROSS_NAMES = ("encoder_attn", "EncDecAttention", "cross_attn")  # a decoder layer's cross-attention module
# encoder-decoders transformers runs in a way attnscope does not record exactly (none at present)
UNRECORDED: dict[str, str] = {}
MAX_NEW_TOKENS = 32  # a target written by the model: at most this many tokens, as generate()'s default


def is_seq2seq(cfg: dict) -> bool:
    """Whether a ``config.json`` (as a dict) is an encoder-decoder's."""
    return bool(cfg.get("is_encoder_decoder"))


def check_seq2seq(cfg: dict, path: Path) -> None:
    """:class:`CheckpointError` in one line for an encoder-decoder attnscope cannot record exactly."""
    kind = str(cfg.get("model_type") or "")
    if kind in UNRECORDED:
        raise CheckpointError(f"{path.name} is {UNRECORDED[kind]}")


class Places:
    """Each attention module's stack (by where it sits: the encoder; the decoder, its cross-attention by
    name) and its layer in that stack (numbered in the order of the first pass)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.stacks: dict[int, str] = {}
        self.merged = {id(m) for m in model.get_decoder().modules() if is_merged(m)}  # T5Gemma 2: decoder and cross
        for _, m in model.get_encoder().named_modules():
            self.stacks[id(m)] = "encoder"
        for name, m in model.get_decoder().named_modules():
            self.stacks[id(m)] = "cross" if name.rsplit(".", 1)[-1] in CROSS_NAMES else "decoder"
        self.layers: dict[int, int] = {}
        self.counts: Counter = Counter()

    def stack_of(self, module: torch.nn.Module) -> str:
        return self.stacks.get(id(module), "decoder")

    def in_stack(self, module: torch.nn.Module, stack: str) -> bool:
        """Whether ``module``'s call is (a part of) ``stack``'s layer: a merged module's is the decoder's and the
        cross stack's (:mod:`model.families.merged`), numbered as its decoder layer in both."""
        return self.stack_of(module) == stack or (id(module) in self.merged and stack in BLOCKS)

    def layer_of(self, module: torch.nn.Module) -> int:
        key = id(module)
        if key not in self.layers:
            stack = self.stack_of(module)
            self.layers[key] = self.counts[stack]
            self.counts[stack] += 1
        return self.layers[key]


class Seq2SeqBackend(TransformersBackend):
    """A transformers ``AutoModelForSeq2SeqLM`` with every attention call recorded into its stack."""

    architecture = "encoder-decoder"
    auto_class = "AutoModelForSeq2SeqLM"

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, device: torch.device, name: str):
        self.places = Places(model)
        watch_merged(model)  # T5Gemma 2: each merged call's source length
        self.start_ids = [int(model.config.decoder_start_token_id)]
        super().__init__(model, tokenizer, device, name)  # probes the decoder stack (run_ids)
        self.family = self.facts.family = str(model.config.model_type)  # T5Gemma's, not its decoder module's
        self.facts.stacks = [self._probe_stack(stack) for stack in STACKS]
        self.facts.positions = "relative" if self.family in ("t5", "mt5", "umt5") else self.facts.positions
        n = max(s["n_layer"] for s in self.facts.stacks)
        if n > self.facts.n_layer:  # an encoder deeper than the decoder: the per-layer facts cover it too
            extra = n - self.facts.n_layer
            self.facts.layer_divisors += [self.facts.layer_divisors[-1]] * extra
            self.facts.layer_divisor_rules += [self.facts.layer_divisor_rules[-1]] * extra
            self.facts.layers += [dict(self.facts.layers[-1], index=i) for i in range(self.facts.n_layer, n)]
            self.facts.n_layer = n
            self.facts.attention_layers = list(range(n))

    def _probe_stack(self, stack: str) -> dict:
        """One short pass recording ``stack``: its layers and heads, with its sides."""
        probe = _Probe()
        ids = self.tokenizer.encode_ids("The cat sat on the mat.")[:4] or [0]
        self._pass(ids, self.start_ids + ids[:3], stack, probe, AttentionOptions())
        query, key = SIDES[stack]
        merged = stack in BLOCKS and bool(self.places.merged)  # T5Gemma 2: one softmax over both stacks' keys
        return dict(
            name=stack, n_layer=len(probe), n_head=int(probe[0].q.shape[1]), query=query, key=key, merged_softmax=merged
        )

    @classmethod
    def tokenizer_of(cls, path: Path, cfg) -> BPETokenizer:
        """The folder's tokenizer.json adding its own special tokens to a source (T5's ``</s>``, BART's
        ``<s> … </s>``), as ``AutoTokenizer(text)`` does."""
        return BPETokenizer.load(path / "tokenizer.json", specials=True)

    # ------------------------------------------------------------ what a subclass overrides

    def source_input(self, source: list[int], rows: int = 1) -> torch.Tensor:
        """What :meth:`encode` reads for ``source`` (the answer's ``source_ids``), ``rows`` copies: here the ids
        ``(rows, S)``; Whisper: its input features, the source's ids standing for its frames."""
        return torch.tensor([source], dtype=torch.long, device=self.device).expand(rows, -1)

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        """:meth:`source_input`'s tensor ``(B, S)`` -> the encoder's last hidden state ``(B, S, C)``."""
        return self.model.get_encoder()(input_ids=source).last_hidden_state

    def decoder_start(self) -> list[int]:
        """The ids every target starts with: the model's decoder start token."""
        return list(self.start_ids)

    @torch.inference_mode()
    def write(self, source: list[int], max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
        """The model's own target for ``source``, written greedily: ``generate(do_sample=False)``'s ids,
        the decoder start first."""
        out = self.model.generate(
            input_ids=self.source_input(source), do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
            decoder_input_ids=torch.tensor([self.decoder_start()], device=self.device),
        )
        return out[0].tolist()

    def read_target(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """A target typed as text -> its ids after :meth:`decoder_start` (teacher-forced as written, no end
        token added) and each one's character range in ``text`` (the start's: empty)."""
        enc = self.tokenizer.tk.encode(text, add_special_tokens=False)
        start = self.decoder_start()
        return start + list(enc.ids), [(0, 0)] * len(start) + tile_offsets(enc.offsets, len(text))

    def logit_scale(self) -> float:
        """What the decoder's state is multiplied by before the LM head: ``d_model**-0.5`` where T5 ties its
        embeddings, else 1."""
        cfg = self.model.config
        if (self.family == "t5" and getattr(cfg, "scale_decoder_outputs", False)) or (
            self.family == "umt5" and cfg.tie_word_embeddings
        ):
            return cfg.d_model**-0.5
        return 1.0

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(n, C) decoder states -> logits (n, V), with the steps each family takes around its LM head."""
        if self.logit_scale() != 1.0:
            h = h * self.logit_scale()  # T5 with tied embeddings rescales before its LM head
        logits = self.model.get_output_embeddings()(h)
        bias = getattr(self.model, "final_logits_bias", None)  # BART and its kin
        if bias is not None:
            logits = logits + bias[0]
        cap = getattr(self.model.get_decoder().config, "final_logit_softcapping", None)  # T5Gemma
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def residual_blocks(self) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
        """The decoder's layers in order and its norm before the LM head (an identity where there is none:
        BART's and Marian's layers end in their own norm), for the lens over the decoder's residual stream."""
        dec = self.model.get_decoder()
        blocks = dec.block if hasattr(dec, "block") else dec.layers  # T5's "block"
        found = (getattr(dec, n, None) for n in ("final_layer_norm", "layer_norm", "norm"))
        return blocks, next((m for m in found if isinstance(m, torch.nn.Module)), torch.nn.Identity())

    # ------------------------------------------------------------ passes

    def decode(self, target: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        """Target ids ``(B, T)`` over the encoder's states ``(B, S, C)`` -> the decoder's last hidden state."""
        out = self.model.get_decoder()(input_ids=target, encoder_hidden_states=encoded, use_cache=False)
        return out.last_hidden_state

    @torch.inference_mode()
    def _pass(self, source: list[int], target: list[int], stack: str, sink, opts, rows: int = 1) -> torch.Tensor:
        """Source and target through the model, ``stack``'s calls into ``sink`` (None: kept nowhere) with
        ``opts`` (None: no recording of its own, the caller's); the decoder's states ``(rows, T, C)``."""
        src = self.source_input(source, rows)
        tgt = torch.tensor([target], dtype=torch.long, device=self.device).expand(rows, -1)
        if opts is None:
            with stacked(self.places, stack):
                return self.decode(tgt, self.encode(src))
        with recording(sink if sink is not None else _Discard(), opts), stacked(self.places, stack):
            return self.decode(tgt, self.encode(src))

    def run_ids(self, ids: list[int], logits: bool) -> torch.Tensor | None:
        """The load-time probe: ``ids`` as the source, the decoder start and its first three as the target,
        the decoder stack recorded by the caller's recording."""
        h = self._pass(ids, self.decoder_start() + ids[:3], "decoder", None, None)[0]
        return self.head(h) if logits else None

    @torch.inference_mode()
    @exact_fp32()
    def run_pair(self, source: list[int], target: list[int], stack: str, opts, sink, rows: int = 1) -> torch.Tensor:
        """One recorded pass (``rows`` copies, for a batch of what-ifs): the decoder's states ``(rows, T, C)``."""
        return self._pass(source, target, stack, sink, opts, rows)

    @torch.inference_mode()
    @exact_fp32()
    def patterns(self, idx: torch.Tensor, stack: str = "decoder") -> torch.Tensor:
        """Token ids ``(B, T)`` as both source and target -> ``stack``'s patterns ``(B, L, nh, T, T)`` on the CPU
        (the head roles of /api/heads: the decoder's self-attention, over the same tokens; the atlas: any stack)."""
        trace: list = []
        idx = idx.to(self.device)
        with recording(trace, AttentionOptions()), stacked(self.places, stack):
            encoded = self.encode(idx)
            if stack != "encoder":
                self.decode(idx, encoded)
        return torch.stack([t.pattern for t in trace], dim=1).float().cpu()

    def start_generation(self) -> dict:
        """What :meth:`step_pair` carries from one step to the next: the encoder's states (made at the first
        step) and transformers' cache of the decoder's own keys and of the cross keys."""
        from transformers import DynamicCache, EncoderDecoderCache

        # the cross keys: every source position in every layer (a config's sliding layers would keep only the last
        # few, as T5Gemma 2's would), as transformers' own decoders make it
        cache = EncoderDecoderCache(DynamicCache(config=self.model.config), DynamicCache())
        return {"cache": cache, "encoded": None}

    @torch.inference_mode()
    @exact_fp32()
    def step_pair(self, source: list[int], ids: list[int], state: dict, opts) -> tuple[torch.Tensor, list, list]:
        """Generation: the target tokens after those in ``state``'s cache -> the logits after the last one
        ``(V,)``, each decoder layer's row of that token over the target so far ``(nh, T)`` and each cross
        layer's row over the source ``(nh, S)`` (the what-ifs ``opts`` in the decoder stack)."""
        if state["encoded"] is None:
            src = self.source_input(source)
            with stacked(self.places, "encoder"):
                state["encoded"] = self.encode(src)
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)
        rows, cross = _Rows(), _Rows()
        with recording(rows, opts), stacked(self.places, "decoder", {"cross": cross}):
            out = self.model.get_decoder()(
                input_ids=idx, encoder_hidden_states=state["encoded"], past_key_values=state["cache"], use_cache=True
            )
        return self.head(out.last_hidden_state[0, -1:])[0].float(), list(rows), list(cross)

    def with_target(self, source: list[int], target: list[int], stack: str):
        """This backend with one source and target bound, looking at ``stack``
        (:class:`~model.families.target.TargetBound`)."""
        from .target import TargetBound

        return TargetBound(self, source, target, stack)


def load_seq2seq_dir(path: Path, device: torch.device, dtype: str = "fp32", placement=None) -> Seq2SeqBackend:
    """Open a local encoder-decoder folder offline as :class:`Seq2SeqBackend`; :class:`CheckpointError` on
    anything it cannot show."""
    from ..ours.checkpoint import read_config

    check_seq2seq(read_config(path), path)
    return load_transformers_dir(path, device, dtype, placement, kind=Seq2SeqBackend)
