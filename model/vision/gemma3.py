"""Gemma 3 (``model_type: gemma3``): one image resized (not cropped) to the vision tower's
``size.height × size.width`` (896 × 896), cut into ``patch_size`` squares (64 × 64 of them), then
average-pooled in ``k × k`` blocks to ``mm_tokens_per_image`` tokens (16 × 16, k = 4), read row by
row between a begin-of-image and an end-of-image marker. Each token's box is its block of
``k · patch_size`` pixels of the resized image, scaled back by the resize along each axis.

The image's tokens attend to each other both ways (the model's mask is not causal inside the
image: transformers builds it from ``token_type_ids``, which the processor sends and the model reads).
Pan-and-scan (``do_pan_and_scan``: extra crops of a wide image) is refused.
"""

from __future__ import annotations

from .layout import Geometry, Laid, LayoutError, grid_boxes, own_processor


class Gemma3Layout:
    name = "gemma3"
    model_inputs = ("pixel_values", "token_type_ids")

    @staticmethod
    def placeholder(processor) -> str:
        return processor.boi_token

    def __init__(self, config, processor) -> None:
        siglip = getattr(config.vision_config, "model_type", None) == "siglip_vision_model"
        ip = own_processor(config, processor, ("Gemma3ImageProcessor",), "Gemma 3's own processor only", siglip)
        if getattr(ip, "do_pan_and_scan", False):
            raise LayoutError("pan-and-scan (do_pan_and_scan) adds crops attnscope does not trace; turn it off")
        if (
            getattr(ip, "do_center_crop", False)
            or not ip.do_resize
            or not (ip.size.get("height") and ip.size.get("width"))
        ):
            raise LayoutError(
                f"image processor size {dict(ip.size)}: attnscope traces a resize to height × width only"
            )
        vc = config.vision_config
        self.size = (int(ip.size["width"]), int(ip.size["height"]))
        patches = int(vc.image_size) // int(vc.patch_size)
        side = int(config.mm_tokens_per_image**0.5)
        if self.size != (int(vc.image_size), int(vc.image_size)) or side * side != config.mm_tokens_per_image:
            raise LayoutError(f"images resized to {self.size} for a {vc.image_size}-px tower: not traced")
        self.side = side
        self.cell = (patches // side) * int(vc.patch_size)  # pixels of the resized image per token, each axis
        self.image_token_id = int(config.image_token_id)
        self.markers = {int(config.boi_token_id), int(config.eoi_token_id)}

    def lay_out(self, ids: list[int], width: int, height: int) -> Laid:
        w, h = self.size
        geo = Geometry(width=width, height=height, sx=width / w, sy=height / h)
        kinds = ["image" if i == self.image_token_id else "marker" if i in self.markers else "text" for i in ids]
        boxes = grid_boxes(geo, self.side, self.side, self.cell, self.cell)
        if kinds.count("image") != len(boxes):
            raise LayoutError(f"{kinds.count('image')} image tokens for {len(boxes)} pooled cells")
        return Laid(kinds=kinds, boxes=boxes)
