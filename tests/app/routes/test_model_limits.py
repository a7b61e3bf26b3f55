"""`/api/model` `limits` names every limit the page needs, and each is the one the routes enforce:
the page keeps no copy of them."""

from __future__ import annotations

from attnscope.app.schemas.attention import REGION_MAX

from tests.kit.app import attention


def test_each_limit_sent_is_the_limit_enforced(client):
    limits = client.get("/api/model").json()["limits"]
    assert set(limits) == {"max_text_chars", "max_matrix_cells", "region_max", "max_new_tokens"}
    assert limits["region_max"] == REGION_MAX  # the bound the focus.region validator checks
    n = limits["max_new_tokens"]
    too_many = client.post("/api/generate", json={"text": "The cat", "max_new_tokens": n + 1})
    assert too_many.status_code == 422 and "max_new_tokens" in too_many.text and str(n) in too_many.text
    too_long = client.post("/api/attention", json={"text": "a" * (limits["max_text_chars"] + 1)})
    assert too_long.status_code == 422 and str(limits["max_text_chars"]) in too_long.text


def test_a_text_over_the_context_is_told_where_the_part_that_fits_ends(client):
    limit = client.get("/api/model").json()["block_size"]
    text = "the cat sat on the mat, " * limit
    r = client.post("/api/attention", json={"text": text})
    assert r.status_code == 422
    ctx = r.json()["detail"][0]["ctx"]
    assert ctx["limit"] == limit and ctx["count"] > limit
    fits = text[: ctx["fits_chars"]]
    assert len(attention(client, text=fits, include=[], top_k=0)["tokens"]) == limit
    # one more token's worth does not fit
    assert client.post("/api/attention", json={"text": text[: ctx["fits_chars"] + 4]}).status_code == 422
