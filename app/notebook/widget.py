"""The notebook widget (an anywidget ``AnyWidget``): the page's head view, computed in the kernel.

The widget computes with the very functions the JSON API uses
(:func:`attnscope.app.notebook.service.answer_bytes`): no HTTP server, no port. Its traitlets hold the
API's answers as JSON text, tagged with the text and what-ifs they answer, so a view opened
later (a second view of the widget, a reloaded page) draws the last answer at once. Its
JavaScript is the page's own modules (:mod:`.assets`); its output also carries a static
snapshot (:mod:`.snapshot`). Importing this module needs ``anywidget`` (the notebook extra).
"""

from __future__ import annotations

import json
from typing import Any

import anywidget
import traitlets as t

from ..routes import subject_routes
from .assets import modules_payload, plotly_js, widget_css, widget_esm
from .service import TOP_K, answer_bytes, decode_answer
from .snapshot import snapshot_html

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


class AttnScope(anywidget.AnyWidget):
    """The page's head view in a notebook: all-heads grid, the chosen head, the what-if
    switches and the predictions; typing in it re-runs the model in the kernel."""

    _esm = widget_esm()
    _css = widget_css()

    text = t.Unicode("").tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Int(0).tag(sync=True)
    causal = t.Bool(True).tag(sync=True)
    scaled = t.Bool(True).tag(sync=True)
    # an encoder–decoder's stack ("": the model's default) and target (the decoder's text; "": the model writes it)
    stack = t.Unicode("").tag(sync=True)
    target = t.Unicode("").tag(sync=True)
    # GET /api/model; the answers as JSON text: {"text", "causal", "scale", "stack", "target", ["layer", "head"],
    # "answer"}
    model_info = t.Unicode("{}").tag(sync=True)
    # the parts of the subject each route takes (app.routes.subject_routes): what the page reads from /openapi.json
    routes = t.Unicode("{}").tag(sync=True)
    grid = t.Unicode("").tag(sync=True)
    detail = t.Unicode("").tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    busy = t.Bool(False).tag(sync=True)

    def __init__(
        self, svc, text: str, image: str | None = None, messages: list | None = None, audio: str | None = None, **kwargs
    ):
        """A widget for ``text`` over ``svc`` (a :class:`~attnscope.app.service.Service`), computed at
        once; ``image`` (base64, the API's ``image``) goes with every text; ``messages`` (a conversation,
        the API's ``messages``) is the subject instead of the text while the text is empty; ``audio`` (a
        recording, the API's ``audio``) is the source, the text its target (empty: the model writes it)."""
        routes = json.dumps(subject_routes())
        super().__init__(text=text, model_info=svc.info_json.decode(), routes=routes, **kwargs)
        self._svc = svc
        self._image = image
        self._messages = messages
        self._audio = audio
        self._fitting = False
        self.on_msg(self._on_custom)
        self.observe(self._on_text, names=["text", "causal", "scaled", "stack", "target"])
        self.observe(self._on_head, names=["layer", "head"])
        self.refresh()

    # ---- computing, in the kernel

    def _scale(self) -> str:
        return "model" if self.scaled else "none"

    def _tagged(self, body: bytes, head: bool) -> str:
        tag = {
            "text": self.text,
            "causal": self.causal,
            "scale": self._scale(),
            "stack": self.stack,
            "target": self.target,
        }
        if head:
            tag.update(layer=self.layer, head=self.head)
        return json.dumps(tag)[:-1] + ',"answer":' + body.decode() + "}"

    def _stack_shape(self) -> tuple[list[int], int]:
        """The chosen stack's attention layers and heads per layer (``stack`` "": the model's default, the
        decoder where there is one); a model of one stack: its attention layers (a hybrid's have gaps)."""
        facts = self._svc.loaded.facts
        stacks = facts.stacks
        if len(stacks) < 2:
            return list(facts.attention_layers), facts.n_head
        names = [s["name"] for s in stacks]
        name = self.stack if self.stack in names else ("decoder" if "decoder" in names else names[0])
        chosen = stacks[names.index(name)]
        return list(range(chosen["n_layer"])), chosen["n_head"]

    def _fit_head(self) -> None:
        """The chosen layer and head inside the chosen stack: the chosen layer, else the last attention layer before
        it; set without a second computation (``_fitting``)."""
        layers, n_head = self._stack_shape()
        below = [n for n in layers if n <= self.layer]
        self._fitting = True
        try:
            self.layer = below[-1] if below else layers[0]
            self.head = min(max(self.head, 0), n_head - 1)
        finally:
            self._fitting = False

    def _subject(self) -> dict[str, Any]:
        """What every request of the widget sends: the text (or the conversation, or the recording), the image, the
        stack and the target (an encoder–decoder's; a recording's target is the text box's while the target is
        blank), and the what-ifs."""
        subject: dict[str, Any] = {"text": self.text}
        if self._messages and not self.text:
            subject = {"messages": self._messages}
        seq2seq = json.loads(self.model_info or "{}").get("architecture") == "encoder-decoder"
        if self._audio is not None:
            subject = {"audio": self._audio, "target": self.target or self.text or None}
        elif seq2seq and self.target:
            subject["target"] = self.target
        if self.stack:
            subject["stack"] = self.stack
        return dict(**subject, causal=self.causal, scale=self._scale(), encoding="b64", image=self._image)

    def _compute(self, head_only: bool = False) -> None:
        """Answer the grid (unless ``head_only``) and the chosen head, as the page asks, into the
        traitlets; a refused text becomes ``error`` instead of an exception in the kernel."""
        from ..errors import ApiError

        self._fit_head()
        common = self._subject()
        try:
            if not (self.text or self._messages or self._audio):
                grid, detail = "", ""
            else:
                grid = None
                if not head_only:
                    grid_stats = dict(include=["stats"], stats_rows=False, stats_unscaled=False)  # as the page's grid
                    body = answer_bytes(self._svc, **common, **grid_stats, thumbnail=GRID_THUMBNAIL, top_k=0)
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
        if not self._fitting:
            self._compute(head_only=True)

    def write_target(self) -> str:
        """Let the model write the target of the text (greedily, as ``generate()`` does) and put it in ``target``, as
        the page's "Write it"; returns it. A refusal raises the API's error."""
        subject = {k: v for k, v in self._subject().items() if k != "target"}
        if self._audio is not None:
            subject["target"] = None
        body = answer_bytes(self._svc, **{**subject, "encoding": "json"}, layers=[], include=[], top_k=0)
        written = json.loads(body).get("target")
        if not isinstance(written, str):
            raise ValueError("the model has no decoder to write a target")
        self.target = written
        return written

    def _on_custom(self, widget, content, buffers) -> None:
        """The loader's ``{"type": "assets"}`` message: send the modules, and Plotly if it asks; the target field's
        ``{"type": "write"}``: write the target and answer ``{"type": "written", "target"}`` (or ``"error"``)."""
        from ..errors import ApiError

        if isinstance(content, dict) and content.get("type") == "write":
            try:
                self.send({"type": "written", "target": self.write_target()})
            except (ApiError, ValueError) as e:
                self.send({"type": "written", "error": str(e)})
            return
        if isinstance(content, dict) and content.get("type") == "assets":
            bufs = [modules_payload()]
            if content.get("plotly"):
                bufs.append(plotly_js())
            self.send({"type": "assets", "plotly": bool(content.get("plotly"))}, buffers=bufs)

    # ---- reading it from Python

    def answers(self) -> dict[str, Any]:
        """The current grid and chosen-head answers, as :func:`~attnscope.app.notebook.capture`
        gives them (numpy arrays)."""
        return {
            "grid": decode_answer(json.loads(self.grid)["answer"]) if self.grid else None,
            "detail": decode_answer(json.loads(self.detail)["answer"]) if self.detail else None,
        }

    def snapshot_html(self) -> str:
        """The current view as self-contained HTML (:func:`.snapshot.snapshot_html`)."""
        return snapshot_html(self)

    def snapshot(self):
        """Display the current view as static HTML (stays readable in any export)."""
        from IPython.display import HTML

        return HTML(self.snapshot_html())

    def _repr_mimebundle_(self, **kwargs):
        """anywidget's output with the static snapshot as its ``text/html``."""
        data = super()._repr_mimebundle_(**kwargs)
        if isinstance(data, tuple):
            bundle, meta = data
        else:
            bundle, meta = data, {}
        if bundle is not None:
            bundle = {**bundle, "text/html": self.snapshot_html()}
        return (bundle, meta) if isinstance(data, tuple) else bundle
