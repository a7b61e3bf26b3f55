"""Each view's part of the link round-trips through state.js (parseHash, then toHash of the page state it
gives, then parseHash again), run in node on the page's own modules: what a link says, the link the page
writes back says too, and a view's key is left out where the view says so (an empty second text, another
view open for `role=`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"

# one link per view key (and a pair for the second text, shared by Two texts and Patching)
LINKS = [
    "view=twotexts&textb=The+doctor+said+he",
    "view=patching&patch=residual&ptoken=12&pfoil=7&textb=The+nurse+said",
    "view=twomodels&modelb=org%2Ftuned",
    "view=roles&role=previous_token",
    "view=rollout&rollres=0",
    "view=lens&lensk=10",
    "view=lens&lensj=both&lensheads=1&lensshade=final",
    "view=image&imgmode=layer",
    "view=head&mean=1&koall=1",
]

SCRIPT = """
const state = await import(process.argv[1] + "/state.js");
const views = await import(process.argv[1] + "/views.js");
const out = {};
for (const hash of JSON.parse(process.argv[2])) {
  const read = state.parseHash(hash, views.VIEWS);
  const written = state.toHash({ ...state.createState(views.VIEWS), ...read }, views.VIEWS);
  out[hash] = { read, written, again: state.parseHash(written, views.VIEWS) };
}
console.log(JSON.stringify(out));
"""


def round_trips(links: list[str]) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's modules are run in node here")
    done = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT, str(JS), json.dumps(links)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_every_view_key_a_link_names_is_written_back_as_it_was_read():
    for hash_, trip in round_trips(LINKS).items():
        named = {key for key in dict(p.split("=", 1) for p in hash_.split("&")) if key != "view"}
        assert trip["read"], hash_
        assert {k: trip["again"].get(k) for k in trip["read"]} == trip["read"], hash_
        written = {p.split("=", 1)[0] for p in trip["written"].split("&")}
        assert named <= written, (hash_, trip["written"])


def test_a_view_key_is_left_out_where_its_view_says_so():
    trips = round_trips(["view=head&role=previous_token", "view=twotexts&textb="])
    role, empty = trips.values()
    assert role["read"]["role"] == "previous_token"
    assert "role" not in role["again"]  # written only while Head roles is open
    assert empty["read"]["textB"] == ""
    assert "textb=" not in empty["written"]  # an empty second text is not written


def test_an_old_link_names_a_view_by_the_id_it_had_and_opens_it_under_its_id_now():
    renamed = {"compare": "scaling", "texts": "twotexts", "models": "twomodels", "neuron": "qk"}
    trips = round_trips([f"view={old}" for old in renamed] + ["view=nothing"])
    for old, now in renamed.items():
        trip = trips[f"view={old}"]
        assert trip["read"]["view"] == now, old
        assert f"view={now}" in trip["written"].split("&"), trip["written"]
    assert "view" not in trips["view=nothing"]["read"]  # an id no view has, nor had, opens the default
