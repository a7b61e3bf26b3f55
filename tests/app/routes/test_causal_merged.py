"""The causal routes on T5Gemma 2, whose decoder heads attend to their own keys and the source's in one softmax
(``merged_softmax``): a decoder head has one output over both blocks, so the decoder and cross stacks name the
same heads. Each route answers exactly (held against transformers' eager model, its mask or a head's output
edited by hand) or is a 422 naming ``stack`` (or the field it cannot split) that says why."""

from __future__ import annotations

import contextlib

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModelForSeq2SeqLM  # noqa: E402
from transformers.models.t5gemma2 import modeling_t5gemma2 as t5g2  # noqa: E402

from tests.kit.app import served  # noqa: E402
from tests.kit.seq2seq import build_seq2seq  # noqa: E402

SOURCE = "The cat sat on the mat, and the dog saw the cat."
CORRUPT = "Then the dog ran to the red door and sat."
TARGET = "A dog sat on the log."
POSITION = 5  # a target position read by the routes


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    folder = build_seq2seq("t5gemma2", tmp_path_factory.mktemp("merged_causal") / "t5gemma2")
    ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with served({"m": folder}) as clients:
        yield clients["m"], ref


def post(client, url: str, **body) -> dict:
    subject = {} if "clean" in body else {"text": SOURCE}  # patching names its two sources clean and corrupt
    r = client.post(url, json={**subject, "target": TARGET, **body})
    assert r.status_code == 200, r.text
    return r.json()


def logprobs(ref, body: dict) -> torch.Tensor:
    """Eager's log-probabilities at ``POSITION`` on the ids an answer reports."""
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([body["source_ids"]]), decoder_input_ids=torch.tensor([body["target_ids"]]))
    return torch.log_softmax(out.logits[0, POSITION].double(), -1)


@contextlib.contextmanager
def masked_cells(layer: int, rows: range, cols: range, offset):
    """Eager's merged attention with the cells (rows, ``offset(S) +`` cols) of ``layer``'s mask forbidden."""
    plain = t5g2.eager_attention_forward

    def edited(module, q, k, v, mask, *args, **kwargs):
        if isinstance(module, t5g2.T5Gemma2MergedAttention) and module.layer_idx == layer:
            mask = mask.clone()
            start = offset(mask.shape[-1])
            shut = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
            mask[..., rows.start : rows.stop, start + cols.start : start + cols.stop] = shut
        return plain(module, q, k, v, mask, *args, **kwargs)

    t5g2.eager_attention_forward = edited
    try:
        yield
    finally:
        t5g2.eager_attention_forward = plain


@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_knockout_in_either_block_equals_eager_with_those_cells_masked(stack, merged):
    client, ref = merged
    # the last layer, next to the logits: in the first, these rows put almost no weight on their own first keys
    edge = {"layer": 1, "query": [2, POSITION + 1], "key": [0, 3]}
    body = post(client, "/api/knockout", stack=stack, position=POSITION, edges=[edge])
    before = logprobs(ref, body)
    n_source = len(body["source_ids"])
    offset = (lambda S: 0) if stack == "decoder" else (lambda S: S - n_source)  # the source's keys come last
    with masked_cells(1, range(2, POSITION + 1), range(0, 3), offset):
        after = logprobs(ref, body)
    token = body["token_id"]
    assert token == int(before.argmax())
    assert body["logprob_before"] == pytest.approx(float(before[token]), abs=1e-4)
    assert body["logprob_after"] == pytest.approx(float(after[token]), abs=1e-4)
    assert abs(body["logprob_after"] - body["logprob_before"]) > 1e-4


def test_head_effects_switch_off_one_output_shared_by_both_stacks(merged):
    client, ref = merged
    got = {s: post(client, "/api/head-effects", stack=s, position=POSITION) for s in ("decoder", "cross")}
    assert got["decoder"]["delta"] == got["cross"]["delta"]
    body = got["decoder"]
    layer, head = 1, 2
    o_proj = ref.get_decoder().layers[layer].self_attn.o_proj
    hs = o_proj.in_features // len(body["delta"][layer])

    def zero(module, args):
        x = args[0].clone()
        x[..., head * hs : (head + 1) * hs] = 0
        return (x,)

    before = logprobs(ref, body)
    handle = o_proj.register_forward_pre_hook(zero)
    try:
        after = logprobs(ref, body)
    finally:
        handle.remove()
    token = body["token_id"]
    assert body["logprob"] == pytest.approx(float(before[token]), abs=1e-4)
    assert body["delta"][layer][head] == pytest.approx(float(after[token] - before[token]), abs=1e-4)


def test_patching_a_head_patches_its_one_output_in_either_stack(merged):
    client, _ = merged
    got = {s: post(client, "/api/patching", clean=SOURCE, corrupt=CORRUPT, stack=s) for s in ("decoder", "cross")}
    assert got["decoder"]["heads"] == got["cross"]["heads"]
    assert got["decoder"]["clean_diff"] != got["decoder"]["corrupt_diff"]
    body = post(client, "/api/patching", clean=SOURCE, corrupt=CORRUPT, stack="cross", what="residual")
    gap = abs(body["clean_diff"] - body["corrupt_diff"])
    tol = 1e-5 * (1 + abs(body["clean_diff"])) / gap
    assert body["residual"][-1][body["position"]] == pytest.approx(1.0, abs=tol)


def test_the_lens_reads_the_decoders_stream_and_refuses_to_split_heads(merged):
    client, ref = merged
    got = {s: post(client, "/api/lens", stack=s) for s in ("decoder", "cross")}
    assert got["decoder"]["residuals"] == got["cross"]["residuals"]
    body = got["decoder"]
    assert body["residuals"][-1]["top"][POSITION][0]["id"] == int(logprobs(ref, body).argmax())
    r = client.post("/api/lens", json={"text": SOURCE, "target": TARGET, "heads": True})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "heads"]


@pytest.mark.parametrize(
    ("url", "extra"),
    [("/api/attribution", {}), *[("/api/qk-attribution", {"stack": s, "layer": 1, "head": 0, "query": 3, "key": 2})
                                 for s in ("encoder", "decoder", "cross")]],
)
def test_splits_not_worked_out_are_a_422_naming_stack_that_says_why(url, extra, merged):
    client, _ = merged
    r = client.post(url, json={"text": SOURCE, "target": TARGET, **extra})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "stack"] and "merged_softmax" in detail["msg"]


def test_comparing_two_encoder_decoders_is_a_422_naming_stack_that_says_why(merged):
    """Comparing two models holds heads one to one over one token sequence: an encoder-decoder (here with itself,
    nothing loaded) is refused before any second model is looked for, the message saying what it would take."""
    client, _ = merged
    name = client.app.state.attnscope.service.info["name"]
    r = client.post("/api/compare-models", json={"text": SOURCE, "target": TARGET, "model_b": name, "layer": 0,
                                                 "head": 0})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "stack"] and detail["type"] == "seq2seq_unsupported"
    assert "one sequence of tokens" in detail["msg"] and "stack by stack" in detail["msg"]
