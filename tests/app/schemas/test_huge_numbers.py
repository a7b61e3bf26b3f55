"""Integers JSON allows but 64 bits do not hold (2⁶⁴, −2⁶⁴ and beyond), in every integer field of
every route's request, found in the OpenAPI document, and integers no float holds (10⁴⁰⁰) in
every number field: a 422 naming the field, never a 500."""

from __future__ import annotations

import pytest

BASE = {  # the smallest valid body of each route
    "/api/attention": {"text": "The cat sat on the mat.", "top_k": 1},
    "/api/head-effects": {"text": "The cat sat on the mat."},
    "/api/generate": {"text": "The cat", "max_new_tokens": 1},
    "/api/rollout": {"text": "The cat sat on the mat."},
    "/api/neuron": {"text": "The cat sat on the mat.", "layer": 0, "head": 0},
    "/api/selection": {"text": "The cat sat on the mat.", "layer": 0, "head": 0},
    "/api/compare-texts": {"text": "The doctor said she", "text_b": "The doctor said he", "layer": 0, "head": 0},
    "/api/model": {"name": "attnscope-small"},
    "/api/lessons/bag-of-words": {"T": 4, "C": 2, "seed": 1},
    "/api/lessons/softmax-scaling": {"logits": [1.0, 2.0], "factor": 2.0},
    "/api/lessons/variance": {"head_size": 4, "T": 4, "seed": 1, "samples": 2},
    "/api/lens": {"text": "The cat sat on the mat."},
    "/api/attribution": {"text": "The cat sat on the mat."},
    "/api/knockout": {"text": "The cat sat on the mat.", "edges": [{"layer": 0, "query": 3, "key": 1}]},
    "/api/patching": {"clean": "The cat sat on the mat.", "corrupt": "The dog sat on the mat."},
    "/api/qk-attribution": {"text": "The cat sat on the mat.", "layer": 1, "head": 0, "query": 3, "key": 1},
    "/api/compare-models": {"text": "The cat sat on the mat.", "model_b": "attnscope-small", "layer": 0, "head": 0},
}
HUGE = (2**64, -(2**64), 10**30)


def resolve(schema: dict, components: dict) -> dict:
    """The schema a ``$ref`` (or a one-armed ``anyOf`` with null) points to."""
    while True:
        if "$ref" in schema:
            schema = components[schema["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in schema:
            arms = [a for a in schema["anyOf"] if a.get("type") != "null"]
            if len(arms) != 1:
                return schema
            schema = arms[0]
        else:
            return schema


def integer_paths(schema: dict, components: dict, path: tuple = (), kind: str = "integer") -> list[tuple]:
    """Every place a value of JSON type ``kind`` can stand in a body (also as one arm of an
    ``anyOf``, like ``scale``'s number beside its names): a key, or 0 for an array's first item."""
    schema = resolve(schema, components)
    if schema.get("type") == kind or any(arm.get("type") == kind for arm in schema.get("anyOf", [])):
        return [path]
    if schema.get("type") == "array" and "items" in schema:
        return integer_paths(schema["items"], components, (*path, 0), kind)
    out = []
    for name, sub in schema.get("properties", {}).items():
        out += integer_paths(sub, components, (*path, name), kind)
    return out


def body_with(base: dict, path: tuple, value: int, schema: dict, components: dict) -> dict:
    """``base`` with ``value`` at ``path``: the objects on the way get their other required fields
    as 0, the arrays one item."""

    def build(sch: dict, rest: tuple):
        sch = resolve(sch, components)
        if not rest:
            return value
        key, rest = rest[0], rest[1:]
        if isinstance(key, int):
            return [build(sch["items"], rest)]
        obj = dict.fromkeys(sch.get("required", []), 0)
        obj[key] = build(sch["properties"][key], rest)
        return obj

    top = resolve(schema, components)
    return {**base, path[0]: build(top["properties"][path[0]], path[1:])}


def cases(openapi: dict, kind: str = "integer") -> list[tuple[str, tuple]]:
    components = openapi["components"]["schemas"]
    found = []
    for route, ops in openapi["paths"].items():
        post = ops.get("post")
        if not post or "requestBody" not in post:
            continue
        schema = post["requestBody"]["content"]["application/json"]["schema"]
        found += [(route, p) for p in integer_paths(schema, components, kind=kind)]
    return found


@pytest.mark.parametrize(
    ("kind", "values", "least"),
    [
        ("integer", HUGE, 15),  # layers, heads, focus.layer/head/thumbnail/region, ablate, position, token_id, ...
        ("number", (10**400, -(10**400)), 5),  # scale, temperature, top_p, the lessons' factor and logits, ...
    ],
)
def test_every_numeric_field_of_every_route_refuses_a_huge_number_by_name(client, kind, values, least):
    openapi = client.get("/openapi.json").json()
    components = openapi["components"]["schemas"]
    found = cases(openapi, kind)
    assert {route for route, _ in found} >= {"/api/attention", "/api/generate"}
    assert len(found) >= least
    for route, path in found:
        schema = openapi["paths"][route]["post"]["requestBody"]["content"]["application/json"]["schema"]
        for value in values:
            body = body_with(BASE[route], path, value, schema, components)
            r = client.post(route, json=body)
            assert r.status_code == 422, (route, path, value, r.status_code, r.text[:300])
            named = [item["loc"] for item in r.json()["detail"]]
            field = [p for p in path if isinstance(p, str)]
            assert any([part for part in loc if isinstance(part, str)][-len(field) :] == field for loc in named), (
                route,
                path,
                named,
            )


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_layer_is_named_with_its_limit(client, value):
    r = client.post("/api/attention", json={"text": "The cat", "layers": [value]})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "layers", 0]
    # the limit: the model's layers for a number too large, the schema's bound for one below 0
    assert ("the model has" in item["msg"] and str(value) in item["msg"]) or item["ctx"] == {"ge": 0}
