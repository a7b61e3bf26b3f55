"""An attention request's ``image``: checked, decoded and laid out with the text as the model's
processor lays them out (:meth:`~attnscope.model.vision.backend.VisionBackend.prepare`), or a 422
naming ``image`` (413 over the byte limit) before any computing."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ..model.vision.images import ImageError, decode_image
from ..model.vision.layout import seen_region
from ..model.vision.llava import LayoutError
from .errors import ApiError
from .service import Service

LOC = ("body", "image")
DATA_URL = re.compile(r"data:[\w.+/-]*(;[\w=.+-]+)*;base64,", re.ASCII)


WHITESPACE = str.maketrans("", "", " \t\n\r\v\f")  # ASCII whitespace: base64 wrapped in lines, as GNU base64 writes it


def upload_bytes(value: str, max_bytes: int, part: str = "image") -> bytes:
    """``image`` (base64, or a ``data:`` URL holding base64) -> its bytes; 413 above ``max_bytes``.
    Whitespace in the base64 (lines of 76, as ``base64`` and ``base64.encodebytes`` wrap it) is
    dropped; any other character outside the alphabet is a 422. ``part``: the field's name (``audio``
    reads the same way)."""
    head = DATA_URL.match(value)
    encoded = (value[head.end() :] if head else value).translate(WHITESPACE)
    ctx = {"limit": max_bytes}
    loc = ("body", part)
    if len(encoded) * 3 // 4 > max_bytes + 2:
        msg = f"{part} is about {len(encoded) * 3 // 4:,} bytes; the limit is {max_bytes:,} bytes"
        raise ApiError(413, msg, loc=loc, type_=f"{part}_too_large", ctx=ctx)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        msg = f"{part} is not base64 (or a data: URL holding base64)"
        raise ApiError(422, msg, loc=loc, type_=f"{part}_encoding") from None
    if len(data) > max_bytes:
        msg = f"{part} is {len(data):,} bytes; the limit is {max_bytes:,} bytes"
        raise ApiError(413, msg, loc=loc, type_=f"{part}_too_large", ctx=ctx)
    return data


def image_prompt(svc: Service, text: str, value: str):
    """``text`` and the request's ``image`` as the model receives them: the
    :class:`~attnscope.model.vision.backend.VisionPrompt`, each token's display string and its
    character span in ``text`` (tokens outside the text: an empty span at 0 or at its end)."""
    facts = svc.loaded.facts
    if not facts.vision:
        msg = f"image was sent, but {facts.name} ({facts.family}) reads text only; open an image-text model"
        raise ApiError(422, msg, loc=LOC, type_="image_unsupported")
    limits = svc.info["image_limits"]
    data = upload_bytes(value, limits["max_bytes"])
    try:
        image = decode_image(data, limits["max_pixels"])
    except ImageError as e:
        ctx = {"limit": e.limit} if e.limit else None
        raise ApiError(422, str(e), loc=LOC, type_=f"image_{e.kind}", ctx=ctx) from None
    try:
        prompt = svc.loaded.backend.prepare(text, image)
    except LayoutError as e:
        raise ApiError(422, f"image: {e}", loc=LOC, type_="image_layout") from None
    tokens = [svc.displays[i] if i < len(svc.displays) else f"<{i}>" for i in prompt.ids]
    return prompt, tokens, text_offsets(svc, text, prompt.ids)


def text_offsets(svc: Service, text: str, ids: list[int]) -> list[list[int]]:
    """Each token's ``[start, end]`` in ``text``: the text's own tokens where they stand as one run
    in ``ids`` (the last such run), every other token an empty span before or after the text."""
    enc = svc.loaded.tokenizer.encode(text)
    own = (
        enc.ids[1:]
        if svc.loaded.facts.bos_token is not None and enc.ids[:1] == [svc.loaded.tokenizer.bos_id]
        else enc.ids
    )
    spans = enc.offsets[len(enc.ids) - len(own) :]
    n = len(own)
    start = next((s for s in range(len(ids) - n, -1, -1) if ids[s : s + n] == own), None) if n else None
    out: list[list[int]] = []
    for i in range(len(ids)):
        if start is not None and start <= i < start + n:
            out.append(list(spans[i - start]))
        else:
            at = 0 if start is None or i < start else len(text)
            out.append([at, at])
    return out


def image_answer(prompt) -> dict[str, Any]:
    """The answer's ``image`` object."""
    boxes = prompt.boxes
    return {"width": prompt.width, "height": prompt.height, "boxes": boxes, "seen": seen_region(boxes)}
