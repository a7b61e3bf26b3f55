"""The page's table of which route takes which part of the subject (frontend/js/subject.js ``routesOf``) is read
from the OpenAPI document the server serves, and equals what each route's request schema says
(app/schemas/subject.py ``parts_of``) for every route that reads a body: the page keeps no list of its own.
Run in node on the page's own module, over ``app.openapi()``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from attnscope.app.main import create_app
from attnscope.app.routes import api_routers, subject_routes
from attnscope.app.schemas.common import TEXT_CHARS
from attnscope.app.schemas.subject import PARTS, parts_of
from attnscope.app.settings import Settings

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"

SCRIPT = """
const subject = await import(process.argv[1] + "/subject.js");
const fs = await import("node:fs");
const table = subject.routesOf(JSON.parse(fs.readFileSync(0, "utf8")));
const state = { routes: table };
const asked = Object.fromEntries(Object.keys(table).map((url) => [url, JSON.parse(process.argv[2])
  .filter((part) => subject.routeTakes(state, url, part))]));
console.log(JSON.stringify({ table, asked }));
"""


def derived(spec: dict) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's modules are run in node here")
    done = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT, str(JS), json.dumps([*PARTS, "layers", "clean"])],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def schema_parts() -> dict[str, list[str]]:
    """Each body route's parts, from its request schema (the server's one place)."""
    out = {}
    for route in (route for router in api_routers(TEXT_CHARS) for route in router.routes):
        body = getattr(route, "body_field", None)
        if body is not None:
            out[route.path] = parts_of(body.field_info.annotation)
    return out


@pytest.mark.parametrize("max_text_chars", [TEXT_CHARS, 2 * TEXT_CHARS])
def test_the_pages_table_is_the_schemas(max_text_chars):
    """Whatever the server's text limit (a request schema rebuilt with it keeps its parts)."""
    spec = create_app(Settings(max_text_chars=max_text_chars)).openapi()
    got = derived(spec)
    expected = schema_parts()
    assert got["table"] == expected
    assert got["asked"] == expected  # routeTakes answers from it, and a field that is no part is never taken
    assert subject_routes() == expected  # the notebook widget's table, handed by the kernel
    assert "ablate" in expected["/api/attention"] and "text" not in expected["/api/patching"]


def test_every_part_is_in_the_document():
    spec = create_app().openapi()
    assert spec["components"]["schemas"]["SubjectPart"]["enum"] == list(PARTS)
