"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL (``model_type: qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``,
``qwen3_vl_moe``): one image resized by the processor's smart resize (each side to a multiple of
``patch_size · merge_size``, 28 or 32 px, the area kept within ``size.shortest_edge`` ..
``size.longest_edge`` pixels, the aspect ratio as near as it can), cut into ``patch_size`` squares
whose ``merge_size × merge_size`` (2 × 2) blocks are merged into one token each, read row by row
between ``<|vision_start|>`` and ``<|vision_end|>`` markers. Each token's box is its block of the
resized image scaled back along each axis (the resize is not cropped and not padded).

The language model's mask is causal over the image tokens too (transformers builds it with
``create_causal_mask`` from no attention mask); the image's tokens differ from text tokens in their
multimodal RoPE positions only (``get_rope_index`` from ``image_grid_thw`` and ``mm_token_type_ids``).

Qwen's processors load a video processor that needs torchvision; where it cannot load,
:class:`QwenProcessor` does the processor's image path from the folder's own image processor,
tokenizer and chat template, the way the processor does it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .layout import Geometry, Laid, LayoutError, grid_boxes, own_processor

MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


def smart_resize(width: int, height: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The size (w, h) the Qwen image processor resizes a ``width × height`` image to."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as resize

    try:
        h, w = resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    except ValueError as e:  # an aspect ratio over 200
        raise LayoutError(str(e)) from e
    return w, h


class QwenLayout:
    name = "qwen"
    model_inputs = ("pixel_values", "image_grid_thw", "mm_token_type_ids")
    patch_inputs = ("pixel_values",)  # a row per patch, not per prompt: a batch's images one after another

    @staticmethod
    def placeholder(processor) -> str:
        return f"<|vision_start|>{processor.image_token}<|vision_end|>"

    def __init__(self, config, processor) -> None:
        ip = own_processor(config, processor, ("Qwen2VLImageProcessor",), "Qwen's own")
        vc = config.vision_config
        self.patch, self.merge = int(ip.patch_size), int(ip.merge_size)
        if (self.patch, self.merge) != (int(vc.patch_size), int(vc.spatial_merge_size)):
            raise LayoutError(
                f"image processor patches {self.patch} px merged {self.merge}×{self.merge} for a tower of "
                f"{vc.patch_size} px merged {vc.spatial_merge_size}×{vc.spatial_merge_size}: not traced"
            )
        size = dict(ip.size or {})
        if not ip.do_resize or not (size.get("shortest_edge") and size.get("longest_edge")):
            raise LayoutError(f"image processor size {size}: attnscope traces Qwen's smart resize only")
        self.min_pixels, self.max_pixels = int(size["shortest_edge"]), int(size["longest_edge"])
        self.image_token_id = int(config.image_token_id)
        self.markers = {int(config.vision_start_token_id), int(config.vision_end_token_id)}

    def lay_out(self, ids: list[int], width: int, height: int) -> Laid:
        cell = self.patch * self.merge  # resized pixels per token, each axis
        w, h = smart_resize(width, height, cell, self.min_pixels, self.max_pixels)
        geo = Geometry(width=width, height=height, sx=width / w, sy=height / h)
        kinds = ["image" if i == self.image_token_id else "marker" if i in self.markers else "text" for i in ids]
        boxes = grid_boxes(geo, h // cell, w // cell, cell, cell)
        if kinds.count("image") != len(boxes):
            raise LayoutError(f"{kinds.count('image')} image tokens for {len(boxes)} merged patches")
        return Laid(kinds=kinds, boxes=boxes)


def _chat_template(path: Path, tokenizer) -> str | None:
    """The processor's chat template as transformers finds it: the legacy ``chat_template.json``, else
    ``chat_template.jinja``, else the tokenizer's own."""
    legacy, raw = path / "chat_template.json", path / "chat_template.jinja"
    if legacy.is_file():
        return json.loads(legacy.read_text(encoding="utf-8"))["chat_template"]
    if raw.is_file():
        return raw.read_text(encoding="utf-8")
    return getattr(tokenizer, "chat_template", None)


class QwenProcessor:
    """What Qwen's processor does with one text and one image, from its image processor and tokenizer:
    the image processed, the text's one image placeholder repeated once per merged patch, the text
    tokenized, and ``mm_token_type_ids`` 1 on image tokens, 0 elsewhere."""

    def __init__(self, image_processor, tokenizer, chat_template: str | None) -> None:
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)

    @classmethod
    def from_pretrained(cls, path: Path) -> QwenProcessor:
        from transformers import AutoImageProcessor, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        image_processor = AutoImageProcessor.from_pretrained(path, local_files_only=True)
        return cls(image_processor, tokenizer, _chat_template(Path(path), tokenizer))

    def apply_chat_template(self, conversation, add_generation_prompt: bool = False, tokenize: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            conversation, chat_template=self.chat_template, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def __call__(self, text: str, images: list, return_tensors: str = "pt") -> dict[str, torch.Tensor]:
        if text.count(self.image_token) != len(images) or len(images) != 1:
            raise LayoutError(f"{text.count(self.image_token)} image placeholders for {len(images)} images")
        out = dict(self.image_processor(images=images, return_tensors="pt"))
        n = int(out["image_grid_thw"][0].prod()) // self.image_processor.merge_size**2
        text = text.replace(self.image_token, self.image_token * n)
        enc = self.tokenizer(text, return_tensors="pt")
        out.update(enc)
        out["mm_token_type_ids"] = (enc["input_ids"] == self.image_token_id).to(torch.int64)
        return out
