"""POST /api/attention ``query_row``: the query's row of every head's pattern equals that row of the
whole pattern (text and image-text models, the what-ifs on); each layer's mean is its heads' mean and
``mean`` the mean over every head of every layer; a query past the prompt is a 422 naming it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.app import attention, build_checkpoint  # noqa: E402
from tests.kit.vision import b64, build_gemma3, image_bytes, traced_and_eager  # noqa: E402

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    pytest.importorskip("PIL")
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    root = tmp_path_factory.mktemp("rows")
    dirs = {"gemma3": build_gemma3(root / "gemma3"), "text": build_checkpoint(root / "t")}
    with TestClient(create_app(Settings(checkpoint=dirs["gemma3"], device="cpu", torch_threads=1))) as a, \
            TestClient(create_app(Settings(checkpoint=dirs["text"], device="cpu", torch_threads=1))) as b:
        yield {"gemma3": a, "text": b, "dirs": dirs}


CASES = [
    ("gemma3", {"image": "data:image/png;base64," + b64(image_bytes(60, 40))}),
    ("gemma3", {"image": b64(image_bytes(30, 50, seed=1)), "causal": False}),
    ("text", {"scale": "none", "ablate": [{"layer": 0, "head": 1}]}),
]


@pytest.mark.parametrize(("name", "extra"), CASES)
def test_rows_are_the_pattern_rows_and_their_means(clients, name, extra):
    whole = attention(clients[name], text=TEXT, include=["pattern"], top_k=0, **extra)
    T = len(whole["tokens"])
    for query in sorted({0, T // 2, T - 1}):
        got = attention(clients[name], text=TEXT, query_row=query, layers=[], include=[], top_k=0, **extra)
        rows = got["query_row"]
        assert rows["query"] == query and [lay["layer"] for lay in rows["layers"]] == [
            lay["layer"] for lay in whole["layers"]
        ]
        every = []
        for lay, want in zip(rows["layers"], whole["layers"]):
            heads = torch.tensor(lay["heads"], dtype=torch.float64)
            full = torch.tensor([h["pattern"][query] for h in want["heads"]], dtype=torch.float64)
            torch.testing.assert_close(heads, full, atol=1e-5, rtol=1e-5)
            mean = torch.tensor(lay["mean"], dtype=torch.float64)
            torch.testing.assert_close(mean, heads.mean(0), atol=1e-6, rtol=1e-5)
            every.append(heads)
            mask = torch.tensor(want.get("mask", whole["mask"])[query], dtype=torch.bool)  # sliding layers: their own
            assert (heads[:, ~mask] == 0).all()  # masked keys weigh exactly 0
        torch.testing.assert_close(
            torch.tensor(rows["mean"], dtype=torch.float64), torch.cat(every).mean(0), atol=1e-6, rtol=1e-5
        )


def test_rows_equal_eager_attention_with_an_image(clients):
    """The oracle: transformers' eager ``output_attentions`` on the same ids and pixels."""
    from attnscope.model.registry import load_model
    from attnscope.model.vision.images import decode_image

    png = image_bytes(60, 40)
    lm = load_model(clients["dirs"]["gemma3"], device="cpu")
    prompt = lm.backend.prepare(TEXT, decode_image(png, 10**7))
    _, _, out = traced_and_eager(lm, prompt)
    image = "data:image/png;base64," + b64(png)
    for query in (0, len(prompt.ids) // 2, len(prompt.ids) - 1):
        rows = attention(clients["gemma3"], text=TEXT, image=image, query_row=query, layers=[], include=[], top_k=0)
        assert rows["token_ids"] == prompt.ids
        for lay, want in zip(rows["query_row"]["layers"], out.attentions):
            heads = torch.tensor(lay["heads"], dtype=torch.float64)
            torch.testing.assert_close(heads, want[0, :, query].double(), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(torch.tensor(lay["mean"]).double(), want[0, :, query].double().mean(0),
                                       atol=1e-5, rtol=1e-5)


def test_rows_over_the_cell_limit_are_refused():
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    limit = 1024  # the least a server allows; the shipped model's 4 layers × 4 heads pass it past 64 tokens
    settings = Settings(device="cpu", torch_threads=1, max_matrix_cells=limit)
    with TestClient(create_app(settings)) as c:
        body = {"text": TEXT * 20, "query_row": 0, "layers": [], "include": [], "top_k": 0}
        r = c.post("/api/attention", json=body)
        assert r.status_code == 422
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "query_row"] and detail["type"] == "answer_too_large"
        assert detail["ctx"]["limit"] == limit and detail["ctx"]["count"] > limit and "1,024" in detail["msg"]
        small = {"text": "The", "top_k": 0, "layers": [], "include": []}
        assert c.post("/api/attention", json=small).status_code == 200  # the server keeps serving


def test_a_query_past_the_prompt_is_refused(clients):
    response = clients["text"].post("/api/attention", json={"text": TEXT, "query_row": 999})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "query_row"] and "999" in detail["msg"]
    assert clients["text"].post("/api/attention", json={"text": TEXT, "top_k": 0}).status_code == 200
