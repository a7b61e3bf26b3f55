"""The notebook widget's static snapshot: its current view as self-contained HTML (no script,
no network), which a widget's output carries as ``text/html`` beside the widget itself. It is
what a static HTML export, GitHub or any renderer without the widget shows: the all-heads grid
as a PNG, the chosen head's strongest keys per query, and the predictions after the last token.
"""

from __future__ import annotations

import base64
import html
import json
import struct
import zlib
from typing import Any

import numpy as np

_VIRIDIS = [
    (0, "#440154"), (0.0627, "#48186a"), (0.1255, "#472d7b"), (0.1882, "#424086"), (0.251, "#3b528b"),
    (0.3137, "#33638d"), (0.3765, "#2c728e"), (0.4392, "#26828e"), (0.502, "#21918c"), (0.5647, "#1fa088"),
    (0.6275, "#28ae80"), (0.6902, "#3fbc73"), (0.7529, "#5ec962"), (0.8157, "#84d44b"), (0.8784, "#addc30"),
    (0.9412, "#d8e219"), (1, "#fde725"),
]  # fmt: skip


def _lut() -> np.ndarray:
    """Viridis as 256 RGB rows: level 0..255 (a thumbnail cell) -> its colour."""
    t = np.arange(256) / 255
    stops = np.array([s for s, _ in _VIRIDIS])
    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for _, c in _VIRIDIS], dtype=float)
    return np.stack([np.interp(t, stops, rgb[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


def png(rgb: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 image as PNG bytes (no imaging library needed)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def grid_png(grid: dict[str, Any], cell: int = 2) -> bytes:
    """The all-heads grid (a decoded grid answer) as one image: layers down, heads across, masked cells grey. A
    thumbnail is n×m (a cross stack's: the target's rows by the source's columns)."""
    layers = grid["layers"]
    mask = np.asarray(grid["thumbnail"]["mask"])
    n, m = mask.shape
    H, W = len(layers), len(layers[0]["heads"])
    tile_y, tile_x = n * cell + 2, m * cell + 2
    img = np.full((H * tile_y + 2, W * tile_x + 2, 3), 255, np.uint8)
    lut = _lut()
    for r, layer in enumerate(layers):
        seen = np.asarray(layer.get("thumbnail_mask", mask)).astype(bool)
        for c, head in enumerate(layer["heads"]):
            rgb = lut[np.asarray(head["thumbnail"])]
            rgb[~seen] = (236, 238, 242)
            y, x = 2 + r * tile_y, 2 + c * tile_x
            img[y : y + n * cell, x : x + m * cell] = rgb.repeat(cell, 0).repeat(cell, 1)
    return png(img)


def _key_tokens(info: dict[str, Any], detail: dict[str, Any]) -> list[str]:
    """The tokens an answer's keys are: its stack's key side's (a cross stack's: ``source_tokens``), else its own."""
    stack = next((s for s in info.get("stacks", []) if s["name"] == detail.get("stack")), None)
    return (stack and detail.get(f"{stack['key']}_tokens")) or detail["tokens"]


def snapshot_html(w) -> str:
    """The widget ``w``'s current view (its text, switches, error and :meth:`answers`) as
    self-contained HTML: no script, no network."""
    e = html.escape
    if w.error:
        return f'<div class="attnscope-snapshot"><b>attnscope</b>: {e(w.error)}</div>'
    a = w.answers()
    grid, detail = a["grid"], a["detail"]
    info = json.loads(w.model_info or "{}")
    parts = [
        '<div class="attnscope-snapshot" style="font-family:system-ui,sans-serif;font-size:13px">',
        f"<p><b>attnscope</b> · {e(str(info.get('name', '')))} · {info.get('n_layer', '?')} layers × "
        f"{info.get('n_head', '?')} heads · causal mask {'on' if w.causal else 'off (what-if)'} · "
        f"scaling {'on' if w.scaled else 'off (what-if)'}</p>",
        f"<p>Text: <code>{e(w.text)}</code></p>",
    ]
    if detail and detail.get("stack") and len(info.get("stacks", [])) > 1:  # an encoder–decoder: its stack and target
        target = f" · target <code>{e(detail['target'])}</code>" if isinstance(detail.get("target"), str) else ""
        parts.append(f"<p>Stack: {e(detail['stack'])}{target}</p>")
    if grid:
        data = base64.b64encode(grid_png(grid)).decode()
        parts.append(
            f"<p>All heads (layers down, heads across; each cell the largest weight of a "
            f"{grid['thumbnail']['block']}×{grid['thumbnail']['block']} block, grey masked):</p>"
            f'<img alt="all attention heads" src="data:image/png;base64,{data}" style="image-rendering:pixelated">'
        )
    if detail:
        tokens = detail["tokens"]
        names = _key_tokens(info, detail)
        pattern = np.asarray(detail["layers"][0]["heads"][0]["pattern"])
        rows = []
        for q, tok in enumerate(tokens):
            top = np.argsort(-pattern[q])[:3]
            keys = ", ".join(f"{e(names[k])} {pattern[q, k]:.2f}" for k in top if pattern[q, k] > 0)
            rows.append(f"<tr><td>{q}</td><td><code>{e(tok)}</code></td><td>{keys}</td></tr>")
        parts.append(
            f"<p>Layer {w.layer} · head {w.head}: the keys each query attends to most</p>"
            "<table><tr><th>#</th><th>query</th><th>strongest keys (weight)</th></tr>" + "".join(rows) + "</table>"
        )
        preds = detail.get("predictions") or []
        if preds and preds[-1]:
            guesses = ", ".join(f"<code>{e(p['token'])}</code> {100 * p['prob']:.1f}%" for p in preds[-1][:5])
            parts.append(f"<p>After <code>{e(tokens[-1])}</code> the model guesses: {guesses}</p>")
    parts.append("</div>")
    return "".join(parts)
