"""The widget of ``show(text, target=..., stack="cross")`` on a tiny BART, drawn in Debian's chromium at 1280 and
390 px: the page's stack picker and target field in the widget, a cross map with the target's tokens on its rows
and the source's on its columns (every cell the kernel's weight), another stack chosen by a click, a target typed
and "Write it" (the kernel writes the target). The widget's modules are the page's files, and its anywidget model is
a small stand-in whose every change goes, through Playwright, to the real widget in this process (as a kernel's
comm would carry it)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.kit.live import CHROMIUM, CHROMIUM_ARGS
from tests.kit.notebook import on_a_thread_of_its_own

pytest.importorskip("transformers")
pytestmark = [pytest.mark.browser, pytest.mark.notebook]
for needed in ("anywidget", "playwright"):
    if importlib.util.find_spec(needed) is None:
        pytest.skip(f"{needed} is not installed (pip install -e '.[test]')", allow_module_level=True)

import attnscope  # noqa: E402
from attnscope.app.notebook.assets import FRONTEND, plotly_js  # noqa: E402
from attnscope.app.notebook.service import decode_answer  # noqa: E402

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

TEXT = "The cat sat on the mat, and the dog saw the cat."
TARGET = "The dog sat."
ORIGIN = "http://widget.test"
TRAITS = ("text", "layer", "head", "causal", "scaled", "stack", "target", "model_info", "grid", "detail", "error")

# the stand-in of anywidget's model: get/set/save_changes/on/off/send, as widget.js uses them
HARNESS = """<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="/widget.css">
<script src="/plotly.js"></script></head><body><div id="out"></div><script type="module">
import { render } from "/js/widget.js";
const traits = JSON.parse(await window.kernel("{}"));
const handlers = {};
const fire = (ev, ...args) => (handlers[ev] ?? []).slice().forEach((h) => h(...args));
const apply = (next) => { for (const [k, v] of Object.entries(next)) if (traits[k] !== v) { traits[k] = v;
  fire(`change:${k}`); } };
let pending = {};
const model = {
  get: (k) => traits[k],
  set: (k, v) => { traits[k] = v; pending[k] = v; },
  on: (ev, h) => (handlers[ev] ??= []).push(h),
  off: (ev, h) => { handlers[ev] = (handlers[ev] ?? []).filter((x) => x !== h); },
  async save_changes() { const sent = pending; pending = {};
    apply(JSON.parse(await window.kernel(JSON.stringify(sent)))); },
  async send(msg) { const r = JSON.parse(await window.kernelMessage(JSON.stringify(msg))); apply(r.traits);
    fire("msg:custom", r.message, []); },
};
render({ model, el: document.getElementById("out") });
</script></body></html>"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_seq2seq("bart", tmp_path_factory.mktemp("nbbartpage") / "bart")


class Kernel:
    """The widget in this process, reached from the page as a kernel is through its comm."""

    def __init__(self, widget):
        self.widget = widget
        self.sent: list[dict] = []
        widget.send = lambda content, buffers=None: self.sent.append(content)

    def traits(self) -> str:
        return json.dumps({name: getattr(self.widget, name) for name in TRAITS} | {"busy": False})

    def change(self, changes: str) -> str:
        with self.widget.hold_trait_notifications():  # as ipywidgets applies a message's state
            for name, value in json.loads(changes).items():
                if name != "busy":
                    setattr(self.widget, name, value)
        return self.traits()

    def message(self, content: str) -> str:
        self.widget._on_custom(self.widget, json.loads(content), [])
        return json.dumps({"message": self.sent[-1], "traits": json.loads(self.traits())})


def serve(route):
    path = route.request.url[len(ORIGIN) :].split("?")[0]
    if path == "/harness.html":
        return route.fulfill(body=HARNESS, content_type="text/html")
    if path == "/plotly.js":
        return route.fulfill(body=plotly_js(), content_type="text/javascript")
    file = FRONTEND.joinpath(*path.strip("/").split("/"))
    kind = "text/css" if path.endswith(".css") else "text/javascript"
    return route.fulfill(body=file.read_bytes(), content_type=kind) if file.is_file() else route.fulfill(status=404)


HEATMAP = """() => { const gd = document.querySelector('[data-testid="head-heatmap"]');
  return gd && gd.data ? { z: gd.data[0].z, x: gd.layout.xaxis.title.text, y: gd.layout.yaxis.title.text } : null; }"""


def check_map(page, kernel, stack: str) -> None:
    """The widget's heatmap is the kernel's answer of `stack`: its shape the stack's sides, every cell the weight."""
    page.wait_for_function(
        "(s) => { const a = document.querySelector('.attnscope-widget').attnscope.state.detail;"
        " return a?.response?.stack === s && document.querySelector('.aw-heatmap.drawn'); }",
        arg=stack,
    )
    page.wait_for_function(HEATMAP.replace("return gd", "return gd && gd.data && gd.data[0].z.length && gd"))
    fig = page.evaluate(HEATMAP)
    detail = decode_answer(json.loads(kernel.widget.detail)["answer"])
    assert detail["stack"] == stack
    queries = detail["source_tokens"] if stack == "encoder" else detail["target_tokens"]
    keys = detail["target_tokens"] if stack == "decoder" else detail["source_tokens"]
    assert len(fig["z"]) == len(queries) and all(len(row) == len(keys) for row in fig["z"])
    assert ("target" if stack == "decoder" else "source") in fig["x"]
    assert ("source" if stack == "encoder" else "target") in fig["y"]
    pattern = detail["layers"][0]["heads"][0]["pattern"]
    cells = [(a, b) for zr, pr in zip(fig["z"], pattern) for a, b in zip(zr, pr) if a is not None]
    assert cells and all(abs(a - b) < 1e-4 for a, b in cells)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_widget_picks_a_stack_and_holds_a_target(folder, width):
    kernel = Kernel(attnscope.show(TEXT, checkpoint=folder, target=TARGET, stack="cross"))
    on_a_thread_of_its_own(lambda: drive(kernel, width))


def drive(kernel, width: int) -> None:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route(f"{ORIGIN}/**", serve)
            page.expose_function("kernel", kernel.change)
            page.expose_function("kernelMessage", kernel.message)
            page.goto(f"{ORIGIN}/harness.html")
            picker = page.get_by_test_id("stack-picker")
            picker.locator("[data-stack]").first.wait_for(timeout=30_000)
            assert picker.locator("[data-stack]").all_inner_texts() == ["Encoder", "Decoder", "Cross"]
            assert picker.locator("[aria-pressed=true]").inner_text() == "Cross"
            assert page.get_by_test_id("target-input").input_value() == TARGET
            for testid in ("stack-picker", "target-field", "head-heatmap"):
                box = page.get_by_test_id(testid).bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, testid
            check_map(page, kernel, "cross")
            # another stack by a click: the kernel answers it, the map is its
            picker.locator("[data-stack=encoder]").click()
            check_map(page, kernel, "encoder")
            assert kernel.widget.stack == "encoder"
            # a blank target, then "Write it": the kernel's own target in the field, and the answers over it
            page.get_by_test_id("target-input").fill("")
            page.wait_for_function("() => document.querySelector('.attnscope-widget').attnscope.state.target === ''")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=target-note]').textContent.includes('written by the model')"
            )
            page.get_by_test_id("target-write").click()
            page.wait_for_function("() => document.querySelector('[data-testid=target-input]').value !== ''")
            written = page.get_by_test_id("target-input").input_value()
            assert written == kernel.widget.target
            picker.locator("[data-stack=cross]").click()
            check_map(page, kernel, "cross")
            assert json.loads(kernel.widget.detail)["answer"]["target"] == written
        finally:
            browser.close()
    assert not errors, errors
