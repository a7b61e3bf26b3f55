"""Activation patching: a clean and a corrupt text of as many tokens; a piece of the clean run written
into the corrupt run, and the share of the logit difference it brings back.

``token_id`` is by default the clean run's top guess after ``position``, ``foil_id`` the corrupt run's best
guess other than ``token_id``. With ``diff = logit(token_id) − logit(foil_id)`` after ``position``, each entry is
``(patched − corrupt_diff) / (clean_diff − corrupt_diff)``: 1 where the piece restores the clean
difference, 0 where it changes nothing. The pieces:

* ``heads``: one head's output (its pattern applied to v, before the output projection) at every
  position, from the clean run: the ablation machinery with the clean run's outputs as the values
  (:func:`model.options.ablate_heads`), every head of a layer a row of one batch and, with our GPT,
  each row starting from the corrupt residual stream entering that layer;
* ``residual``: the residual stream after one block at one position (a tap on the block's output,
  :mod:`.lens`), every (block, position) a row; with our GPT a row starts after that block.

Attention is causal: only the tokens up to ``position`` are run, and a position after it restores nothing (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..ablation import resumes, rows_per_batch
from ..backends import Backend
from ..options import AttentionOptions
from ..precision import exact_fp32
from ..trace import AttentionTrace
from .lens import Tap, Unsupported, residual_stream, tapping


class PatchingError(ValueError):
    """A request patching cannot answer; ``field`` names the input at fault."""

    def __init__(self, field: str, msg: str):
        super().__init__(msg)
        self.field = field


@dataclass
class Patching:
    position: int
    token_id: int
    foil_id: int
    clean_diff: float
    corrupt_diff: float
    restored: torch.Tensor  # heads: (attention layers, nh); residual: (L, T) over every token of the texts
    clean_top: list[int] = field(default_factory=list)  # each run's top guesses at position, best first
    corrupt_top: list[int] = field(default_factory=list)


GUESSES = 5  # the top guesses of each run an answer holds: what a page offers as the token and the foil


class HeadOutputs(dict):
    """A trace sink keeping each attention layer's per-head output ``(nh, T, hs)`` by layer number."""

    needs_unscaled = False

    def append(self, trace: AttentionTrace) -> None:
        self[trace.layer] = trace.z[0]


class PatchTap(Tap):
    """Row b of the batch gets the clean residual stream after block ``layers[b]`` at ``positions[b]``."""

    def __init__(self, layers: list[int], positions: list[int], clean: torch.Tensor):
        super().__init__()
        self.layers, self.positions, self.clean = layers, positions, clean  # clean (L + 1, T, C)

    def patch(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        rows = [b for b, lay in enumerate(self.layers) if lay == layer]
        if not rows:
            return x
        at = [self.positions[b] for b in rows]
        x = x.clone()
        x[rows, at] = self.clean[layer + 1, at].to(x.dtype)
        return x


@torch.inference_mode()
@exact_fp32()
def patching(
    backend: Backend,
    clean: list[int],
    corrupt: list[int],
    position: int,
    token_id: int | None = None,
    foil_id: int | None = None,
    what: str = "heads",
    clean_backend: Backend | None = None,
) -> Patching:
    """Every head (``what="heads"``) or every (block, position) of the residual stream (``"residual"``) patched;
    ``clean_backend`` runs the clean pieces where it is not ``backend`` (an encoder-decoder: the clean source
    bound, ``backend`` the corrupt one, ``clean`` and ``corrupt`` the same target)."""
    facts = backend.facts
    clean_backend = backend if clean_backend is None else clean_backend
    if what == "heads" and (facts.differential or facts.output_gates):
        feature = "differential attention" if facts.differential else "output gates"
        raise Unsupported(
            f"{feature}: a head's output before o_proj is not what attention hands on; patch the residual"
        )
    T = position + 1
    co = torch.tensor([corrupt[:T]], dtype=torch.long)  # (1, T)
    clean_logits = clean_backend.last_logits(torch.tensor([clean[:T]]), AttentionOptions())[0].double()
    corrupt_logits = backend.last_logits(co, AttentionOptions())[0].double()
    token_id = int(clean_logits.argmax()) if token_id is None else int(token_id)
    if foil_id is None:  # the corrupt run's best guess other than the token (its top guess, unless that is the token)
        others = corrupt_logits.clone()
        others[token_id] = float("-inf")
        foil_id = int(others.argmax())
    foil_id = int(foil_id)
    if token_id == foil_id:
        raise PatchingError("foil_id", f"foil_id is token_id ({token_id}): the difference of a logit with itself is 0")
    clean_diff = float(clean_logits[token_id] - clean_logits[foil_id])
    corrupt_diff = float(corrupt_logits[token_id] - corrupt_logits[foil_id])
    if clean_diff == corrupt_diff:
        raise PatchingError("corrupt", "the clean and corrupt runs give the same logit difference: nothing to restore")

    def restored(logits: torch.Tensor) -> torch.Tensor:  # (n, V) -> (n,) float64 on the CPU
        diff = logits[:, token_id].double() - logits[:, foil_id].double()
        return ((diff - corrupt_diff) / (clean_diff - corrupt_diff)).cpu()

    per = rows_per_batch(T, facts.n_head, facts.d_model)
    if what == "heads":
        out = _heads(backend, clean_backend, clean[:T], co, per, restored)
    else:
        out = torch.zeros(facts.n_layer, len(corrupt), dtype=torch.float64)
        out[:, :T] = _residual(backend, clean_backend, clean[:T], co, per, restored)
    k = min(GUESSES, clean_logits.shape[-1])
    tops = [torch.topk(logits, k).indices.tolist() for logits in (clean_logits, corrupt_logits)]
    return Patching(position, token_id, foil_id, clean_diff, corrupt_diff, out, *tops)


def _heads(backend: Backend, clean_backend: Backend, clean: list[int], co: torch.Tensor, per: int, restored):
    """(attention layers, nh): each head's clean output written into the corrupt run, one row per head."""
    facts = backend.facts
    z = HeadOutputs()
    clean_backend.run(clean, AttentionOptions(), z, logits=False)
    base = AttentionOptions(ablate_values=tuple(z.get(layer) for layer in range(facts.n_layer)))
    out = torch.zeros(len(facts.attention_layers), facts.n_head, dtype=torch.float64)
    row_of = {layer: i for i, layer in enumerate(facts.attention_layers)}
    heads = [(layer, h) for layer in facts.attention_layers for h in range(facts.n_head)]
    starts = backend.block_inputs(co, base) if resumes(backend) else None
    if starts is None:  # any heads in a chunk: whole passes
        chunks = [heads[i : i + per] for i in range(0, len(heads), per)]
    else:  # ours: a chunk holds heads of one layer and starts from the corrupt stream entering it
        nh = facts.n_head
        chunks = [
            [(lay, h) for h in range(h0, min(nh, h0 + per))]
            for lay in facts.attention_layers
            for h0 in range(0, nh, per)
        ]
    for chunk in chunks:
        opts = replace(base, ablate_rows=tuple(frozenset({lh}) for lh in chunk))
        if starts is None:
            logits = backend.last_logits(co.expand(len(chunk), -1), opts)  # (n, V)
        else:
            logits = backend.last_logits_from(chunk[0][0], starts[chunk[0][0]].expand(len(chunk), -1, -1), opts)
        for (layer, h), value in zip(chunk, restored(logits)):
            out[row_of[layer], h] = value
    return out


def _residual(backend: Backend, clean_backend: Backend, clean: list[int], co: torch.Tensor, per: int, restored):
    """(L, T): the clean residual stream after block l at position p written into the corrupt run, one row each."""
    L, T = backend.facts.n_layer, co.shape[1]
    stream = residual_stream(clean_backend, clean)  # (L + 1, T, C)
    rows = [(layer, p) for layer in range(L) for p in range(T)]
    out = torch.zeros(L, T, dtype=torch.float64)
    if resumes(backend):
        # ours: a row starts from the corrupt stream after its block, the clean position written in
        corrupt = residual_stream(backend, co[0].tolist())
        for layer in range(L):
            for p0 in range(0, T, per):
                ps = list(range(p0, min(T, p0 + per)))
                x = corrupt[layer + 1].expand(len(ps), -1, -1).clone()  # (n, T, C)
                x[range(len(ps)), ps] = stream[layer + 1, ps]
                out[layer, ps] = restored(backend.last_logits_from(layer + 1, x, AttentionOptions()))
        return out
    for i in range(0, len(rows), per):
        chunk = rows[i : i + per]
        tap = PatchTap([lay for lay, _ in chunk], [p for _, p in chunk], stream)
        with tapping(backend, tap):
            logits = backend.last_logits(co.expand(len(chunk), -1), AttentionOptions())
        for (layer, p), value in zip(chunk, restored(logits)):
            out[layer, p] = value
    return out
