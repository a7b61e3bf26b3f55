"""Idefics3 and SmolVLM (``model_type: idefics3``, ``smolvlm``): the image split into tiles plus a global
view. The processor resizes the longest side to ``size.longest_edge`` (the other side keeps the aspect
ratio, rounded up to even), stretches both sides up to multiples of ``max_image_size.longest_edge`` (M)
and cuts that into M × M tiles read row by row; then the whole image squeezed to M × M is the global
view, last. An image that fits in one tile is only the global view; with ``do_image_splitting`` off the
whole image is resized to M × M. The tower cuts each view into ``patch_size`` squares and the connector's
pixel shuffle folds each ``scale_factor``² block of them into one token: ``image_seq_len`` tokens a view,
row by row. A tile's token boxes are its blocks scaled back through both resizes; the global view's
cover the whole image. Every other token of the image's expansion (``<fake_token_around_image>``, the
``<row_i_col_j>`` and ``<global-img>`` tags, the newlines after each row of tiles) is a ``"marker"``.
The language model's mask stays causal over the image tokens.
"""

from __future__ import annotations

import math

import numpy as np

from .layout import Box, Geometry, Laid, LayoutError, grid_boxes, image_token, own_processor

PROCESSORS = ("Idefics3ImageProcessor", "SmolVLMImageProcessor")


class Idefics3Layout:
    name = "idefics3"
    model_inputs = ("pixel_values", "pixel_attention_mask")

    placeholder = staticmethod(image_token)

    def __init__(self, config, processor) -> None:
        ip = own_processor(config, processor, PROCESSORS, "its own processor only")
        vc = config.vision_config
        self.tile = int(ip.max_image_size["longest_edge"])  # M
        self.splitting = bool(ip.do_image_splitting)
        self.longest = int(ip.size["longest_edge"]) if ip.do_resize and ip.size.get("longest_edge") else None
        if ip.do_resize and self.longest is None:
            raise LayoutError(f"image processor size {dict(ip.size)}: attnscope traces a longest_edge resize only")
        patches = int(vc.image_size) // int(vc.patch_size)
        r = int(config.scale_factor)
        if self.tile != int(vc.image_size) or patches % r or processor.image_seq_len != (patches // r) ** 2:
            raise LayoutError(
                f"tiles of {self.tile} px, {processor.image_seq_len} tokens each, for a {vc.image_size}-px tower "
                f"of {vc.patch_size}-px patches shuffled by {r}: the processor and model disagree"
            )
        self.side = patches // r  # tokens a view, each axis
        self.cell = self.tile / self.side  # pixels of a view per token, each axis
        self.image_token_id = int(processor.image_token_id)
        self.fake_token_id = int(processor.tokenizer.convert_tokens_to_ids(processor.fake_image_token))

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """The size (w, h) the processor's resizes bring a ``width × height`` image to before it is tiled."""
        from transformers.models.idefics3.image_processing_pil_idefics3 import get_resize_output_image_size

        if self.longest is not None:
            shape = np.broadcast_to(np.zeros(1, np.uint8), (3, height, width))  # a shape only: no pixels allocated
            height, width = get_resize_output_image_size(shape, resolution_max_side=self.longest)
        if not self.splitting:
            return self.tile, self.tile
        m, aspect = self.tile, width / height  # resize_for_vision_encoder: both sides up to multiples of M
        if width >= height:
            width = math.ceil(width / m) * m
            height = math.ceil(int(width / aspect) / m) * m
        else:
            height = math.ceil(height / m) * m
            width = math.ceil(int(height * aspect) / m) * m
        return width, height

    def boxes(self, width: int, height: int) -> list[Box]:
        """Every image token's box, in token order: the tiles row by row, then the global view."""
        w, h = self.resized(width, height)
        m, side, cell = self.tile, self.side, self.cell
        out: list[Box] = []
        if w > m or h > m:
            geo = Geometry(width=width, height=height, sx=width / w, sy=height / h)
            for row in range(h // m):
                for col in range(w // m):
                    geo.left, geo.top = col * m, row * m
                    out += grid_boxes(geo, side, side, cell, cell)
        whole = Geometry(width=width, height=height, sx=width / m, sy=height / m)
        return out + grid_boxes(whole, side, side, cell, cell)

    def lay_out(self, ids: list[int], width: int, height: int) -> Laid:
        fakes = [i for i, t in enumerate(ids) if t == self.fake_token_id]
        kinds = ["image" if t == self.image_token_id else "text" for t in ids]
        if fakes:  # the image's expansion runs from its first fake token to its last
            a, b = fakes[0], fakes[-1] + 1
            kinds[a:b] = ["image" if k == "image" else "marker" for k in kinds[a:b]]
        boxes = self.boxes(width, height)
        if kinds.count("image") != len(boxes):
            raise LayoutError(f"{kinds.count('image')} image tokens for {len(boxes) // self.side**2} views")
        return Laid(kinds=kinds, boxes=boxes)
