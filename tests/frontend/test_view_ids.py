"""What the page keys by a view's id names a view of the registry (views.js): a renamed view leaves no table
behind that still knows it by its old id; a view's own route is one the server's OpenAPI document has (subject.js
``routesOf``, which textonly.js reads through ``routeTakes``).
Run in node on the page's own modules."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from attnscope.app.main import create_app

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"

SCRIPT = """
const views = await import(process.argv[1] + "/views.js");
const subject = await import(process.argv[1] + "/subject.js");
const spec = JSON.parse((await import("node:fs")).readFileSync(0, "utf8")); // the server's OpenAPI document
console.log(JSON.stringify({
  ids: views.VIEW_IDS,
  was: views.VIEWS.flatMap((v) => v.was ?? []),
  routes: views.VIEWS.flatMap((v) => (v.route ? [v.route] : [])),
  known: Object.keys(subject.routesOf(spec)),
  grouped: views.GROUPS.flatMap((g) => g.views.map((v) => v.id)),
}));
"""


def registry() -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's modules are run in node here")
    done = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT, str(JS)],
        input=json.dumps(create_app().openapi()),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_every_view_id_keyed_elsewhere_is_a_view_and_no_old_id_is_one():
    got = registry()
    # a view says its own route (textonly.js reads what it takes: subject.js routeTakes): no table keyed by ids
    assert got["routes"] and set(got["routes"]) <= set(got["known"]), got["routes"]
    assert not set(got["was"]) & set(got["ids"]), "an old id of one view is the id of another"
    assert len(got["ids"]) == len(set(got["ids"])) == len(got["grouped"])
