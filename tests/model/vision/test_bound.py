"""A batch over one prompt's image (head effects' rows): the vision tower runs once, its features go in
once per row, and each row's logits are what the model gives that many copies of the pixels."""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.model.options import AttentionOptions  # noqa: E402

from tests.kit.vision import (  # noqa: E402
    build_gemma3,
    build_idefics3,
    build_llava,
    build_pixtral,
    build_qwen_vl,
    load_built,
    prompt_of,
)

BUILDERS = {
    "llava": build_llava,
    "gemma3": build_gemma3,
    "idefics3": build_idefics3,
    "mistral3": build_pixtral,
    "llava_pixtral": lambda out: build_pixtral(out, model_type="llava"),
    **{t: (lambda out, t=t: build_qwen_vl(out, t)) for t in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_built(BUILDERS, tmp_path_factory.mktemp("bound"))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_rows_read_the_image_once_and_equal_repeated_pixels(models, name, monkeypatch):
    lm = models[name]
    prompt = prompt_of(lm)
    bound = lm.backend.with_image(prompt)
    trunk = lm.backend.trunk
    calls = []
    own = trunk.get_image_features

    @functools.wraps(own)
    def counted(*args, **kwargs):
        calls.append(1)
        return own(*args, **kwargs)

    monkeypatch.setattr(trunk, "get_image_features", counted)
    n = prompt.kinds.index("image") + 1  # a prefix that ends inside the image: the pass runs the whole prompt
    assert n < len(prompt.ids)
    for heads in ([(0, 0), (0, 1), (1, 2)], [(1, 0), (0, 3)]):
        opts = AttentionOptions(ablate_rows=tuple(frozenset({h}) for h in heads))
        got = bound.last_logits(torch.tensor([prompt.ids[:n]]).expand(len(heads), -1), opts)
        full = torch.tensor([prompt.ids]).expand(len(heads), -1)
        pixels = {k: v.repeat(len(heads), *[1] * (v.dim() - 1)) for k, v in prompt.inputs.items()}
        calls_before = len(calls)
        want = lm.backend.last_logits(full, opts, at=n - 1, **pixels)  # the model reads the pixels of every row
        assert len(calls) == calls_before + 1
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        assert not torch.equal(got[0], got[1])  # each row its own switched-off head
    assert len(calls) == 1 + 2  # the bound's tower once; the model's own once per pass above
