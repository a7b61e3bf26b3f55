"""The fields one head's answer can hold: a single table that the capture, the API's schemas and
encoder, ``/api/model`` and the page all read.

Each field has a ``kind`` that says how it is computed, masked, rounded and drawn:

- ``weights``: a T×T softmax matrix; masked cells exactly 0; sent with ``decimals`` decimals;
- ``scores``: a T×T matrix of scores; masked cells NaN (``null`` in JSON);
- ``vectors``: T × head_dim, one row per token;
- ``rows``: one number per query row (sent beside ``pattern`` where the layer has it);
- ``parts``: two T×T softmax matrices of a head made of two (differential attention), beside ``pattern``;
- ``stats``: the head's statistics (:mod:`model.stats`).

A row also says which layers compute the field (``layers``: every layer, or only those with one
attention feature of :mod:`model.families`) and whether it is one of the parts ``attn_scores_raw``
splits into (``score_part``); the lists below are read from the table.

What only some models have (a family's quirk: learned sinks, output gates, MLA's parts, a
differential pair, an image's tokens, a conversation's roles) also says how it is drawn, so that the
page draws every quirk with one module and knows no family (:class:`Drawn`). Beside the head's
fields, :mod:`model.fields.table` ``OTHER_FIELDS`` describes the quirks an answer holds per layer
(``lambda``, ``sink_logit``, a hybrid's ``mixer``) or per answer (``token_kinds``, ``spans``), and
sends the whole table (``field_table``). The records of a forward
pass (:class:`model.trace.AttentionTrace`, :class:`model.inspection.Trace`) and the answer hold
the fields by these names. A new per-head field is a row here, its step where it is computed
(:mod:`model.ours.gpt`, :mod:`model.families`), and its drawing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["weights", "scores", "vectors", "rows", "parts", "stats", "number", "heads", "kinds", "spans", "shares",
               "word"]
At = Literal["head", "layer", "answer"]
Sits = Literal["row", "head", "parts", "band"]
Scale = Literal["weights", "share", "signed", "scores", "band"]


@dataclass(frozen=True)
class Drawn:
    """How the page draws a quirk, whatever the family (the page's ``draw/quirks.js``).

    ``sits``: ``row`` a strip beside the query axis (one number a query); ``head`` a number beside the head
    (the layer's, or the chosen head's of a per-head list); ``parts`` panels beside the pattern (and the
    cell's hover); ``band`` a band on the token axes. ``scale``: ``weights`` the weights' colours 0..1,
    ``share`` a share 0..1 in the weights' colours, ``signed`` the diverging scale (red = positive),
    ``scores`` the diverging scale of scores, ``band`` a colour per value of ``values``.
    ``words``: sentences by where they stand, ``{name}`` the layer's number of the field ``name`` (3
    decimals), ``{value}`` this field's, ``{min}``/``{max}`` its smallest and largest, ``{0}``/``{1}``
    its parts: ``rows`` what a row of the head's map holds; ``pooled`` the same, drawn max-pooled;
    ``sums`` what the softmax's rows sum to (the mask pipeline), ``steps`` added after it; ``stats`` what the
    entropy is of; ``grid``, ``lines`` the all-heads grid's and the lines' captions; ``hover`` the cell's or
    the strip's hover; ``scores`` after the raw score's name in the hover; ``colorbar`` the colour bar's title;
    ``cell`` what a pooled cell of the grid is; ``output`` where the drawn head's output stands in its layer;
    ``heads`` what the model's heads are; ``keys`` one more key every row's softmax sees; ``band`` a band's label
    (``{n}`` its tokens, ``{role}``, ``{message}``); ``head`` one of a message's numbers beside the head
    (``{role}``, ``{value}``).
    """

    sits: Sits
    label: str  # words for a legend, a strip's head, a panel's title
    scale: Scale | None = None
    words: dict[str, str] = field(default_factory=dict)
    parts: tuple[str, ...] = ()  # a `parts` field: each part's panel title
    signed: bool = False  # where a layer has it, the layer's pattern is signed (first − λ·second)
    flag: str | None = None  # the /api/model key that is true when the model has it; None: only the answer says
    values: tuple[str, ...] = ()  # a band's values (its colours, in this order)


@dataclass(frozen=True)
class HeadField:
    name: str
    kind: Kind
    decimals: int | None  # decimals kept in JSON; None for the statistics (significant digits)
    meaning: str  # one line, as the API's schema and the page's tooltips say it
    layers: str = "all"  # which layers compute it: "all", or only those with this feature of model.families
    score_part: bool = False  # one of the parts attn_scores_raw splits into (they add up to it)
    drawn: Drawn | None = None  # a quirk: how the page draws it; None: the views draw it as they are
    at: At = "head"  # where the answer holds it: a head's fields, the layer's, the answer's own


HEAD_FIELDS = (
    HeadField(
        "pattern",
        "weights",
        5,
        "T×T softmax weights; masked entries 0; rows sum to 1 (to 1 − sink_mass in a layer with learned sinks); "
        "with differential attention the signed pair pattern_parts[0] − lambda · pattern_parts[1], "
        "rows summing to 1 − lambda",
    ),
    HeadField(
        "pattern_parts",
        "parts",
        5,
        "[2][T][T] differential attention (DiffLlama): the pair's two softmaxes, each transformers' weights of one "
        "query head (h and h + n_head); sent with pattern by such layers, absent elsewhere",
        layers="differential",
        drawn=Drawn(
            "parts",
            "the pair's two softmaxes",
            "weights",
            words={"hover": "weight {value} = first {0} − λ {lambda} × second {1}", "scores": " (first softmax)"},
            parts=("first softmax (+)", "second softmax (× λ {lambda}, −)"),
            flag="differential",
        ),
    ),
    HeadField("attn_scores_raw", "scores", 4, "T×T q·kᵀ before scaling; masked entries null (not a number in b64)"),
    HeadField(
        "attn_scores_content",
        "scores",
        4,
        "T×T the content part of q·kᵀ: in multi-head latent attention (DeepSeek) the no-RoPE halves, "
        "q[:nope]·k[:nope], plus attn_scores_position it is attn_scores_raw; in DeBERTa content to content, "
        "q_i·k_j; sent only by such layers; masked entries null",
        layers="mla",
        score_part=True,
        drawn=Drawn("parts", "content part of q·kᵀ", "scores", {"hover": "content {value}"}, flag="score_parts"),
    ),
    HeadField(
        "attn_scores_position",
        "scores",
        4,
        "T×T the position part of q·kᵀ in multi-head latent attention: the RoPE halves, q[nope:]·k[nope:]; "
        "sent only by such layers; masked entries null",
        layers="mla",
        score_part=True,
        drawn=Drawn(
            "parts", "position part of q·kᵀ (RoPE)", "scores", {"hover": "position {value}"}, flag="score_parts"
        ),
    ),
    HeadField(
        "attn_scores_content_position",
        "scores",
        4,
        "T×T DeBERTa's content-to-position term: each query's content with the key's relative position, "
        "q_i·pos_k[r(i, j)]; plus attn_scores_content and attn_scores_position_content it is attn_scores_raw; "
        "sent only by such layers; masked entries null",
        layers="deberta",
        score_part=True,
        drawn=Drawn(
            "parts", "content → position term", "scores", {"hover": "content→position {value}"}, flag="score_parts"
        ),
    ),
    HeadField(
        "attn_scores_position_content",
        "scores",
        4,
        "T×T DeBERTa's position-to-content term: each key's content with the query's relative position, "
        "k_j·pos_q[r(j, i)]; sent only by such layers; masked entries null",
        layers="deberta",
        score_part=True,
        drawn=Drawn(
            "parts", "position → content term", "scores", {"hover": "position→content {value}"}, flag="score_parts"
        ),
    ),
    HeadField(
        "attn_scores_uncapped",
        "scores",
        4,
        "T×T q·kᵀ / divisor before the layer's softcap; sent only by a layer with a softcap (without one, "
        "attn_scores is this step); masked entries null (not a number in b64)",
        layers="softcap",
    ),
    HeadField(
        "attn_scores",
        "scores",
        4,
        "T×T the scores softmax sees: q·kᵀ / divisor, then softcap·tanh(· / softcap) "
        "where the layer has a softcap; "
        "masked entries null (not a number in b64)",
    ),
    HeadField("pattern_unscaled", "weights", 5, "T×T softmax of the raw scores"),
    HeadField(
        "sink_mass",
        "rows",
        5,
        "per query: the weight the layer's learned attention sink took (gpt-oss), 1 − the pattern row's sum; "
        "sent with pattern by layers with sinks, absent elsewhere",
        layers="sinks",
        drawn=Drawn(
            "row",
            "sink",
            "share",
            {
                "hover": "→ the sink: weight {value}, this row's keys share the rest",
                "steps": " The sink took {min} to {max}.",
            },
        ),
    ),
    HeadField(
        "gate",
        "rows",
        5,
        "per query: the head's output gate (Qwen3-Next: sigmoid of a learned projection, multiplying the head's "
        "output before o_proj), its mean over the head's dimensions; sent with pattern by gated layers, "
        "absent elsewhere",
        layers="gates",
        drawn=Drawn(
            "row",
            "gate",
            "share",
            {
                "hover": "output gate {value}: the head's output here is scaled by it (mean over its dimensions) "
                "before o_proj"
            },
            flag="output_gates",
        ),
    ),
    HeadField("stats", "stats", None, "per-head statistics"),
    HeadField("q", "vectors", 4, "T×head_dim"),
    HeadField("k", "vectors", 4, "T×head_dim (after rotary; the key/value head this query head reads)"),
    HeadField("v", "vectors", 4, "T×head_dim"),
)

FIELD_NAMES = tuple(f.name for f in HEAD_FIELDS)  # the order of the answer's keys
WEIGHT_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind == "weights")
SCORE_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind == "scores")  # NaN where masked
MATRIX_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind in ("weights", "scores"))  # T×T
SCORE_PARTS = tuple(f.name for f in HEAD_FIELDS if f.score_part)  # MLA, DeBERTa: attn_scores_raw in parts
# what only some layers compute (a softcap, learned sinks, MLA, output gates): kept where a layer's steps have it
LAYER_DEPENDENT = tuple(f.name for f in HEAD_FIELDS if f.layers != "all")
VECTOR_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind == "vectors")
ROW_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind == "rows")
PART_FIELDS = tuple(f.name for f in HEAD_FIELDS if f.kind == "parts")
DECIMALS = {f.name: f.decimals for f in HEAD_FIELDS if f.decimals is not None}


def fields_of(feature: str) -> tuple[str, ...]:
    """The fields only layers with ``feature`` (a module of :mod:`model.families`) compute."""
    return tuple(f.name for f in HEAD_FIELDS if f.layers == feature)


def matrices_kept(names, extras) -> list[str]:
    """The matrices of ``names`` a layer keeps, never ``stats`` (taken apart); those only some layers
    compute (``attn_scores_uncapped`` from a softcap, MLA's two parts of q·kᵀ) only from a layer that
    does (``extras``: the steps it computes of :data:`LAYER_DEPENDENT`)."""
    return [n for n in MATRIX_FIELDS if n in names and (n not in LAYER_DEPENDENT or n in extras)]


def kept_beside(kind: tuple[str, ...], names, extras) -> list[str]:
    """The fields of ``kind`` a layer keeps (per row: ``sink_mass``, ``gate``; a differential pair's
    ``pattern_parts``), asked for or beside ``pattern``; those only some layers compute, from a layer that does."""
    return [n for n in kind if (n not in LAYER_DEPENDENT or n in extras) and (n in names or "pattern" in names)]
