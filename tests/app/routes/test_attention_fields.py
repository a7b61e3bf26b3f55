"""The field table (model/fields.py) is the one list of what a head's answer can hold: the
request's `include`, the response schema, `/api/model` and the answers themselves agree with it,
and every field arrives masked and rounded as its kind says."""

from __future__ import annotations

import re

import numpy as np
from attnscope.model.fields import DECIMALS, FIELD_NAMES, HEAD_FIELDS, LAYER_DEPENDENT, MATRIX_FIELDS
from attnscope.model.fields.table import OTHER_FIELDS

from tests.kit.app import attention


def test_the_model_route_sends_the_table(client):
    fields = client.get("/api/model").json()["fields"]
    heads = [f for f in fields if f["at"] == "head"]
    assert [f["name"] for f in heads] == list(FIELD_NAMES)  # the `include` names, in the answer's order
    assert {f["kind"] for f in heads} == {"weights", "scores", "vectors", "rows", "parts", "stats"}
    assert [f["name"] for f in fields if f["at"] != "head"] == [f.name for f in OTHER_FIELDS]
    assert all(f["meaning"] for f in fields)


def test_the_model_route_says_each_type_of_layer_in_words(client):
    """The layer ribbon's words are the server's (`layer_kinds`): one for every `type` a layer may have, so the page
    names no family's mixer."""
    from typing import get_args

    from attnscope.app.schemas.model import LayerInfo

    model = client.get("/api/model").json()
    types = set(get_args(LayerInfo.model_fields["type"].annotation))
    assert set(model["layer_kinds"]) == types and len(types) > 10
    assert all(isinstance(words, str) and len(words) > 20 for words in model["layer_kinds"].values())
    assert {layer["type"] for layer in model["layers"]} <= set(model["layer_kinds"])


def test_every_quirk_says_how_it_is_drawn(client):
    """What only some layers or answers hold is drawn by the page from its row alone: where it sits, its
    label and colours, and its sentences, whose {names} are fields of the table (or the row's own numbers)."""
    fields = client.get("/api/model").json()["fields"]
    names = {f["name"] for f in fields}
    model = client.get("/api/model").json()
    for f in fields:
        quirk = f["feature"] != "all" or f["at"] != "head"
        if not quirk or (f["kind"] == "scores" and not f["score_part"]):  # a softcap's step: the pipeline's
            continue
        assert f["sits"] in ("row", "head", "parts", "band") and f["label"], f["name"]
        assert f["sits"] != "row" or f["kind"] == "rows"
        assert f["sits"] != "band" or (f["at"] == "answer" and f["values"] and "band" in f["words"])
        assert f["kind"] != "parts" or len(f["parts"]) == 2  # a pair: two panels
        assert f["flag"] is None or f["flag"] in model, f["flag"]  # a key /api/model has
        for words in [*f["words"].values(), *f["parts"]]:
            for name in re.findall(r"{(\w+)}", words):
                assert name in names or name in ("value", "min", "max", "n", "role", "message", "0", "1"), name
    # the head fields no view draws as it is: a per-query row, the parts of a head
    drawn = {f["name"] for f in fields if f.get("sits")}
    assert {f.name for f in HEAD_FIELDS if f.kind in ("rows", "parts") or f.score_part} <= drawn


def test_the_schemas_list_the_fields_of_the_table(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    include = schemas["AttentionRequest"]["properties"]["include"]["items"]
    assert set(include["enum"]) == set(FIELD_NAMES)
    for view in ("HeadView", "FocusView", "FocusRegion"):  # a layer's head, the focus head, a region of it
        head = schemas[view]["properties"]
        assert [name for name in head if name in FIELD_NAMES] == list(FIELD_NAMES), view
        for f in HEAD_FIELDS:
            assert head[f.name]["description"] == f.meaning, (view, f.name)


def decimals_of(values) -> int:
    """The most decimals any of the numbers needs (up to 8)."""
    for d in range(9):
        if np.allclose(np.round(values, d), values, rtol=0, atol=1e-9):
            return d
    return 9


def test_every_field_arrives_masked_and_rounded_as_its_kind_says(client):
    # attn_scores_uncapped only a softcapped model has, sink_mass only a model with sinks
    # (tests/app/routes/test_attention_families.py)
    # MLA's two parts of q·kᵀ only an MLA model, gate only a gated one (tests/app/routes/test_attention_families.py)
    everything = [f.name for f in HEAD_FIELDS if f.name not in LAYER_DEPENDENT]
    data = attention(client, text="The cat sat on the mat. The cat", include=everything, top_k=0)
    mask = np.array(data["mask"], dtype=bool)
    kinds = {f.name: f.kind for f in HEAD_FIELDS}
    seen = set()
    for layer in data["layers"]:
        for head in layer["heads"]:
            for name in everything:
                value = head[name]
                seen.add(name)
                if kinds[name] == "stats":
                    assert {"entropy", "var_scores_raw", "row_entropy"} <= set(value)
                    continue
                a = np.array(value, dtype=float)  # null -> nan
                if name in MATRIX_FIELDS:
                    assert a.shape == mask.shape
                    if kinds[name] == "weights":
                        assert (a[~mask] == 0).all()
                    else:
                        assert np.isnan(a[~mask]).all() and not np.isnan(a[mask]).any()
                shown = a[~np.isnan(a)]
                assert 0 < decimals_of(shown) <= DECIMALS[name], name
    assert seen == set(everything)


def test_stats_without_the_unscaled_softmax_are_the_same_numbers_less_its_own(client):
    """The grid's body (``stats_unscaled`` false): every statistic of the scaled softmax and the scores as
    with the unscaled ones, which are absent (not null); per-row arrays too, where asked for."""
    unscaled = {"entropy_unscaled", "max_weight_unscaled", "row_entropy_unscaled"}
    body = dict(text="The cat sat on the mat. The cat sat on the", include=["stats"], thumbnail=8, top_k=0)
    for rows in (True, False):
        full = attention(client, **body, stats_rows=rows)
        grid = attention(client, **body, stats_rows=rows, stats_unscaled=False)
        for lf, lg in zip(full["layers"], grid["layers"], strict=True):
            for hf, hg in zip(lf["heads"], lg["heads"], strict=True):
                left_out = unscaled if rows else unscaled - {"row_entropy_unscaled"}
                assert set(hf["stats"]) - set(hg["stats"]) == left_out
                assert all(hg["stats"][name] == value for name, value in hf["stats"].items() if name not in unscaled)
                assert hg["thumbnail"] == hf["thumbnail"]
