"""An uploaded image's bytes -> a Pillow image, or :class:`ImageError` saying why not.

Only PNG, JPEG, WebP and GIF (its first frame) are read. The size comes from the header, before
any pixel is decoded, so an image over the pixel limit (a decompression bomb: a few KB that
decode to gigabytes) is refused without decoding it; Pillow's own bomb check is refused the same.
A truncated file is refused when its pixels are read, not padded with grey.
"""

from __future__ import annotations

import io
import warnings

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


class ImageError(ValueError):
    """Bytes that cannot be shown as an image; ``kind`` says which check refused them."""

    def __init__(self, msg: str, kind: str, limit: int | None = None) -> None:
        super().__init__(msg)
        self.kind = kind  # "not_image", "format", "too_many_pixels", "truncated", "no_pillow"
        self.limit = limit


def decode_image(data: bytes, max_pixels: int):
    """``data`` -> an RGB ``PIL.Image.Image`` of at most ``max_pixels`` pixels; :class:`ImageError` otherwise
    (kind ``"no_pillow"`` where Pillow is not installed: the vision extra)."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as e:
        raise ImageError(
            "image cannot be read: Pillow is not installed here (pip install 'attnscope[vision]')", "no_pillow"
        ) from e

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))  # reads the header only
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError("image is not an image file Pillow can read (PNG, JPEG, WebP or GIF)", "not_image") from e
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError(f"image has more than {max_pixels:,} pixels", "too_many_pixels", max_pixels) from e
    if im.format not in FORMATS:
        raise ImageError(f"image is {im.format}; send PNG, JPEG, WebP or GIF", "format")
    width, height = im.size
    if width * height > max_pixels:
        raise ImageError(
            f"image is {width}×{height} = {width * height:,} pixels; the limit is {max_pixels:,}",
            "too_many_pixels",
            max_pixels,
        )
    if width < 1 or height < 1:
        raise ImageError("image has no pixels", "not_image")
    try:
        im.seek(0)
        im.load()  # a truncated file fails here (ImageFile.LOAD_TRUNCATED_IMAGES stays False)
        return im.convert("RGB")
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageError(f"image could not be decoded: {' '.join(str(e).split())[:120]}", "truncated") from e
