"""What every image layout tells: where the image tokens are and the region each one carries.

A layout (one module per family: :mod:`.llava`, :mod:`.gemma3`) is built from the model's config
and processor. Given the ids the processor laid out and the uploaded image's size it says, per
token, its kind (``"text"``, ``"image"``: a token that carries image features, ``"marker"``: begin
or end of the image) and, for each image token in order, its box ``[x0, y0, x1, y1]`` in the
uploaded image's own pixels, traced back through the processor's resize, crop and pooling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Box = list[float]


class LayoutError(ValueError):
    """A model or processor this layout cannot trace exactly."""


@dataclass
class Geometry:
    """How the processor's steps map a point of its output image back into the uploaded image:
    ``x = (u - left) * sx`` and ``y = (v - top) * sy``, clipped to the image."""

    width: int
    height: int
    left: float = 0.0  # the output's origin, in the resized (padded) image
    top: float = 0.0
    sx: float = 1.0  # uploaded pixels per resized pixel
    sy: float = 1.0
    pad_left: float = 0.0  # padding added around the image before the resize, in uploaded pixels
    pad_top: float = 0.0

    def box(self, u0: float, v0: float, u1: float, v1: float) -> Box:
        """A rectangle of the processor's output image -> the uploaded image's pixels it came from."""
        xs = [min(max((u + self.left) * self.sx - self.pad_left, 0.0), self.width) for u in (u0, u1)]
        ys = [min(max((v + self.top) * self.sy - self.pad_top, 0.0), self.height) for v in (v0, v1)]
        return [_r(xs[0]), _r(ys[0]), _r(xs[1]), _r(ys[1])]


def _r(x: float) -> float:
    return round(x, 4)


def seen_region(boxes: list[Box]) -> Box | None:
    """The part of the uploaded image the model saw: the smallest rectangle holding every non-empty box
    (a centre crop leaves the rest out; a square of padding has an empty box). None without one."""
    shown = [b for b in boxes if b[2] > b[0] and b[3] > b[1]]
    if not shown:
        return None
    return [min(b[0] for b in shown), min(b[1] for b in shown), max(b[2] for b in shown), max(b[3] for b in shown)]


@dataclass
class Laid:
    """One prompt as the model receives it: token kinds and the image tokens' boxes."""

    kinds: list[str]
    boxes: list[Box] = field(default_factory=list)


def grid_boxes(geo: Geometry, rows: int, cols: int, cell_w: float, cell_h: float) -> list[Box]:
    """Row-major boxes of a ``rows × cols`` grid of ``cell_w × cell_h`` cells of the processor's output."""
    return [
        geo.box(c * cell_w, r * cell_h, (c + 1) * cell_w, (r + 1) * cell_h) for r in range(rows) for c in range(cols)
    ]


def processor_kind(image_processor) -> str:
    """An image processor's class name without its ``Pil`` or ``Fast`` suffix: one kind whichever backend."""
    return type(image_processor).__name__.removesuffix("Pil").removesuffix("Fast")



def own_processor(config, processor, kinds: tuple[str, ...], whose: str, tower: bool = True):
    """The processor's image processor when it is of one of ``kinds`` (and the ``tower`` fits); else a LayoutError."""
    ip = processor.image_processor
    if processor_kind(ip) not in kinds or not tower:
        raise LayoutError(f"a {config.model_type} model with a {type(ip).__name__}: attnscope traces {whose}")
    return ip


def image_token(processor) -> str:
    """Where the image goes in a prompt without a chat template: the processor's image token (it expands it)."""
    return processor.image_token
