"""Which route takes which part of the subject follows from its request schema alone
(app/schemas/subject.py ``parts_of``): every part a route's schema does not compose is a 422 naming that
part, and every part it composes is in the route's OpenAPI body."""

from __future__ import annotations

from attnscope.app.routes import api_routers
from attnscope.app.schemas.common import TEXT_CHARS
from attnscope.app.schemas.subject import PARTS, parts_of

# a value of the right type for each part: refused as unknown where the route does not take the part
VALUES = {
    "text": "The cat sat on the mat.",
    "messages": [{"role": "user", "content": "Hello there."}],
    "add_generation_prompt": True,
    "audio": "UklGRg==",
    "image": "iVBORw0KGgo=",
    "stack": "decoder",
    "target": "Le chat.",
    "causal": False,
    "scale": "none",
    "ablate": [{"layer": 0, "head": 0}],
    "edges": [{"layer": 0, "query": 1, "key": 0}],
}


def body_routes():
    """(path, request schema, an example body) of every API route that reads a JSON body."""
    out = []
    for route in (route for router in api_routers(TEXT_CHARS) for route in router.routes):
        body = getattr(route, "body_field", None)
        if body is None:
            continue
        model = body.field_info.annotation
        examples = (model.model_config.get("json_schema_extra") or {}).get("examples") or [{}]
        out.append((route.path, model, examples[0]))
    return out


def test_values_cover_every_part():
    assert set(VALUES) == set(PARTS)


def test_the_subject_routes_are_found():
    """The walk below sees the routes of the subject (so its checks are not empty)."""
    taking = {path: parts_of(model) for path, model, _ in body_routes()}
    assert {"text", "messages", "image", "causal", "scale", "ablate"} <= set(taking["/api/attention"])
    assert "text" not in taking["/api/patching"] and "ablate" in taking["/api/head-effects"]


def test_a_part_a_route_does_not_take_is_a_422_naming_it(client):
    refused = 0
    for path, model, example in body_routes():
        taken = parts_of(model)
        for part in PARTS:
            if part in taken:
                continue
            r = client.post(path, json={**example, part: VALUES[part]})
            assert r.status_code == 422, (path, part, r.text)
            named = [item["type"] for item in r.json()["detail"] if item["loc"] == ["body", part]]
            assert named == ["extra_forbidden"], (path, part, r.text)
            refused += 1
    assert refused > 0


def test_a_part_a_route_takes_is_in_its_openapi_body(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for path, model, _ in body_routes():
        properties = schemas[model.__name__]["properties"]
        assert set(parts_of(model)) <= set(properties), path
        assert all(part not in properties for part in PARTS if part not in parts_of(model)), path


def test_the_models_parts_are_parts(client):
    """GET /api/model ``subject``: this model's parts, each one a part of the subject; a text model takes
    neither an image nor a recording."""
    subject = client.get("/api/model").json()["subject"]
    assert set(subject) <= set(PARTS) and "text" in subject and not {"image", "audio"} & set(subject)
