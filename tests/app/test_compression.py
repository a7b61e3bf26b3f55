"""Answers are compressed as the client accepts: zstd, else gzip, else sent as they are; the bytes
decoded are the same answer whatever the coding."""

from __future__ import annotations

import gzip

import pytest
import zstandard
from attnscope.app.compression import CompressionMiddleware, accepted
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

TEXT = "The cat sat on the mat. Then the cat saw the dog."
BODY = {"text": TEXT, "include": ["pattern", "attn_scores_raw", "stats"]}


@pytest.mark.parametrize(
    "header,codings",
    [
        ("", set()),
        ("gzip, deflate, br, zstd", {"gzip", "deflate", "br", "zstd"}),
        ("zstd;q=0, GZip;q=0.5", {"gzip"}),
        ("zstd; q=0.0 , gzip", {"gzip"}),
        ("identity, zstd;q=x", {"identity"}),
        (" , ;q=1", set()),
    ],
)
def test_accepted_codings_leave_out_q_zero(header, codings):
    assert accepted(header) == codings


def without_timing(body: bytes) -> bytes:
    return body.rsplit(b',"timing_ms":', 1)[0]


def raw_post(client: TestClient, accept: str):
    """The answer's bytes as they came over the wire, and its headers (httpx would decode them)."""
    with client.stream("POST", "/api/attention", json=BODY, headers={"Accept-Encoding": accept}) as r:
        assert r.status_code == 200
        return b"".join(r.iter_raw()), r.headers


def test_each_coding_carries_the_same_answer(client):
    plain, headers = raw_post(client, "identity")
    assert "content-encoding" not in headers and len(plain) > 1024
    for accept, coding, decode in [
        ("gzip, deflate, br, zstd", "zstd", zstandard.ZstdDecompressor().decompress),
        ("zstd;q=0, gzip", "gzip", gzip.decompress),
        ("gzip", "gzip", gzip.decompress),
    ]:
        wire, headers = raw_post(client, accept)
        assert headers["content-encoding"] == coding and "accept-encoding" in headers["vary"].lower()
        assert int(headers["content-length"]) == len(wire) < len(plain)
        assert without_timing(decode(wire)) == without_timing(plain)


def test_small_answers_go_as_they_are(client):
    r = client.get("/healthz", headers={"Accept-Encoding": "zstd"})
    assert r.status_code == 200 and "content-encoding" not in r.headers


def test_a_streamed_answer_is_one_zstd_stream_flushed_as_it_goes():
    parts = [b"x" * 2000, b"y" * 10, b"z" * 3000]

    async def chunks():
        for part in parts:
            yield part

    async def endpoint(request):
        return StreamingResponse(chunks(), media_type="text/plain")

    app = Starlette(routes=[Route("/", endpoint)])
    app.add_middleware(CompressionMiddleware, minimum_size=1024)
    with TestClient(app) as c, c.stream("GET", "/", headers={"Accept-Encoding": "zstd"}) as r:
        assert r.headers["content-encoding"] == "zstd" and "content-length" not in r.headers
        wire = b"".join(r.iter_raw())
    out = zstandard.ZstdDecompressor().decompressobj().decompress(wire)
    assert out == b"".join(parts)
