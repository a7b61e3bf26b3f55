"""A request checked against the loaded model: what the schema cannot judge (token counts, layer
and head indices). Each check raises an :class:`~attnscope.app.errors.ApiError` (422) naming the
field, the value and the limit."""

from __future__ import annotations

from collections.abc import Sequence

from ...model.backends import ModelFacts
from ..errors import ApiError
from ..service import Service


def check_token_count(
    n_tokens: int,
    facts: ModelFacts,
    offsets: Sequence[Sequence[int]] | None = None,
    kinds: Sequence[str] | None = None,
) -> None:
    """The text has at least one token and fits the model's context. Refused for its length, the
    answer says where the part that fits ends when the tokens' character ``offsets`` are given
    (``fits_chars``: the text's first ``limit`` tokens are its first ``fits_chars`` characters).
    With an image (``kinds``, the prompt's token kinds) only the text's own tokens can be cut: the
    image, its markers and the template's tokens stay, and when they alone are over the context the
    refusal names ``image``."""
    if n_tokens == 0:
        raise ApiError(422, "text has no tokens", loc=("body", "text"), type_="text_no_tokens")
    if n_tokens > facts.block_size and kinds is not None and offsets is not None:
        _check_image_prompt(n_tokens, facts.block_size, offsets, kinds)
    if n_tokens > facts.block_size:
        ctx = {"limit": facts.block_size, "count": n_tokens}
        if offsets is not None:
            ctx["fits_chars"] = offsets[facts.block_size - 1][1]
        raise ApiError(
            422,
            f"text is {n_tokens} tokens; the model's context is {facts.block_size} tokens",
            loc=("body", "text"),
            type_="too_many_tokens",
            ctx=ctx,
        )


def _check_image_prompt(n_tokens: int, limit: int, offsets: Sequence[Sequence[int]], kinds: Sequence[str]) -> None:
    """An image prompt over the context: refused naming ``image`` when what is not the text already
    fills it, else naming ``text`` with where the text's part that fits ends."""
    text = [i for i, (kind, (a, b)) in enumerate(zip(kinds, offsets)) if kind == "text" and b > a]
    keep = limit - (n_tokens - len(text))  # the text's tokens that fit beside everything else
    ctx = {"limit": limit, "count": n_tokens}
    if keep <= 0:
        raise ApiError(
            422,
            f"the image takes {n_tokens - len(text)} tokens with its markers and the template, and the model's "
            f"context is {limit} tokens: it does not fit, whatever the text",
            loc=("body", "image"),
            type_="too_many_tokens",
            ctx=ctx,
        )
    raise ApiError(
        422,
        f"text and image are {n_tokens} tokens; the model's context is {limit} tokens "
        f"(the text's first {keep} tokens fit beside the image)",
        loc=("body", "text"),
        type_="too_many_tokens",
        ctx=ctx | {"fits_chars": offsets[text[keep - 1]][1]},
    )


def check_index(value: int, n: int, loc: Sequence[str | int], name: str, what: str) -> None:
    """``value`` is below ``n``; else a 422 "``name`` is value; ``what`` (0 to n - 1)"."""
    if value >= n:
        raise ApiError(
            422,
            f"{name} is {value}; {what} (0 to {n - 1})",
            loc=loc,
            type_="index_out_of_range",
            ctx={"limit": n - 1, "value": value},
        )


def check_position(value: int, n: int, loc: Sequence[str | int], name: str) -> None:
    """``value`` is a position of the text's ``n`` tokens: every route that takes a query, key or
    position index refuses it with the same words and the same inclusive range, 0 to n - 1."""
    check_index(value, n, loc, name, f"the text has {n} tokens")


def check_span(value: int | list[int], n: int, loc: Sequence[str | int], name: str) -> tuple[int, int]:
    """A position or a half-open range [a, b] of the text's ``n`` tokens as (a, b): a position as
    :func:`check_position` says; a range with a < b, a from 0 to n - 1 and b from a + 1 to n."""
    if isinstance(value, int):
        check_position(value, n, loc, name)
        return value, value + 1
    a, b = value
    if not a < b <= n:
        raise ApiError(
            422,
            f"{name} is {value}; a range [a, b] is half-open (positions a to b - 1): a < b, "
            f"and the text has {n} tokens (a from 0 to {n - 1}, b from a + 1 to {n})",
            loc=loc,
            type_="index_out_of_range",
            ctx={"limit": n - 1, "value": value},
        )
    return a, b


def indices(values: list[int] | None, n: int, name: str, unit: str) -> list[int]:
    """The request's list of layers or heads, checked, sorted, without repeats; all ``n`` if absent."""
    if values is None:
        return list(range(n))
    for i, v in enumerate(values):
        check_index(v, n, ("body", name, i), f"{name}[{i}]", f"the model has {n} {unit}")
    return sorted(set(values))


# what a refusal adds for a value-linear mixer's layer
IMPLICIT_NOTE = "; its implicit attention M comes from POST /api/attention with the layer named in layers"


def check_attention_layer(layer: int, loc: Sequence[str | int], name: str, facts: ModelFacts) -> None:
    """``layer`` is one of the model's layers and has softmax attention (a hybrid's other layers
    have no heads to draw); else a 422 naming the field, the layer's type and the attention layers."""
    check_index(layer, facts.n_layer, loc, name, f"the model has {facts.n_layer} layers")
    if layer not in facts.attention_layers:
        kind = facts.layers[layer]["type"]
        shown = ", ".join(map(str, facts.attention_layers))
        raise ApiError(
            422,
            f"{name} is {layer}: a {kind} layer, without softmax attention, so it has no heads to draw here "
            f"(this model's attention layers: {shown}){IMPLICIT_NOTE if facts.layers[layer].get('implicit') else ''}",
            loc=loc,
            type_="not_an_attention_layer",
            ctx={"value": layer, "attention_layers": facts.attention_layers},
        )


def layer_indices(values: list[int] | None, facts: ModelFacts) -> list[int]:
    """The request's ``layers``, each an attention layer, sorted, without repeats; every attention layer if absent."""
    if values is None:
        return list(facts.attention_layers)
    for i, v in enumerate(values):
        check_attention_layer(v, ("body", "layers", i), f"layers[{i}]", facts)
    return sorted(set(values))


def check_head(layer: int, head: int, loc: tuple[str | int, ...], facts: ModelFacts) -> None:
    """A ``{"layer", "head"}`` at ``loc`` names a head the model has."""
    name = ".".join(str(part) for part in loc[1:])
    check_attention_layer(layer, (*loc, "layer"), f"{name}.layer", facts)
    check_index(head, facts.n_head, (*loc, "head"), f"{name}.head", f"the model has {facts.n_head} heads per layer")


def ablate_set(heads, facts: ModelFacts) -> frozenset[tuple[int, int]]:
    """The request's ``ablate`` list checked against the model: a set of (layer, head), or a 422 naming the entry."""
    for i, ref in enumerate(heads):
        about = facts.layers[ref.layer] if 0 <= ref.layer < facts.n_layer else {}
        if about.get("implicit"):  # an implicit head: its slice of the scan's output switched off
            check_implicit_head(ref.layer, ref.head, ("body", "ablate", i), about)
        else:
            check_head(ref.layer, ref.head, ("body", "ablate", i), facts)
    return frozenset((ref.layer, ref.head) for ref in heads)


def check_implicit_head(layer: int, head: int, loc: tuple[str | int, ...], about: dict) -> None:
    """A head of a value-linear layer that can be switched off: one M per head (not per channel), head in range."""
    if about["type"] in ("mamba1", "short_conv"):
        raise ApiError(
            422,
            f"layer {layer} is a {about['type']} layer: its M is one per channel, no head to switch off",
            loc=loc,
            type_="per_channel_mixer",
        )
    check_index(head, about["heads"], (*loc, "head"), f"{'.'.join(map(str, loc[1:]))}.head", "its implicit heads")


def prompt_ids(svc: Service, text: str) -> list[int]:
    """The text's token ids, refused when empty or longer than the context."""
    ids = svc.loaded.tokenizer.encode_ids(text)
    check_token_count(len(ids), svc.loaded.facts)
    return ids


def position_of(position: int | None, n: int) -> int:
    """The position a request names (``position``), its default the last of the text's ``n`` tokens."""
    if position is None:
        return n - 1
    check_position(position, n, ("body", "position"), "position")
    return position


def check_token_id(token_id: int | None, name: str, facts: ModelFacts) -> None:
    """A token id the request names (``token_id``, ``foil_id``), when it names one, is in the vocabulary."""
    if token_id is not None:
        check_index(token_id, facts.vocab_size, ("body", name), name, f"the model has {facts.vocab_size} tokens")


def knockout_edges(edges, n: int, facts: ModelFacts, n_keys: int | None = None) -> tuple[tuple, ...]:
    """A request's knocked-out ``edges`` (the subject's ``edges``) checked against the model and the subject:
    queries among ``n`` tokens, keys among ``n_keys`` (an encoder-decoder's cross stack: the source's), each layer
    and head the model's; as :attr:`~attnscope.model.options.AttentionOptions.knockout` takes them."""
    if edges and facts.differential:
        msg = "differential attention: a head is a pair of softmaxes over one mask; knockout is not split"
        raise ApiError(422, msg, loc=("body", "edges"), type_="not_exact_here")
    out = []
    for i, edge in enumerate(edges):
        loc = ("body", "edges", i)
        about = facts.layers[edge.layer] if 0 <= edge.layer < facts.n_layer else {}
        if about.get("implicit"):  # an implicit head's edge: its term M[t, s] v_s removed from o_t
            check_knockable(edge, loc, about)
        else:
            check_attention_layer(edge.layer, (*loc, "layer"), f"edges.{i}.layer", facts)
        if edge.head is not None and not about.get("implicit"):
            check_index(
                edge.head, facts.n_head, (*loc, "head"), f"edges.{i}.head", f"the model has {facts.n_head} heads"
            )
        q0, q1 = check_span(edge.query, n, (*loc, "query"), f"edges.{i}.query")
        k0, k1 = check_span(edge.key, n_keys or n, (*loc, "key"), f"edges.{i}.key")
        out.append((edge.layer, edge.head, q0, q1, k0, k1))
    return tuple(out)


def check_knockable(edge, loc: tuple, about: dict) -> None:
    """An edge of an implicit layer: a mixer whose scan attnscope wraps (not lightning's, not per channel)."""
    if about["type"] not in ("gated_deltanet", "kimi_delta", "mamba2"):
        raise ApiError(
            422,
            f"layer {edge.layer} is a {about['type']} layer: knocking out its edges is not built "
            "(gated_deltanet, kimi_delta and mamba2 layers only)",
            loc=(*loc, "layer"),
            type_="not_knockable",
        )
    if edge.head is not None:
        check_implicit_head(edge.layer, edge.head, loc, about)
