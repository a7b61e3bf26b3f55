"""attnscope in a notebook: ``show`` (an anywidget widget) and ``capture`` (numpy arrays).

The widget computes in the kernel, with the very functions the JSON API uses
(:func:`attnscope.app.service.attention_json`): no HTTP server, no port. Its traitlets hold
the API's answers as JSON text, tagged with the text and what-ifs they answer, so a view
opened later (a second view of the widget, a reloaded page) draws the last answer at once.

How the page's JavaScript gets into the notebook, offline
---------------------------------------------------------
anywidget runs one ES module per widget class (``_esm``). Ours is small
(``frontend/js/widget_esm.js``, a few kB): on its first render in a page it asks the kernel,
with one custom message, for the frontend's modules (``frontend/js/*.js``, the same files the
page serves: no second copy of the drawing code, no build step that could go stale) and, unless
``globalThis.Plotly`` is there already, for ``plotly.min.js`` from the installed ``plotly``
package. The answer carries them as binary buffers; the loader makes each module a ``blob:`` URL
(its ``./x.js`` imports rewritten to its dependencies' blob URLs, so the browser links real ES
modules) and runs Plotly from a ``blob:`` script. Both are kept on ``globalThis`` under
the modules' hash: a page with ten widgets loads them once, and each widget's saved state and
each cell's output stay small. We chose this over an esbuild bundle because a committed bundle
can drift from ``frontend/js`` and an uncommitted one needs Node at install time; this needs
nothing but the installed package, and ``blob:`` modules are what anywidget itself loads with.

A widget's output also carries a ``text/html`` snapshot of its view (the all-heads grid as a
PNG, the chosen head's strongest keys and the predictions): what a static HTML export, GitHub
or any renderer without the widget shows. ``widget.snapshot()`` displays the current view the
same way, after typing in the widget.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import struct
import zlib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["capture", "show", "service_for"]  # and AttnScope, the widget class (made on first use)

# what the page asks for (frontend/js/state.js gridRequest, detailRequest)
GRID_THUMBNAIL = 64
DETAIL_INCLUDE = [
    "pattern",
    "pattern_unscaled",
    "attn_scores_raw",
    "attn_scores_uncapped",
    "attn_scores",
    "stats",
    "q",
    "k",
]
CAPTURE_INCLUDE = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]
TOP_K = 10


# ------------------------------------------------------------------ models


def _tokenizer_from(tokenizer):
    """A :class:`BPETokenizer` from what a notebook holds: a transformers fast tokenizer, a
    ``tokenizers.Tokenizer`` or one of ours. The BOS is kept when the tokenizer adds one."""
    from tokenizers import Tokenizer

    from ..model.tokenizer import BPETokenizer

    if isinstance(tokenizer, BPETokenizer):
        return tokenizer
    if isinstance(tokenizer, Tokenizer):
        return BPETokenizer(tokenizer)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(
            f"tokenizer: attnscope needs a fast tokenizer (transformers' AutoTokenizer with use_fast=True, "
            f"or a tokenizers.Tokenizer); got {type(tokenizer).__name__}"
        )
    bos = None
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    if len(with_special) > len(plain) and list(with_special[1:]) == list(plain[: len(with_special) - 1]):
        bos = tokenizer.convert_ids_to_tokens(with_special[0])
    # a copy without the post-processor's specials: BPETokenizer adds the BOS itself
    return BPETokenizer(Tokenizer.from_str(backend.to_str()), bos_token=bos)


def _backend_class():
    """TransformersBackend for a user's model object. Its attention runs through attnscope's
    function only while attnscope records (a pre-hook on the base model switches the
    implementation when a recording is active, a hook that always runs switches it back), so the
    model keeps its own implementation (sdpa, flash) for everything else the notebook does."""
    from ..model import hf_backend
    from ..model.hf_backend import IMPLEMENTATION, TransformersBackend, register

    def before(module, args, kwargs):
        if hf_backend._ACTIVE.get() is None:
            return
        previous = getattr(module.config, "_attn_implementation", None)
        if previous != IMPLEMENTATION:
            module._attnscope_previous = previous or "eager"
            module.set_attn_implementation(IMPLEMENTATION)

    def after(module, args, kwargs, output):
        previous = module.__dict__.pop("_attnscope_previous", None)
        if previous is not None:
            module.set_attn_implementation(previous)

    class NotebookBackend(TransformersBackend):
        def __init__(self, model, tokenizer, device, name):
            register()
            base = model.base_model
            if not getattr(base, "_attnscope_hooked", False):
                base.register_forward_pre_hook(before, with_kwargs=True)
                base.register_forward_hook(after, with_kwargs=True, always_call=True)
                base._attnscope_hooked = True
            super().__init__(model, tokenizer, device, name)

    return NotebookBackend


def loaded_from_objects(model, tokenizer, name: str | None = None):
    """A :class:`LoadedModel` around a transformers causal LM already in memory, on its own device."""
    from ..model.backends import LoadedModel

    if model is None or tokenizer is None:
        raise TypeError("show/capture with model= needs tokenizer= too (the model's fast tokenizer)")
    if not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"model: a transformers PreTrainedModel (AutoModelForCausalLM); got {type(model).__name__}")
    device = next(model.parameters()).device
    label = name or str(getattr(model.config, "name_or_path", "") or type(model).__name__)
    backend = _backend_class()(model, _tokenizer_from(tokenizer), device, name=Path(label).name or label)
    return LoadedModel(backend=backend, path=Path(label))


_services: dict[Any, Any] = {}


def service_for(model=None, tokenizer=None, checkpoint=None, device: str | None = "cpu"):
    """The :class:`~attnscope.app.service.Service` for the shipped model (nothing given), a
    checkpoint folder or ``.gguf`` file (``checkpoint=``), a model object (``model=`` and
    ``tokenizer=``) or an ``attnscope.load_model()`` result (``model=``); made once per model."""
    from ..model.backends import LoadedModel
    from .service import build_service

    if model is not None and checkpoint is not None:
        raise TypeError("give model= (with tokenizer=) or checkpoint=, not both")
    if isinstance(model, LoadedModel):
        key = ("loaded", id(model))
    elif model is not None:
        key = ("object", id(model), id(tokenizer))
    else:
        key = ("path", str(Path(checkpoint).resolve()) if checkpoint else None, device)
    svc = _services.get(key)
    if svc is None or (model is not None and svc.loaded is not model and svc.extra.get("source") is not model):
        if isinstance(model, LoadedModel):
            lm = model
        elif model is not None:
            lm = loaded_from_objects(model, tokenizer)
        else:
            from ..model.registry import load_model

            lm = load_model(checkpoint, device=device)
        svc = build_service(lm, with_heads=False)
        svc.extra["source"] = model
        _services[key] = svc
    return svc


def _request(**fields):
    from .schemas.attention import AttentionRequest

    return AttentionRequest(**fields)


def answer_bytes(svc, **fields) -> bytes:
    """The exact bytes ``POST /api/attention`` answers for this request body."""
    from .encoding import attention_json

    body, _ = attention_json(svc, _request(**fields))
    return body


# ------------------------------------------------------------------ capture


def _decode(x):
    """The API's b64 typed arrays -> numpy arrays of the same shape and dtype (in place)."""
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        if isinstance(x.get("bdata"), str) and isinstance(x.get("dtype"), str):
            dt = {"u1": np.uint8, "f2": np.float16, "f4": np.float32}[x["dtype"]]
            shape = tuple(int(s) for s in str(x.get("shape", "")).split(",") if s.strip())
            a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(dt).newbyteorder("<"))
            return a.reshape(shape) if shape else a
        return {k: _decode(v) for k, v in x.items()}
    return x


def capture(
    text: str,
    model=None,
    tokenizer=None,
    checkpoint=None,
    *,
    include: list[str] | None = None,
    layers: list[int] | None = None,
    heads: list[int] | None = None,
    causal: bool = True,
    scale: str | float = "model",
    top_k: int = TOP_K,
    temperature: float = 1.0,
) -> dict[str, Any]:
    """What ``POST /api/attention`` answers for ``text``, with numpy arrays for its matrices.

    The keys are the API contract's: ``tokens``, ``token_ids``, ``offsets``, ``mask`` (T×T, 1 where
    a key may be attended), ``layers[i]["heads"][j]["pattern"]`` (T×T float32, each row sums to
    1), ``attn_scores_raw``, ``attn_scores``, ``pattern_unscaled``, ``q``, ``k``, ``v``, ``stats``,
    ``predictions`` and ``model``. By default every layer and head with every field, as the
    page's JSON export. The numbers are the API's own (its ``b64`` encoding, float32).
    """
    from .compute.attention import answer_arrays

    svc = service_for(model, tokenizer, checkpoint)
    request = _request(
        text=text,
        include=list(include if include is not None else CAPTURE_INCLUDE),
        layers=layers,
        heads=heads,
        encoding="b64",
        precision="f4",
        causal=causal,
        scale=scale,
        top_k=top_k,
        temperature=temperature,
    )
    return answer_arrays(svc, request)


# ------------------------------------------------------------------ the widget's assets

FRONTEND = resources.files("attnscope.frontend")


def _js(name: str) -> str:
    return (FRONTEND / "js" / name).read_text(encoding="utf-8")


_IMPORT = r"""(?:from|import)\s*["']\./([\w.-]+\.js)["']"""


@lru_cache(maxsize=1)
def frontend_modules() -> dict[str, str]:
    """``widget.js`` and every module it imports (transitively), by file name: the page's own files."""
    import re

    out: dict[str, str] = {}
    todo = ["widget.js"]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = _js(name)
        todo += re.findall(_IMPORT, out[name])
    return out


@lru_cache(maxsize=1)
def modules_payload() -> bytes:
    return json.dumps(frontend_modules(), sort_keys=True).encode()


@lru_cache(maxsize=1)
def plotly_js() -> bytes:
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


@lru_cache(maxsize=1)
def widget_esm() -> str:
    """The widget's ES module: the loader, told the hash of the modules it will be sent."""
    version = hashlib.sha256(modules_payload()).hexdigest()[:16]
    return _js("widget_esm.js").replace("__ATTNSCOPE_MODULES_HASH__", version)


# ------------------------------------------------------------------ the widget


def _widget_class():
    import anywidget
    import traitlets as t

    class AttnScope(anywidget.AnyWidget):
        """The page's head view in a notebook: all-heads grid, the chosen head, the what-if
        switches and the predictions; typing in it re-runs the model in the kernel."""

        _esm = widget_esm()
        _css = (FRONTEND / "widget.css").read_text(encoding="utf-8")

        text = t.Unicode("").tag(sync=True)
        layer = t.Int(0).tag(sync=True)
        head = t.Int(0).tag(sync=True)
        causal = t.Bool(True).tag(sync=True)
        scaled = t.Bool(True).tag(sync=True)
        # GET /api/model; the answers as JSON text: {"text", "causal", "scale", ["layer", "head"], "answer"}
        model_info = t.Unicode("{}").tag(sync=True)
        grid = t.Unicode("").tag(sync=True)
        detail = t.Unicode("").tag(sync=True)
        error = t.Unicode("").tag(sync=True)
        busy = t.Bool(False).tag(sync=True)

        def __init__(self, svc, text: str, **kwargs):
            super().__init__(text=text, model_info=svc.info_json.decode(), **kwargs)
            self._svc = svc
            self.on_msg(self._on_custom)
            self.observe(self._on_text, names=["text", "causal", "scaled"])
            self.observe(self._on_head, names=["layer", "head"])
            self.refresh()

        # ---- computing, in the kernel

        def _scale(self) -> str:
            return "model" if self.scaled else "none"

        def _tagged(self, body: bytes, head: bool) -> str:
            tag = {"text": self.text, "causal": self.causal, "scale": self._scale()}
            if head:
                tag.update(layer=self.layer, head=self.head)
            return json.dumps(tag)[:-1] + ',"answer":' + body.decode() + "}"

        def _compute(self, head_only: bool = False) -> None:
            from .errors import ApiError

            facts = self._svc.loaded.facts
            self.layer = min(max(self.layer, 0), facts.n_layer - 1)
            self.head = min(max(self.head, 0), facts.n_head - 1)
            common = dict(text=self.text, causal=self.causal, scale=self._scale(), encoding="b64")
            try:
                if not self.text:
                    grid, detail = "", ""
                else:
                    grid = None
                    if not head_only:
                        body = answer_bytes(
                            self._svc, **common, include=["stats"], stats_rows=False, thumbnail=GRID_THUMBNAIL, top_k=0
                        )
                        grid = self._tagged(body, head=False)
                    body = answer_bytes(
                        self._svc,
                        **common,
                        layers=[self.layer],
                        heads=[self.head],
                        include=DETAIL_INCLUDE,
                        precision="f4",
                        top_k=TOP_K,
                    )
                    detail = self._tagged(body, head=True)
                error = ""
            except ApiError as e:
                grid, detail, error = "", "", str(e)
            except ValueError as e:  # pydantic's validation (an empty or too long text)
                grid, detail, error = "", "", " ".join(str(e).split())[:300]
            with self.hold_sync():
                if grid is not None:
                    self.grid = grid
                self.detail = detail
                self.error = error
                self.busy = False

        def refresh(self) -> None:
            """Compute the grid and the chosen head for the current text and what-ifs."""
            self._compute()

        def _on_text(self, change) -> None:
            self._compute()

        def _on_head(self, change) -> None:
            self._compute(head_only=True)

        def _on_custom(self, widget, content, buffers) -> None:
            if isinstance(content, dict) and content.get("type") == "assets":
                bufs = [modules_payload()]
                if content.get("plotly"):
                    bufs.append(plotly_js())
                self.send({"type": "assets", "plotly": bool(content.get("plotly"))}, buffers=bufs)

        # ---- reading it from Python

        def answers(self) -> dict[str, Any]:
            """The current grid and chosen-head answers, as :func:`capture` gives them (numpy arrays)."""
            return {
                "grid": _decode(json.loads(self.grid)["answer"]) if self.grid else None,
                "detail": _decode(json.loads(self.detail)["answer"]) if self.detail else None,
            }

        def snapshot_html(self) -> str:
            return snapshot_html(self)

        def snapshot(self):
            """Display the current view as static HTML (stays readable in any export)."""
            from IPython.display import HTML

            return HTML(self.snapshot_html())

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs)
            if isinstance(data, tuple):
                bundle, meta = data
            else:
                bundle, meta = data, {}
            if bundle is not None:
                bundle = {**bundle, "text/html": self.snapshot_html()}
            return (bundle, meta) if isinstance(data, tuple) else bundle

    return AttnScope


@lru_cache(maxsize=1)
def _cls():
    return _widget_class()


def __getattr__(name: str):
    if name == "AttnScope":
        return _cls()
    raise AttributeError(name)


def show(
    text: str, model=None, tokenizer=None, checkpoint=None, *, layer: int = 0, head: int = 0, causal=True, scaled=True
):
    """A widget with attnscope's head view for ``text``: the all-heads grid, the chosen head, the
    what-if switches and the predictions; typing in it re-runs the model in the kernel.

    ``show(text)``: the shipped model. ``show(text, model=m, tokenizer=tok)``: a transformers causal
    LM you loaded (any family attnscope opens, on its device). ``show(text, checkpoint=PATH)``: a
    checkpoint folder or ``.gguf`` file.
    """
    svc = service_for(model, tokenizer, checkpoint)
    return _cls()(svc, text, layer=layer, head=head, causal=causal, scaled=scaled)


# ------------------------------------------------------------------ the static snapshot

_VIRIDIS = [
    (0, "#440154"), (0.0627, "#48186a"), (0.1255, "#472d7b"), (0.1882, "#424086"), (0.251, "#3b528b"),
    (0.3137, "#33638d"), (0.3765, "#2c728e"), (0.4392, "#26828e"), (0.502, "#21918c"), (0.5647, "#1fa088"),
    (0.6275, "#28ae80"), (0.6902, "#3fbc73"), (0.7529, "#5ec962"), (0.8157, "#84d44b"), (0.8784, "#addc30"),
    (0.9412, "#d8e219"), (1, "#fde725"),
]  # fmt: skip


def _lut() -> np.ndarray:
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
    """The all-heads grid (a decoded grid answer) as one image: layers down, heads across, masked cells grey."""
    layers = grid["layers"]
    mask = grid["thumbnail"]["mask"]
    n = grid["thumbnail"]["size"]
    H, W = len(layers), len(layers[0]["heads"])
    tile = n * cell + 2
    img = np.full((H * tile + 2, W * tile + 2, 3), 255, np.uint8)
    lut = _lut()
    for r, layer in enumerate(layers):
        m = np.asarray(layer.get("thumbnail_mask", mask)).astype(bool)
        for c, head in enumerate(layer["heads"]):
            rgb = lut[np.asarray(head["thumbnail"])]
            rgb[~m] = (236, 238, 242)
            y, x = 2 + r * tile, 2 + c * tile
            img[y : y + n * cell, x : x + n * cell] = rgb.repeat(cell, 0).repeat(cell, 1)
    return png(img)


def snapshot_html(w) -> str:
    """The widget's current view as self-contained HTML: no script, no network."""
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
    if grid:
        data = base64.b64encode(grid_png(grid)).decode()
        parts.append(
            f"<p>All heads (layers down, heads across; each cell the largest weight of a "
            f"{grid['thumbnail']['block']}×{grid['thumbnail']['block']} block, grey masked):</p>"
            f'<img alt="all attention heads" src="data:image/png;base64,{data}" style="image-rendering:pixelated">'
        )
    if detail:
        tokens = detail["tokens"]
        pattern = np.asarray(detail["layers"][0]["heads"][0]["pattern"])
        rows = []
        for q, tok in enumerate(tokens):
            top = np.argsort(-pattern[q])[:3]
            keys = ", ".join(f"{e(tokens[k])} {pattern[q, k]:.2f}" for k in top if pattern[q, k] > 0)
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
