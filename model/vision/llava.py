"""LLaVA-style models (``model_type: llava`` with a CLIP or SigLIP vision tower): one image,
resized (the shortest side to ``size.shortest_edge``, or to ``size.height × size.width``),
optionally padded to a square first (``do_pad``) and centre-cropped (``crop_size``), cut into
``patch_size`` squares read row by row, one image token per square (and the CLS token first where
the model keeps it: ``vision_feature_select_strategy: full``, whose box is the whole crop).

Each square of the crop is mapped back through the crop offset, the resize scale and the padding
to the uploaded image's pixels, clipped to the image (a square of padding has an empty box).
"""

from __future__ import annotations

import numpy as np

from .layout import Box, Geometry, Laid, LayoutError, grid_boxes, image_token, processor_kind

TOWERS = ("clip_vision_model", "siglip_vision_model")
PROCESSORS = ("LlavaImageProcessor", "CLIPImageProcessor", "SiglipImageProcessor")


class LlavaLayout:
    name = "llava"
    model_inputs = ("pixel_values",)  # what the model reads of the processor's output, beside input_ids

    placeholder = staticmethod(image_token)

    def __init__(self, config, processor) -> None:
        tower = getattr(config.vision_config, "model_type", None)
        ip = processor.image_processor
        kind = processor_kind(ip)
        if tower not in TOWERS or kind not in PROCESSORS:
            raise LayoutError(
                f"a llava model with a {tower} vision tower and a {type(ip).__name__}: attnscope traces image "
                "patches exactly for CLIP or SigLIP towers with their own image processors only"
            )
        self.ip = ip
        self.fast = type(ip).__name__.endswith("Fast")  # torchvision's centre crop rounds toward zero
        self.patch = int(config.vision_config.patch_size)
        self.image_token_id = int(getattr(config, "image_token_id", None) or config.image_token_index)
        size = dict(ip.size or {})
        shortest_edge_only = size.get("shortest_edge") and not size.get("longest_edge")
        if not shortest_edge_only and not (size.get("height") and size.get("width")):
            raise LayoutError(f"image processor size {size}: attnscope traces shortest_edge or height × width resizes")

    def geometry(self, width: int, height: int) -> tuple[Geometry, int, int]:
        """The uploaded image's mapping and the size (w, h) of what the vision tower sees."""
        from transformers.image_transforms import get_resize_output_image_size
        from transformers.image_utils import ChannelDimension

        ip = self.ip
        geo = Geometry(width=width, height=height)
        w, h = width, height
        if getattr(ip, "do_pad", False):  # pad to a square, the image centred (LlavaImageProcessor)
            side = max(w, h)
            geo.pad_left, geo.pad_top = (side - w) // 2, (side - h) // 2
            w = h = side
        if ip.do_resize:
            size = dict(ip.size)
            if size.get("shortest_edge"):
                shape = np.broadcast_to(np.zeros(1, np.uint8), (3, h, w))  # a shape only: no pixels allocated
                rh, rw = get_resize_output_image_size(
                    shape, size=size["shortest_edge"], default_to_square=False, input_data_format=ChannelDimension.FIRST
                )
            else:
                rh, rw = int(size["height"]), int(size["width"])
            geo.sx, geo.sy = w / rw, h / rh
            w, h = rw, rh
        if ip.do_center_crop:
            ch, cw = int(ip.crop_size["height"]), int(ip.crop_size["width"])
            geo.left, geo.top = (int((w - cw) / 2), int((h - ch) / 2)) if self.fast else ((w - cw) // 2, (h - ch) // 2)
            w, h = cw, ch
        return geo, w, h

    def lay_out(self, ids: list[int], width: int, height: int) -> Laid:
        """Token kinds and the image tokens' boxes for ``ids`` as the processor laid them out."""
        geo, w, h = self.geometry(width, height)
        rows, cols = h // self.patch, w // self.patch
        kinds = ["image" if i == self.image_token_id else "text" for i in ids]
        n = kinds.count("image")
        boxes: list[Box] = grid_boxes(geo, rows, cols, self.patch, self.patch)
        if n == rows * cols + 1:  # the CLS token comes first: it carries the whole crop
            boxes = [geo.box(0, 0, w, h), *boxes]
        if n != len(boxes):
            raise LayoutError(f"{n} image tokens for a {rows}×{cols} patch grid: the processor and model disagree")
        return Laid(kinds=kinds, boxes=boxes)
