"""The "Explain a prediction" views of the causal routes (issue 34): Lens (POST /api/lens),
Attribution (POST /api/attribution beside POST /api/head-effects) and Patching (POST
/api/patching). Each draws the server's numbers, follows the text or the chosen token, says a
refusal in one line with nothing drawn under it, and says the model as trained while a what-if
is on; at 1280 and 390 px."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

CLEAN = "Open the red door, then close the blue window. Open the red door, then close the blue"
CORRUPT = CLEAN.replace("window", "box")
WIDTHS = [1280, 390]


def lens_cells(page):
    """Per row of the lens table: its label and its cells' (text, data-prob, title, chosen)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=lens-box] tbody tr')].map((tr) => ({
            label: tr.querySelector('th').textContent,
            cells: [...tr.querySelectorAll('td')].map((td) =>
                [td.textContent, Number(td.dataset.prob), td.title, td.classList.contains('chosen')]),
        }))"""
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_lens_table_is_the_servers_and_follows_the_text(tab, width):
    page = tab.page
    tab.open_at(width, "/#view=lens&pos=10&text=" + quote(CLEAN))
    page.wait_for_selector("[data-testid=lens-box] table")
    served = post_json(tab.base_url + "/api/lens", {"text": CLEAN, "top_k": 5})
    rows = lens_cells(page)
    assert len(rows) == len(served["residuals"])
    assert rows[0]["label"] == "embeddings" and rows[-1]["label"].endswith("the output")
    for row, residual in zip(rows, served["residuals"], strict=True):
        assert len(row["cells"]) == len(served["tokens"])
        for (text, prob, title, _chosen), top in zip(row["cells"], residual["top"], strict=True):
            assert prob == top[0]["prob"]  # the shade is the answer's number
            assert text and top[0]["token"].startswith(text.rstrip("…"))
            assert all(f"{p['token']} {p['prob']:.3f}" in title for p in top)  # the hover: the top k
        assert [c[3] for c in row["cells"]].index(True) == 10  # the chosen token's column
    assert tab.inside("lens-box", width)
    assert page.get_by_test_id("lens-note").is_hidden()
    # it follows the text
    page.get_by_test_id("text-input").fill("The cat sat on the mat.")
    tab.settle()
    page.wait_for_function("() => window.attnscope.state.lens?.response?.tokens.length === 7")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=lens-box] tbody tr td').length % 7 === 0")
    again = post_json(tab.base_url + "/api/lens", {"text": "The cat sat on the mat.", "top_k": 5})
    assert [c[1] for c in lens_cells(page)[-1]["cells"]] == [t[0]["prob"] for t in again["residuals"][-1]["top"]]
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_attribution_map_and_the_head_effects_are_the_servers(tab, width):
    page = tab.page
    tab.open_at(width, "/#view=attribution&text=" + quote(CLEAN))
    fig = tab.drawn("attribution-heads")
    served = post_json(tab.base_url + "/api/attribution", {"text": CLEAN, "position": 21})
    assert fig["data"][0]["z"] == served["heads"]
    assert fig["data"][0]["zmid"] == 0 and fig["data"][0]["zmin"] == -fig["data"][0]["zmax"]
    parts = page.get_by_test_id("attribution-parts").inner_text()
    for value in (served["embed"], served["rest"], *served["mlps"]):
        assert f"{value:+.3f}" in parts
    assert f"{served['logit']:.3f}" in parts
    caption = page.get_by_test_id("attribution-caption").inner_text()
    assert f"“{served['token']}”" in caption and served["frozen"] in caption and "(token 21)" in caption
    assert "softcap" not in caption  # the shipped model has none (final_softcap null)
    # the head effects beside it: measured on asking, for the same token and position
    page.get_by_test_id("attribution-measure").click()
    page.wait_for_function("() => document.querySelector('[data-testid=attribution-effects]')?.data")
    asked = {"text": CLEAN, "position": 21, "token_id": served["token_id"]}
    effects = post_json(tab.base_url + "/api/head-effects", asked)
    assert tab.figure("attribution-effects")["data"][0]["z"] == effects["delta"]
    assert tab.inside("attribution-heads", width) and tab.inside("attribution-effects", width)
    # it follows the chosen token: another position, another answer; the effects wait for a new measure
    page.locator("[data-testid=tokens] .chip").nth(10).click()
    page.wait_for_function("() => window.attnscope.state.attribution?.response?.position === 10")
    other = post_json(tab.base_url + "/api/attribution", {"text": CLEAN, "position": 10})
    page.wait_for_function(
        "(z) => JSON.stringify(document.querySelector('[data-testid=attribution-heads]').data[0].z) === z",
        arg=json.dumps(other["heads"], separators=(",", ":")),
    )
    assert page.get_by_test_id("attribution-effects").is_hidden()
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_patching_draws_the_servers_shares_and_says_a_refusal(tab, width):
    page = tab.page
    tab.open_at(width, "/#view=patching&text=" + quote(CLEAN) + "&textb=" + quote(CORRUPT))
    fig = tab.drawn("patch-plot")
    body = {"clean": CLEAN, "corrupt": CORRUPT, "position": 21}
    heads = post_json(tab.base_url + "/api/patching", {**body, "what": "heads"})
    assert fig["data"][0]["z"] == heads["heads"] and fig["data"][0]["zmid"] == 0
    caption = page.get_by_test_id("patch-caption").inner_text()
    assert f"logit(“{heads['token']}”) − logit(“{heads['foil']}”)" in caption
    assert f"{heads['clean_diff']:.3f}" in caption and f"{heads['corrupt_diff']:.3f}" in caption
    assert page.get_by_test_id("patch-corrupt").input_value() == CORRUPT
    # the residual stream: a layer × position map, kept in the link
    page.get_by_test_id("patch-what").select_option("residual")
    page.wait_for_function("() => window.attnscope.state.patching?.response?.what === 'residual'")
    residual = post_json(tab.base_url + "/api/patching", {**body, "what": "residual"})
    page.wait_for_function("() => document.querySelector('[data-testid=patch-plot]').data[0].y.length === 4")
    assert tab.figure("patch-plot")["data"][0]["z"] == residual["residual"]
    page.wait_for_function("() => window.location.hash.includes('patch=residual')")
    assert tab.inside("patch-plot", width)
    # a corrupt text of another length: the 422 in one line, naming corrupt, nothing drawn under it
    page.get_by_test_id("patch-corrupt").fill(CORRUPT + " again")
    page.wait_for_function("() => document.querySelector('[data-testid=patch-caption]').innerText.startsWith('Could')")
    refusal = page.get_by_test_id("patch-caption").inner_text()
    assert "corrupt" in refusal and "\n" not in refusal
    assert page.get_by_test_id("patch-plot").is_hidden()
    assert not tab.unexpected_console_errors(allowed=("422",))


@pytest.mark.parametrize("width", WIDTHS)
def test_with_a_what_if_on_each_view_says_its_numbers_are_the_model_as_trained(tab, width):
    what_ifs = "&causal=0&off=2.1&text=" + quote(CLEAN) + "&textb=" + quote(CORRUPT)
    served = post_json(tab.base_url + "/api/attribution", {"text": CLEAN, "position": 21})
    for view, testid, ready in (
        ("lens", "lens-note", "document.querySelector('[data-testid=lens-box] table')"),
        ("attribution", "attribution-note", "document.querySelector('[data-testid=attribution-heads]')?.data"),
        ("patching", "patch-note", "document.querySelector('[data-testid=patch-plot]')?.data"),
    ):
        tab.open_at(width, f"/#view={view}" + what_ifs)
        tab.page.wait_for_function(f"() => {ready}")
        note = tab.page.get_by_test_id(testid).inner_text()
        assert "the model as trained" in note and "causal mask is off" in note and "head is switched off" in note
        if view == "attribution":  # the same numbers as without the what-ifs: the route never takes them
            assert tab.figure("attribution-heads")["data"][0]["z"] == served["heads"]
    assert not tab.unexpected_console_errors()


SIGNED_ENDS = """(id) => {
    const t = document.querySelector(`[data-testid="${id}"]`)._fullData[0];
    const ends = [t.colorscale[0][1], t.colorscale[t.colorscale.length - 1][1]];
    if (t.reversescale) ends.reverse();
    return { negative: ends[0], positive: ends[1], zmid: t.zmid, zmin: t.zmin, zmax: t.zmax };
}"""


def rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(float(c)) for c in colour[colour.index("(") + 1 : colour.index(")")].split(","))


def test_every_signed_map_of_the_causal_views_draws_positive_in_the_same_red(tab):
    """One convention on neighbouring tabs (issue 42, item 18): Attribution's direct writes and head
    effects and Patching's shares are drawn on one diverging scale, the positive end red, never reversed."""
    page = tab.page
    tab.open_at(1280, "/#view=attribution&text=" + quote(CLEAN))
    tab.drawn("attribution-heads")
    page.get_by_test_id("attribution-measure").click()
    tab.drawn("attribution-effects")
    ends = {i: page.evaluate(SIGNED_ENDS, i) for i in ("attribution-heads", "attribution-effects")}
    assert "Red: the part raises it" in page.get_by_test_id("attribution-caption").inner_text()
    tab.open_at(1280, "/#view=patching&text=" + quote(CLEAN) + "&textb=" + quote(CORRUPT))
    tab.drawn("patch-plot")
    ends["patch-plot"] = page.evaluate(SIGNED_ENDS, "patch-plot")
    assert len({(e["negative"], e["positive"]) for e in ends.values()}) == 1, ends
    for e in ends.values():
        red, blue = rgb(e["positive"]), rgb(e["negative"])
        assert red[0] > 2 * red[2] and blue[2] > 2 * blue[0], e
        assert e["zmin"] == -e["zmax"] < 0  # centred on 0: the sign alone picks the side


@pytest.mark.parametrize("width", WIDTHS)
def test_patching_runs_that_agree_on_the_top_guess_and_the_token_and_foil_picked(tab, width):
    """Issue 42, item 3: a corrupt text whose top guess is the clean one's is patched against the server's
    foil (the corrupt run's best other guess), both tokens shown in the tab's selects; a foil picked from
    the runs' top guesses is asked for and drawn, and kept in the link."""
    page = tab.page
    corrupt = CLEAN.replace("red", "big")
    tab.open_at(width, "/#view=patching&text=" + quote(CLEAN) + "&textb=" + quote(corrupt))
    fig = tab.drawn("patch-plot")
    body = {"clean": CLEAN, "corrupt": corrupt, "position": 21}
    served = post_json(tab.base_url + "/api/patching", body)
    assert served["clean_top"][0]["token_id"] == served["corrupt_top"][0]["token_id"] == served["token_id"]
    assert served["foil_id"] != served["token_id"] and fig["data"][0]["z"] == served["heads"]
    token, foil = page.get_by_test_id("patch-token"), page.get_by_test_id("patch-foil")
    assert token.is_visible() and foil.is_visible()
    assert served["token"] in token.locator("option:checked").inner_text()
    assert served["foil"] in foil.locator("option:checked").inner_text()
    offered = foil.locator("option").evaluate_all("(os) => os.map((o) => o.value)")
    assert offered[0] == "" and {str(g["token_id"]) for g in served["corrupt_top"]} <= set(offered)
    # another foil: the corrupt run's third guess
    other = served["corrupt_top"][2]
    foil.select_option(str(other["token_id"]))
    page.wait_for_function("(id) => window.attnscope.state.patching?.response?.foil_id === id", arg=other["token_id"])
    picked = post_json(tab.base_url + "/api/patching", {**body, "foil_id": other["token_id"]})
    page.wait_for_function("(z) => JSON.stringify(document.querySelector('[data-testid=patch-plot]').data[0].z)"
                           " === JSON.stringify(z)", arg=picked["heads"])
    caption = page.get_by_test_id("patch-caption").inner_text()
    assert f"logit(“{served['token']}”) − logit(“{other['token']}”)" in caption
    page.wait_for_function("(id) => window.location.hash.includes(`pfoil=${id}`)", arg=other["token_id"])
    assert tab.inside("patch-pick", width)
    card = page.locator("#view-patching .card").bounding_box()
    for select in (token, foil):  # each select within its card, however long its options
        box = select.bounding_box()
        assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"]
    assert not tab.unexpected_console_errors()
