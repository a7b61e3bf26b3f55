"""Pixtral's image layout (Mistral 3: ``model_type: mistral3``; Pixtral 12B: ``model_type: llava`` with a
``pixtral`` vision tower): the image keeps its own aspect ratio. It is scaled down (never up) to fit
``size.longest_edge`` on both sides (sizes floored), then each side is stretched up to the next multiple
of ``patch_size · spatial_merge_size`` pixels; the tower cuts it into ``patch_size`` squares and the
patch merger (Mistral 3) folds each ``spatial_merge_size``² block of them into one token. The tokens are
read row by row, an ``[IMG_BREAK]`` after each row but the last, which ends in ``[IMG_END]`` (both
``"marker"``). Each token's box is its ``patch_size · spatial_merge_size`` square of the resized image,
scaled back along each axis. The language model's mask stays causal over the image tokens.
"""

from __future__ import annotations

import math

from .layout import Geometry, Laid, LayoutError, grid_boxes, image_token, own_processor
from .llava import LlavaLayout


class PixtralLayout:
    name = "pixtral"
    model_inputs = ("pixel_values", "image_sizes")

    placeholder = staticmethod(image_token)

    def __init__(self, config, processor) -> None:
        vc = config.vision_config
        pixtral_tower = getattr(vc, "model_type", None) == "pixtral"
        ip = own_processor(config, processor, ("PixtralImageProcessor",), "Pixtral's own processor only", pixtral_tower)
        merge = int(getattr(config, "spatial_merge_size", 1))  # a llava model has no patch merger
        if config.model_type == "llava" and config.vision_feature_select_strategy != "full":
            raise LayoutError("a llava model with a pixtral tower drops its first patch unless the strategy is full")
        got = (getattr(processor, "patch_size", None), getattr(processor, "spatial_merge_size", None))
        if got != (int(vc.patch_size), merge):
            raise LayoutError(
                f"processor patch × merge {got[0]}×{got[1]} but model "
                f"{vc.patch_size}×{merge}: the processor and model disagree"
            )
        if getattr(ip, "do_center_crop", False) or not ip.do_resize or not ip.size.get("longest_edge"):
            raise LayoutError(f"image processor size {dict(ip.size)}: attnscope traces a longest_edge resize only")
        self.cell = int(vc.patch_size) * merge  # resized pixels per token, each axis
        self.longest = int(ip.size["longest_edge"])
        self.image_token_id = int(processor.image_token_id)
        self.markers = {int(processor.image_break_token_id), int(processor.image_end_token_id)}

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """The size (w, h) the processor resizes a ``width × height`` image to (its resize, in numbers)."""
        ratio = max(height / self.longest, width / self.longest)
        if ratio > 1:
            height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
        c = self.cell
        return ((width - 1) // c + 1) * c, ((height - 1) // c + 1) * c

    def lay_out(self, ids: list[int], width: int, height: int) -> Laid:
        w, h = self.resized(width, height)
        geo = Geometry(width=width, height=height, sx=width / w, sy=height / h)
        kinds = ["image" if i == self.image_token_id else "marker" if i in self.markers else "text" for i in ids]
        boxes = grid_boxes(geo, h // self.cell, w // self.cell, self.cell, self.cell)
        if kinds.count("image") != len(boxes):
            raise LayoutError(f"{kinds.count('image')} image tokens for {len(boxes)} merged patches")
        return Laid(kinds=kinds, boxes=boxes)


def llava_layout(config, processor):
    """A llava model's layout: Pixtral's with a pixtral tower, else LLaVA's own."""
    if getattr(config.vision_config, "model_type", None) == "pixtral":
        return PixtralLayout(config, processor)
    return LlavaLayout(config, processor)
