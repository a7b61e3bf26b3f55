"""The rest of the field table: what an answer holds outside a head's fields (a layer's λ or sink
logit, a hybrid layer's mixer, the subject's token bands and a conversation's spans), and the table as
``GET /api/model`` sends it (:func:`field_table`), head fields first. :mod:`model.fields` holds the
head's fields and what a row says (:class:`~model.fields.HeadField`, :class:`~model.fields.Drawn`)."""

from __future__ import annotations

from dataclasses import asdict

from . import HEAD_FIELDS, Drawn, HeadField

TOKEN_KINDS = ("text", "image", "marker")  # an answer's token_kinds (the image's band: the run of "image")
ROLES = ("system", "user", "assistant")  # a conversation's roles (the answer's spans)

# what each type of layer is (GET /api/model `layers` `type`, and a mixer beside attention), in words: the page's
# layer ribbon says them and knows no family
LAYER_KINDS = {
    "full": "softmax attention over every earlier token",
    "sliding": "softmax attention over a sliding window",
    "chunked": "softmax attention inside its chunk of tokens",
    "nope": "softmax attention over every earlier token, without rotary positions (NoPE)",
    "linear": "linear attention: no softmax, no attention map, so no heads to draw",
    "conv": "a short convolution: no attention map, so no heads to draw",
    "ssm": "a state-space model (Mamba): no attention map, so no heads to draw",
    "gated_deltanet": "Gated DeltaNet, linear in its values: its implicit attention M is drawn in the grid and under "
    "it",
    "kimi_delta": "Kimi Delta Attention, linear in its values: its implicit attention M is drawn in the grid and under "
    "it",
    "mamba2": "Mamba-2, linear in its values: its implicit attention M is drawn in the grid and under it",
    "lightning": "lightning attention, linear in its values: its implicit attention M is drawn in the grid and under "
    "it",
    "mamba1": "Mamba-1, linear in its values: the mean over channels of its |M| is drawn in the grid and under it",
    "short_conv": "a short convolution, linear in its values: its mean over channels of |M| drawn in the grid and "
    "under it",
}

# the quirks an answer holds outside a head's fields: per layer (LayerView) or per answer; never an `include` name
OTHER_FIELDS = (
    HeadField(
        "lambda",
        "number",
        None,
        "differential attention (DiffLlama): the layer's learned λ, pattern = pattern_parts[0] − λ · pattern_parts[1]",
        layers="differential",
        at="layer",
        drawn=Drawn(
            "head",
            "λ",
            words={
                "rows": "Differential attention: this head is a pair of softmaxes over the same keys, and its map is "
                "first − λ {lambda} × second (both drawn below). Red cells add to what the head reads, blue ones take "
                "away, and each row sums to 1 − λ. The scores in the hover are the first softmax's.",
                "pooled": " Drawn max-pooled, each cell is the largest |weight| of its block; a zoomed block's exact "
                "cells are drawn as |weight| too, their sign in the hover.",
                "steps": " This layer uses differential attention: these steps are the head's first softmax; the "
                "head's map is first − λ {lambda} × second (the Head view draws it, and both softmaxes).",
                "stats": " This layer uses differential attention: the entropy and the statistics are those of each "
                "head's first softmax, not of the signed map drawn.",
                "grid": " Differential attention: each head is a pair of softmaxes whose map first − λ·second can be "
                "negative; the grid shows its size, |weight| (the head view shows the sign).",
                "lines": ". Differential attention: a head's weights are first − λ {lambda} × second softmax, and "
                "only its positive ones are drawn",
                "colorbar": "first − λ {lambda}·second",
                "cell": "|weight|",
                "heads": "head pairs (differential)",
            },
            signed=True,
            flag="differential",
        ),
    ),
    HeadField(
        "sink_logit",
        "heads",
        None,
        "each head's learned attention-sink logit (gpt-oss): one more column of every row's softmax, then dropped, "
        "so the pattern's rows sum to 1 − sink_mass",
        layers="sinks",
        at="layer",
        drawn=Drawn(
            "head",
            "sink logit",
            words={
                "rows": "Each row is a query token; it spreads 1 unit of attention over the keys and this layer's "
                "learned sink (its own column), so the keys' weights sum to less than 1.",
                "sums": "This layer has learned attention sinks: each head's sink logit (here {sink_logit}) is one "
                "more column of every row's softmax, then dropped, so a row sums to 1 − the sink's share",
                "stats": " This layer has learned sinks: the entropy is of the whole softmax, the sink's column "
                "included.",
                "keys": "the sink",
            },
        ),
    ),
    HeadField(
        "token_kinds",
        "kinds",
        None,
        "with an image: each token's kind, text, image or marker (the template's or the image's markup)",
        layers="image",
        at="answer",
        drawn=Drawn("band", "image", "band", {"band": "image · {n} tokens"}, flag="vision", values=TOKEN_KINDS),
    ),
    HeadField(
        "spans",
        "spans",
        None,
        "with messages: each message's half-open token range [{message, role, start, end}]",
        layers="chat",
        at="answer",
        drawn=Drawn(
            "band", "role", "band", {"band": "{role}", "hover": "message {message}: {role}"}, flag="chat", values=ROLES
        ),
    ),
    HeadField(
        "span_mass",
        "shares",
        None,
        "with messages: [layer][head][span], the weight the last query row puts on each message's content tokens",
        layers="chat",
        at="answer",
        drawn=Drawn("head", "last row on", "share", {"head": "{role} {value}"}, flag="chat"),
    ),
    HeadField("mixer", "word", None, "a value-linear layer's mixer (POST /api/attention, `layers` naming it): each "
              "head's pattern is M, o_t = Σ_s M[t, s] v_s + skip · v_t, not a softmax", layers="implicit", at="layer",
              drawn=Drawn("head", "mixer", "signed", {"rows": "Implicit attention of a {mixer} layer, not a softmax: "
                          "o_t = Σ_s M[t,s] v_s", "output": ", exact: the layer's output before its gate, norm and "
                          "projection", "colorbar": "M"}, signed=True)),
)


def field_table() -> list[dict]:
    """The table as ``/api/model`` sends it: the head's fields, then the others, each ``{"name", "kind",
    "decimals", "meaning", "at", "feature", "score_part"}`` and, for a quirk, how it is drawn (:class:`Drawn`)."""
    return [_row(f) for f in (*HEAD_FIELDS, *OTHER_FIELDS)]


def _row(f: HeadField) -> dict:
    row = {key: value for key, value in asdict(f).items() if key in _SENT}
    row["feature"] = f.layers
    if f.drawn is not None:
        drawn = asdict(f.drawn)
        row |= {**drawn, "parts": list(drawn["parts"]), "values": list(drawn["values"])}
    return row


_SENT = ("name", "kind", "decimals", "meaning", "at", "score_part")  # the columns /api/model sends
