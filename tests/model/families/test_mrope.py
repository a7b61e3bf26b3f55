"""Generation on a model with multimodal RoPE (Qwen-VL) counts its positions from its own cache:
whatever image passes run before or between its steps (another request's), each generation, with
an image or without, is transformers' greedy ``generate`` on a fresh model, token for token."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.model.ablation import Step, generate  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.vision import build_qwen_vl, prompt_of  # noqa: E402

TYPES = ("qwen2_5_vl", "qwen3_vl")
TEXT = "The cat sat on the mat. The cat"
N = 8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("mrope")
    return {t: load_model(build_qwen_vl(root / t, t), device="cpu") for t in TYPES}


def hf_greedy(lm, ids: list[int], inputs: dict | None = None) -> list[int]:
    """transformers' greedy ``generate`` on a freshly loaded model (no image pass before it)."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(lm.path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([ids]), **(inputs or {}), max_new_tokens=N, do_sample=False)
    return out[0, len(ids) :].tolist()


def tokens(steps) -> list[int]:
    return [s.token_id for s in steps if isinstance(s, Step)]


@pytest.mark.parametrize("name", TYPES)
def test_text_generation_after_an_image_pass_is_transformers_greedy(models, name):
    lm = models[name]
    image = prompt_of(lm)
    lm.backend.run(image.ids, AttentionOptions(), [], image=image)  # leaves the image's delta on the model
    assert int(lm.backend.trunk.rope_deltas.abs().sum()) > 0
    ids = lm.tokenizer.encode_ids(TEXT)
    assert tokens(generate(lm.backend, ids, N)) == hf_greedy(lm, ids)


@pytest.mark.parametrize("name", TYPES)
def test_interleaved_generations_each_transformers_greedy(models, name):
    """Three generations step by step in turn (an image, a text, another image of another shape): each is
    what ``generate`` gives it alone."""
    lm = models[name]
    wide, tall = prompt_of(lm, 60, 40), prompt_of(lm, 30, 90)
    text = lm.tokenizer.encode_ids(TEXT)
    deltas = [lm.backend.trunk.get_rope_index(torch.tensor([p.ids]), **p.inputs)[1].item() for p in (wide, tall)]
    assert deltas[0] != deltas[1] and 0 not in deltas  # each image its own shift of positions
    runs = [
        generate(lm.backend.with_image(wide), wide.ids, N),
        generate(lm.backend, text, N),
        generate(lm.backend.with_image(tall), tall.ids, N),
    ]
    got: list[list] = [[], [], []]
    for _ in range(N + 1):
        for out, it in zip(got, runs):
            out.append(next(it, None))
    assert tokens(got[0]) == hf_greedy(lm, wide.ids, wide.inputs)
    assert tokens(got[1]) == hf_greedy(lm, text)
    assert tokens(got[2]) == hf_greedy(lm, tall.ids, tall.inputs)
