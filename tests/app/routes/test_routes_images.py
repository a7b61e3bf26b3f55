"""The routes beside /api/attention with an image: each lays the prompt out as /api/attention does
(the same ids, token_kinds and boxes) and answers what transformers computes on those ids and
pixels: eager attention for rollout, hooks for head effects and the lens, ``generate`` for
generation, a knocking-out attention for knockout, the model's logits and q·kᵀ for the splits."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from tests.kit.app import attention, served  # noqa: E402
from tests.kit.vision import b64, build_each, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat. The cat"
PNG = image_bytes(60, 40)
IMAGE = "data:image/png;base64," + b64(PNG)
NAMES = ["llava", "gemma3", "qwen2_5_vl", "idefics3", "mistral3"]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from attnscope.model.registry import load_model
    from attnscope.model.vision.images import decode_image

    root = tmp_path_factory.mktemp("vision_routes")
    dirs = build_each(NAMES, root)
    with served(dirs) as clients:
        image = decode_image(PNG, 10**7)
        prompts = {name: load_model(d, device="cpu").backend.prepare(TEXT, image) for name, d in dirs.items()}
        yield {"clients": clients, "dirs": dirs, "prompts": prompts}


def eager(app, name: str, implementation: str = "eager"):
    from transformers import AutoModelForImageTextToText

    impl = {"": implementation, "text_config": implementation, "vision_config": "sdpa"}
    return AutoModelForImageTextToText.from_pretrained(app["dirs"][name], attn_implementation=impl).eval()


def run(model, prompt, **kwargs):
    with torch.no_grad():
        return model(input_ids=torch.tensor([prompt.ids]), **prompt.inputs, **kwargs)


def post(app, name: str, url: str, **body) -> dict:
    r = app["clients"][name].post(url, json={"text": TEXT, "image": IMAGE, **body})
    assert r.status_code == 200, r.text
    return r.json()


def same_layout(got: dict, app, name: str) -> None:
    """The answer's token_kinds and image are /api/attention's for the same text and image."""
    ref = attention(app["clients"][name], text=TEXT, image=IMAGE, top_k=0, include=[])
    assert ref["token_ids"] == app["prompts"][name].ids
    assert got["token_kinds"] == ref["token_kinds"] and got["image"] == ref["image"]
    if "tokens" in got:
        assert got["tokens"] == ref["tokens"]


def language_model(model) -> torch.nn.Module:
    """The decoder inside an image-text model: ``language_model``, or ``text_model`` (Idefics3, SmolVLM)."""
    inner = model.model
    return inner.text_model if hasattr(inner, "text_model") else inner.language_model


def layers(model) -> torch.nn.ModuleList:
    return language_model(model).layers


@pytest.mark.parametrize("name", NAMES)
def test_rollout_is_eager_attention_multiplied(app, name):
    prompt = app["prompts"][name]
    got = post(app, name, "/api/rollout", residual=True)
    same_layout(got, app, name)
    out = run(eager(app, name), prompt, output_attentions=True)
    T = len(prompt.ids)
    acc = torch.eye(T, dtype=torch.float64)
    for att in out.attentions:
        a = 0.5 * att[0].double().mean(0) + 0.5 * torch.eye(T, dtype=torch.float64)
        acc = (a / a.sum(-1, keepdim=True)) @ acc
    served = torch.tensor(got["rollout"][-1], dtype=torch.float64)
    torch.testing.assert_close(served, acc[T - 1], atol=2e-4, rtol=0)


def _logprob(model, prompt, position: int, token: int) -> float:
    return float(torch.log_softmax(run(model, prompt).logits[0, position].double(), -1)[token])


def _assert_hooks(app, name: str, got: dict) -> None:
    """Each served delta is the log-prob change with the head's slice of the o_proj input hooked to 0."""
    prompt = app["prompts"][name]
    model = eager(app, name)
    position, token = got["position"], got["token_id"]
    base = _logprob(model, prompt, position, token)
    assert got["logprob"] == pytest.approx(base, abs=1e-4)
    hs = model.config.get_text_config().head_dim
    for layer, row in enumerate(got["delta"]):
        for head, delta in enumerate(row):
            def zero(module, args, head=head):
                x = args[0].clone()
                x[..., head * hs : (head + 1) * hs] = 0.0
                return (x, *args[1:])

            handle = layers(model)[layer].self_attn.o_proj.register_forward_pre_hook(zero)
            try:
                assert delta == pytest.approx(_logprob(model, prompt, position, token) - base, abs=1e-4)
            finally:
                handle.remove()


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_head_effects_equal_hooks(app, name, inside):
    """At the last token, and at the first image token (Gemma 3's sees the image tokens after it)."""
    prompt = app["prompts"][name]
    got = post(app, name, "/api/head-effects", **({"position": prompt.kinds.index("image")} if inside else {}))
    same_layout(got, app, name)
    _assert_hooks(app, name, got)


@pytest.mark.parametrize("name", ["llava", "qwen2_5_vl"])
def test_head_effects_batches_sized_by_the_tokens_run(app, name, monkeypatch):
    """At position 0 a pass still runs the whole prompt (the image with it): each batch of switched-off
    heads fits the budget at that length, not at the prefix's one token."""
    from attnscope.model import ablation
    from attnscope.model.vision.backend import VisionBackend

    cfg = eager(app, name).config.get_text_config()

    def per_row(T: int) -> int:  # what rows_per_batch charges a row of T tokens
        return 4 * T * (2 * cfg.num_attention_heads * T + 16 * cfg.hidden_size)

    T = len(app["prompts"][name].ids)
    monkeypatch.setattr(ablation, "ROWS_BUDGET_BYTES", 3 * per_row(T))
    batches: list[tuple[int, int]] = []
    last_logits = VisionBackend.last_logits

    def spy(self, idx, opts, at=-1, **inputs):
        batches.append(tuple(idx.shape))
        return last_logits(self, idx, opts, at=at, **inputs)

    monkeypatch.setattr(VisionBackend, "last_logits", spy)
    got = post(app, name, "/api/head-effects", position=0)
    assert got["position"] == 0
    heads = cfg.num_hidden_layers * cfg.num_attention_heads
    assert sum(rows for rows, _ in batches[1:]) == heads and len(batches) > 2  # the clean pass, then the heads
    for rows, length in batches:
        assert length == T and rows * per_row(length) <= ablation.ROWS_BUDGET_BYTES
    _assert_hooks(app, name, got)


@pytest.mark.parametrize("name", NAMES)
def test_generate_is_transformers_greedy(app, name):
    import orjson

    prompt = app["prompts"][name]
    r = app["clients"][name].post("/api/generate", json={"text": TEXT, "image": IMAGE, "max_new_tokens": 4})
    assert r.status_code == 200, r.text
    lines = [orjson.loads(line) for line in r.content.splitlines()]
    steps = [line for line in lines if "step" in line]
    same_layout(steps[0], app, name)
    assert all("token_kinds" not in s for s in steps[1:])
    assert len(steps[0]["attention_mean"]) == len(prompt.ids)
    with torch.no_grad():
        out = eager(app, name).generate(
            input_ids=torch.tensor([prompt.ids]), **prompt.inputs, max_new_tokens=4, do_sample=False
        )
    want = out[0, len(prompt.ids) :].tolist()
    assert [s["token_id"] for s in steps] == want[: len(steps)]


def test_text_generation_after_an_image_request_is_transformers_greedy(app):
    """Qwen's model keeps the last image pass's position delta (``rope_deltas``): a text generation
    after an image request counts its own positions, as ``generate`` on a fresh model does."""
    import orjson
    from attnscope.model.registry import load_model

    post(app, "qwen2_5_vl", "/api/attention", top_k=0, include=[])
    r = app["clients"]["qwen2_5_vl"].post("/api/generate", json={"text": TEXT, "max_new_tokens": 6})
    assert r.status_code == 200, r.text
    steps = [line for line in map(orjson.loads, r.content.splitlines()) if "step" in line]
    ids = load_model(app["dirs"]["qwen2_5_vl"], device="cpu").tokenizer.encode_ids(TEXT)
    with torch.no_grad():
        out = eager(app, "qwen2_5_vl").generate(input_ids=torch.tensor([ids]), max_new_tokens=6, do_sample=False)
    assert [s["token_id"] for s in steps] == out[0, len(ids) :].tolist()


@pytest.mark.parametrize("name", NAMES)
def test_lens_is_the_final_norm_over_hidden_states(app, name):
    prompt = app["prompts"][name]
    got = post(app, name, "/api/lens", top_k=3)
    same_layout(got, app, name)
    model = eager(app, name)
    trunk = language_model(model)
    kept = []
    entering = lambda m, a, k: kept.append(a[0] if a else k["hidden_states"])  # noqa: E731
    leaving = lambda m, a, o: kept.append(o[0] if isinstance(o, tuple) else o)  # noqa: E731
    hooks = [trunk.layers[0].register_forward_pre_hook(entering, with_kwargs=True)]
    hooks += [block.register_forward_hook(leaving) for block in trunk.layers]
    try:
        out = run(model, prompt)
    finally:
        for h in hooks:
            h.remove()
    assert len(got["residuals"]) == len(kept)
    for residual, x in zip(got["residuals"], kept):
        with torch.no_grad():
            logits = model.lm_head(trunk.norm(x))[0].double()
        cap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        probs = torch.softmax(logits, -1)
        for t, top in enumerate(residual["top"]):
            for entry in top:
                assert entry["prob"] == pytest.approx(float(probs[t, entry["id"]]), abs=1e-5)
            assert top[0]["prob"] == pytest.approx(float(probs[t].max()), abs=1e-5)
    own = torch.softmax(out.logits[0].double(), -1)
    assert [top[0]["id"] for top in got["residuals"][-1]["top"]] == own.argmax(-1).tolist()


@pytest.mark.parametrize("name", NAMES)
def test_knockout_equals_a_knocking_attention(app, name):
    from tests.kit.interventions import ORACLE, knocked_out, register_oracle

    prompt = app["prompts"][name]
    image = [i for i, k in enumerate(prompt.kinds) if k == "image"]
    T = len(prompt.ids)
    edges = [{"layer": 1, "query": [image[-1] + 1, T], "key": [image[0], image[-1] + 1]}]
    got = post(app, name, "/api/knockout", edges=edges)
    same_layout(got, app, name)
    register_oracle()
    model = eager(app, name, ORACLE)
    token = got["token_id"]
    assert got["logprob_before"] == pytest.approx(_logprob(model, prompt, T - 1, token), abs=1e-4)
    with knocked_out([(1, None, image[-1] + 1, T, image[0], image[-1] + 1)]):
        after = _logprob(model, prompt, T - 1, token)
    assert got["logprob_after"] == pytest.approx(after, abs=1e-4)
    assert got["logprob_after"] != pytest.approx(got["logprob_before"], abs=1e-3)  # the image mattered


@pytest.mark.parametrize("position", [None, 3])
def test_attribution_adds_up_to_transformers_logit(app, position):
    prompt = app["prompts"]["llava"]
    got = post(app, "llava", "/api/attribution", **({} if position is None else {"position": position}))
    same_layout(got, app, "llava")
    logit = float(run(eager(app, "llava"), prompt).logits[0, got["position"], got["token_id"]])
    assert got["logit"] == pytest.approx(logit, abs=1e-4)
    total = sum(sum(row) for row in got["heads"]) + sum(got["mlps"]) + got["embed"] + got["rest"]
    assert total == pytest.approx(logit, abs=1e-3)


def test_qk_attribution_score_is_eager_q_dot_k(app):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    from tests.kit.decompositions import _SEEN, _capture_qk

    prompt = app["prompts"]["llava"]
    query, key = len(prompt.ids) - 1, prompt.kinds.index("image")
    got = post(app, "llava", "/api/qk-attribution", layer=1, head=3, query=query, key=key)
    same_layout(got, app, "llava")
    AttentionInterface.register("decomp_oracle", _capture_qk)
    AttentionMaskInterface.register("decomp_oracle", eager_mask)
    _SEEN.clear()
    run(eager(app, "llava", "decomp_oracle"), prompt)
    q, k = _SEEN["qk"][1]  # (nh, T, hs), (n_kv, T, hs)
    want = float(q[3, query].double() @ k[3 * k.shape[0] // q.shape[0], key].double())
    assert got["score"] == pytest.approx(want, rel=1e-4, abs=1e-4)
    assert sum(map(sum, got["matrix"])) == pytest.approx(got["score"], rel=1e-3, abs=1e-3)
