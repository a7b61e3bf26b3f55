"""Tiny image-text-to-text models written to disk with a processor beside them (``AutoProcessor``
reloads it), built from transformers' configs: q/k weights scaled up as in :mod:`tests.familykit`.

Processors are built from the slow (PIL) image processor and a fast tokenizer directly: the
torchvision "fast" image processors do not load on these machines.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import torch
from attnscope.model.ours.checkpoint import SHIPPED

from tests.kit.family import QK_GAIN

TEMPLATE = (
    "{% for m in messages %}USER: {% for c in m['content'] %}{% if c['type'] == 'image' %}{{ image }}\n"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endfor %}{% if add_generation_prompt %} ASSISTANT:{% endif %}"
)


def _tokenizer(specials: list[str], **named):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))
    tk.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", **named)


def _text(model_type: str, vocab: int, **extra) -> dict:
    return dict(
        model_type=model_type, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=512, vocab_size=vocab, **extra,
    )


def _vision(model_type: str, image_size: int, patch: int) -> dict:
    return dict(
        model_type=model_type, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=image_size, patch_size=patch,
    )


def _save(model, out: Path, seed: int) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            language = "language_model" in name or "text_model" in name  # Idefics3 / SmolVLM: text_model
            if language and ("q_proj.weight" in name or "k_proj.weight" in name):
                p.mul_(QK_GAIN)
            if name.endswith("mm_input_projection_weight"):  # Gemma 3's projector starts at zero
                torch.manual_seed(seed + 1)
                p.copy_(torch.randn_like(p) * 0.5)
    model.save_pretrained(out)


def build_llava(out: Path, seed: int = 0, strategy: str = "default", shortest: int = 28, crop: int = 28) -> Path:
    """LLaVA with a CLIP tower: 14-px patches, resize the shortest side to ``shortest``, centre crop ``crop``."""
    from transformers import AutoConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    out.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(["<image>"])
    image_id = tok.convert_tokens_to_ids("<image>")
    ip = LlavaImageProcessorPil(size={"shortest_edge": shortest}, crop_size={"height": crop, "width": crop})
    proc = LlavaProcessor(
        image_processor=ip, tokenizer=tok, patch_size=14, vision_feature_select_strategy=strategy,
        num_additional_image_tokens=1, image_token="<image>", chat_template=TEMPLATE.replace("{{ image }}", "<image>"),
    )
    proc.save_pretrained(out)
    cfg = AutoConfig.for_model(
        "llava", text_config=_text("llama", image_id + 1), vision_config=_vision("clip_vision_model", crop, 14),
        image_token_index=image_id, vision_feature_select_strategy=strategy, vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    torch.manual_seed(seed)
    _save(LlavaForConditionalGeneration(cfg), out, seed)
    return out


def build_gemma3(out: Path, seed: int = 0, image_size: int = 56, tokens: int = 4) -> Path:
    """Gemma 3 with a SigLIP tower of ``image_size`` px in 14-px patches, pooled to ``tokens`` image tokens."""
    from transformers import AutoConfig, Gemma3ForConditionalGeneration, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    tok = _tokenizer(
        specials,
        extra_special_tokens={"boi_token": specials[0], "eoi_token": specials[1], "image_token": specials[2]},
    )
    boi, eoi, image = (tok.convert_tokens_to_ids(t) for t in specials)
    ip = Gemma3ImageProcessorPil(size={"height": image_size, "width": image_size})
    proc = Gemma3Processor(
        image_processor=ip, tokenizer=tok, image_seq_length=tokens,
        chat_template=TEMPLATE.replace("{{ image }}", "<start_of_image>"),
    )
    proc.save_pretrained(out)
    text = _text("gemma3_text", image + 1, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                 layer_types=["sliding_attention", "full_attention"])
    cfg = AutoConfig.for_model(
        "gemma3", text_config=text, vision_config=_vision("siglip_vision_model", image_size, 14),
        mm_tokens_per_image=tokens, boi_token_index=boi, eoi_token_index=eoi, image_token_index=image,
    )
    torch.manual_seed(seed)
    _save(Gemma3ForConditionalGeneration(cfg), out, seed)
    return out


def build_idefics3(
    out: Path, seed: int = 0, model_type: str = "idefics3", longest: int = 84, tile: int = 28, splitting: bool = True
) -> Path:
    """Idefics3 or SmolVLM: ``tile``-px views of 7-px patches shuffled by 2 (4 tokens a view), the longest side
    resized to ``longest``. SmolVLM's own processor does not load here (its video processor needs torchvision):
    a SmolVLM model gets Idefics3's processor around SmolVLM's image processor, which lays out the same prompt."""
    from transformers import AutoConfig, AutoModelForImageTextToText, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    out.mkdir(parents=True, exist_ok=True)
    tags = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tok = _tokenizer(["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *tags])
    image_processor = SmolVLMImageProcessorPil if model_type == "smolvlm" else Idefics3ImageProcessorPil
    ip = image_processor(
        size={"longest_edge": longest}, max_image_size={"longest_edge": tile}, do_image_splitting=splitting
    )
    named = dict(image_seq_len=(tile // 7 // 2) ** 2, chat_template=TEMPLATE.replace("{{ image }}", "<image>"))
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, **named)
    proc.save_pretrained(out)
    cfg = AutoConfig.for_model(
        model_type, text_config=_text("llama", len(tok)), vision_config=_vision(f"{model_type}_vision", tile, 7),
        scale_factor=2, image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    torch.manual_seed(seed)
    _save(AutoModelForImageTextToText.from_config(cfg), out, seed)
    return out


def pixtral_processor_class():
    """transformers' ``PixtralProcessor``. Its module imports the torchvision image processor's module for one
    function (the number of tokens for a size) that the PIL module holds word for word; where torchvision is
    missing (these machines) a stand-in module holds the PIL one's, and the real class is set on its package, where
    ``AutoProcessor`` looks it up (and otherwise finds a placeholder that refuses to load)."""
    import sys
    import types

    from transformers.utils import is_torchvision_available

    if not is_torchvision_available():
        import transformers.models.pixtral.image_processing_pil_pixtral as pil

        name = "transformers.models.pixtral.image_processing_pixtral"
        stand_in = sys.modules.setdefault(name, types.ModuleType(name))
        stand_in.get_resize_output_image_size = pil.get_resize_output_image_size
    import transformers.models.pixtral as package
    from transformers.models.pixtral.processing_pixtral import PixtralProcessor

    package.PixtralProcessor = PixtralProcessor
    return PixtralProcessor


def build_pixtral(out: Path, seed: int = 0, model_type: str = "mistral3", longest: int = 48) -> Path:
    """Pixtral's layout: a ``mistral3`` model (8-px patches merged 2 × 2) or a ``llava`` one with a pixtral
    tower (no merger), images scaled to fit ``longest`` px."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    PixtralProcessor = pixtral_processor_class()

    out.mkdir(parents=True, exist_ok=True)
    specials = ["[IMG]", "[IMG_BREAK]", "[IMG_END]"]
    tok = _tokenizer(specials)
    image_id = tok.convert_tokens_to_ids("[IMG]")
    merge = 2 if model_type == "mistral3" else 1
    ip = PixtralImageProcessorPil(size={"longest_edge": longest}, patch_size={"height": 8, "width": 8})
    proc = PixtralProcessor(
        image_processor=ip, tokenizer=tok, patch_size=8, spatial_merge_size=merge,
        chat_template=TEMPLATE.replace("{{ image }}", "[IMG]"),
    )
    proc.save_pretrained(out)
    vision = dict(_vision("pixtral", longest, 8), head_dim=16)
    extra = dict(spatial_merge_size=merge) if merge > 1 else dict(vision_feature_select_strategy="full")
    cfg = AutoConfig.for_model(
        model_type, text_config=_text("mistral", len(tok)), vision_config=vision, image_token_index=image_id,
        vision_feature_layer=-1, **extra,
    )
    torch.manual_seed(seed)
    _save(AutoModelForImageTextToText.from_config(cfg), out, seed)
    return out


def image_bytes(width: int, height: int, fmt: str = "PNG", seed: int = 0) -> bytes:
    """A random-noise image of ``width × height`` encoded as ``fmt``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


QWEN_VISION = {  # tiny towers, one per Qwen generation: patch sizes 14, 14 and 16, merged 2 × 2
    "qwen2_vl": dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=14),
    "qwen2_5_vl": dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14, out_hidden_size=64,
        window_size=56, fullatt_block_indexes=[1],
    ),
    "qwen3_vl": dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, out_hidden_size=64,
        num_position_embeddings=16, deepstack_visual_indexes=[0],
    ),
}
QWEN_VISION["qwen3_vl_moe"] = QWEN_VISION["qwen3_vl"]
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def build_qwen_vl(
    out: Path, model_type: str = "qwen2_5_vl", seed: int = 0, min_tokens: int = 4, max_tokens: int = 9, **text_shape
):
    """A Qwen-VL folder as the hub ships one (tokenizer, image processor, chat template, processor_config)
    with an image processor whose smart resize keeps ``min_tokens`` .. ``max_tokens`` merged patches;
    ``text_shape`` overrides the language model's config (layers, heads, width)."""
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tok = _tokenizer(specials)
    start, end, image, video = (tok.convert_tokens_to_ids(t) for t in specials)
    vision = dict(QWEN_VISION[model_type])
    if "hidden_size" in text_shape and "out_hidden_size" in vision:  # the tower's output feeds the language model
        vision["out_hidden_size"] = text_shape["hidden_size"]
    cell = vision["patch_size"] * 2
    size = {"shortest_edge": cell**2 * min_tokens, "longest_edge": cell**2 * max_tokens}
    ip = Qwen2VLImageProcessorPil(patch_size=vision["patch_size"], size=size)
    tok.save_pretrained(out)
    ip.save_pretrained(out)
    template = TEMPLATE.replace("{{ image }}", "<|vision_start|><|image_pad|><|vision_end|>")
    (out / "chat_template.jinja").write_text(template)
    processor = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}
    processor = processor.get(model_type, "Qwen3VLProcessor")
    (out / "processor_config.json").write_text(json.dumps({"processor_class": processor}))
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    if model_type.startswith("qwen3_vl"):
        rope["mrope_interleaved"] = True
    text = {**_text(f"{model_type}_text", video + 1, head_dim=16, rope_parameters=rope), **text_shape}
    text.update(bos_token_id=None, eos_token_id=None, **(MOE if model_type.endswith("moe") else {}))
    cfg = AutoConfig.for_model(
        model_type, text_config=text, vision_config=vision, vision_start_token_id=start, vision_end_token_id=end,
        image_token_id=image, video_token_id=video,
    )
    torch.manual_seed(seed)
    _save(AutoModelForImageTextToText.from_config(cfg), out, seed)
    return out


ONE_PER_TYPE = {  # model type -> its builder
    "llava": build_llava,
    "gemma3": build_gemma3,
    "qwen2_5_vl": build_qwen_vl,
    "idefics3": build_idefics3,
    "mistral3": build_pixtral,
}


def prompt_of(lm, width: int = 60, height: int = 40, text: str = "The cat sat on the mat."):
    """``text`` and a random ``width × height`` image, laid out by ``lm``'s processor."""
    from attnscope.model.vision.images import decode_image

    return lm.backend.prepare(text, decode_image(image_bytes(width, height), 10**7))


def traced_and_eager(lm, prompt):
    """Every layer of ``lm`` on ``prompt`` as a plain-list trace, the eager model of the same folder,
    and its ``output_attentions`` on the same ids and pixels: ``(trace, eager, out)``."""
    from attnscope.model.options import AttentionOptions
    from transformers import AutoModelForImageTextToText

    trace: list = []
    lm.backend.hidden(prompt.ids, AttentionOptions(), trace, image=prompt)
    eager = AutoModelForImageTextToText.from_pretrained(lm.path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = eager(input_ids=torch.tensor([prompt.ids]), output_attentions=True, **prompt.inputs)
    assert "image" in prompt.kinds and len(trace) == len(out.attentions)
    for t, want in zip(trace, out.attentions):
        assert t.pattern.shape == want.shape
        torch.testing.assert_close(t.pattern, want, atol=1e-5, rtol=0)
    return trace, eager, out



def load_built(builders: dict, root: Path) -> dict:
    """Each of ``builders`` (name -> a function writing a model folder) built under ``root`` and loaded on the CPU."""
    from attnscope.model.registry import load_model

    return {name: load_model(build(root / name), device="cpu") for name, build in builders.items()}


def assert_refused(path: Path, match: str, **config) -> None:
    """The model at ``path`` with ``config`` written into its config.json: loading it is refused in one line."""
    import pytest
    from attnscope.model.ours.checkpoint import CheckpointError
    from attnscope.model.registry import load_model

    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **config}))
    with pytest.raises(CheckpointError, match=match) as e:
        load_model(path, device="cpu")
    assert "\n" not in str(e.value)


def build_each(names, root: Path) -> dict[str, Path]:
    """Each model type of ``names`` (a key of :data:`ONE_PER_TYPE`) built with its defaults in ``root / name``."""
    return {name: ONE_PER_TYPE[name](root / name) for name in names}
