"""attnscope.show and attnscope.capture in the kernel, and docs/attnscope.ipynb run by nbclient.

``capture`` equals the API's numbers (the same request through ``POST /api/attention``);
``show`` returns a widget whose traitlets hold the API's answers, for the shipped model and for
a transformers model object built here; several widgets live side by side; changing the text
(what typing in the widget does) re-runs the model.
"""

from __future__ import annotations

import copy
import importlib.util
import json

import numpy as np
import pytest

pytestmark = pytest.mark.notebook

if importlib.util.find_spec("anywidget") is None:
    pytest.skip("anywidget is not installed (pip install -e '.[notebook]')", allow_module_level=True)

import attnscope  # noqa: E402
from attnscope.app import notebook  # noqa: E402
from attnscope.app.notebook import assets as widget_assets  # noqa: E402
from attnscope.app.notebook import service as notebook_service  # noqa: E402

TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def client():
    from attnscope.app.main import create_app
    from fastapi.testclient import TestClient

    with TestClient(create_app()) as c:
        yield c


def test_capture_equals_the_api(client):
    data = attnscope.capture(TEXT)
    body = {
        "text": TEXT,
        "include": notebook.CAPTURE_INCLUDE,
        "encoding": "b64",
        "precision": "f4",
        "top_k": notebook_service.TOP_K,
    }
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    api = notebook_service.decode_answer(r.json())
    assert data["tokens"] == api["tokens"] and data["token_ids"] == api["token_ids"]
    assert data["predictions"] == api["predictions"]
    np.testing.assert_array_equal(data["mask"], api["mask"])
    assert len(data["layers"]) == len(api["layers"]) == data["model"]["n_layer"]
    for ours, theirs in zip(data["layers"], api["layers"]):
        assert ours["divisor"] == theirs["divisor"]
        for h0, h1 in zip(ours["heads"], theirs["heads"]):
            for name in notebook.CAPTURE_INCLUDE:
                if name == "stats":
                    assert h0["stats"].keys() == h1["stats"].keys()
                    continue
                assert isinstance(h0[name], np.ndarray) and h0[name].dtype == np.float32
                np.testing.assert_array_equal(h0[name], h1[name])
    pattern = data["layers"][0]["heads"][0]["pattern"]
    T = len(data["tokens"])
    assert pattern.shape == (T, T)
    np.testing.assert_allclose(pattern.sum(axis=1), 1, atol=1e-5)


def _answer(trait: str) -> dict:
    return notebook_service.decode_answer(json.loads(trait)["answer"])


def test_show_the_shipped_model():
    w = attnscope.show(TEXT)
    assert w.error == ""
    grid, detail = _answer(w.grid), _answer(w.detail)
    info = json.loads(w.model_info)
    assert len(grid["layers"]) == info["n_layer"] and len(grid["layers"][0]["heads"]) == info["n_head"]
    assert grid["thumbnail"]["size"] == len(grid["tokens"])
    assert detail["layers"][0]["heads"][0]["pattern"].shape == (len(detail["tokens"]),) * 2
    assert len(detail["predictions"][-1]) == notebook_service.TOP_K
    # the chosen head's numbers are capture's (the API's) numbers
    same = attnscope.capture(TEXT, layers=[0], heads=[0], include=["pattern"])
    np.testing.assert_array_equal(detail["layers"][0]["heads"][0]["pattern"], same["layers"][0]["heads"][0]["pattern"])

    # typing in the widget sets `text`: the kernel answers for the new text
    w.text = "A small dog ran"
    assert "".join(_answer(w.grid)["tokens"]) == "A␣small␣dog␣ran"
    # a head chosen in the grid: only the chosen head's answer is recomputed
    before = w.grid
    w.layer, w.head = 1, 2
    assert w.grid == before
    assert json.loads(w.detail)["layer"] == 1 and json.loads(w.detail)["head"] == 2
    # what-if switches
    w.causal = False
    assert _answer(w.grid)["causal"] is False and _answer(w.detail)["causal"] is False
    assert _answer(w.detail)["mask"].all()
    # a refused text is an error message in the widget, not an exception in the kernel
    w.text = "x" * 5000
    assert "tokens" in w.error and w.grid == ""


def test_the_output_is_small_and_readable_without_the_widget():
    w = attnscope.show(TEXT)
    bundle, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert "data:image/png;base64," in html and "<script" not in html
    assert len(json.dumps(bundle)) < 20_000
    # the module anywidget runs is the small loader; the modules and Plotly come once, on request
    assert len(w._esm) < 8_000
    assert "Plotly.newPlot" not in w._esm and "function paintGrid" not in w._esm


def test_assets_are_the_page_modules_and_plotly():
    mods = widget_assets.frontend_modules()
    # by path under js/: the modules in subfolders (views/, draw/) come too
    assert {
        "widget.js",
        "views.js",
        "views/head.js",
        "draw/gridcanvas.js",
        "draw/figures.js",
        "state.js",
    } <= mods.keys()
    root = widget_assets.FRONTEND / "js"
    for name, source in mods.items():
        assert source == (root / name).read_text(encoding="utf-8")  # the page's files, not copies
    w = attnscope.show(TEXT)
    sent = []
    w.send = lambda content, buffers=None: sent.append((content, buffers))
    w._on_custom(w, {"type": "assets", "plotly": True}, [])
    ((content, buffers),) = sent
    assert content == {"type": "assets", "plotly": True}
    assert json.loads(bytes(buffers[0])) == mods
    assert bytes(buffers[1]).startswith(b"/**") and len(buffers[1]) > 1_000_000


def test_an_import_is_resolved_from_the_importing_module_folder():
    assert widget_assets._resolve("widget.js", "./views/head.js") == "views/head.js"
    assert widget_assets._resolve("views/head.js", "../draw/figures.js") == "draw/figures.js"
    assert widget_assets._resolve("views/head.js", "../head/grid.js") == "head/grid.js"
    with pytest.raises(ValueError, match="outside frontend/js"):
        widget_assets._resolve("widget.js", "../app.js")


def test_show_a_transformers_model_object():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from attnscope.model.ours.checkpoint import SHIPPED

    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(SHIPPED / "tokenizer.json"))
    cfg = transformers.LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    impl = model.config._attn_implementation
    w = attnscope.show("Open the window", model=model, tokenizer=tok)
    assert w.error == ""
    info = json.loads(w.model_info)
    assert info["family"] == "llama" and info["n_layer"] == 2 and info["n_head"] == 4 and info["n_kv_head"] == 2
    detail = _answer(w.detail)
    # the pattern is the model's own eager attention
    ids = torch.tensor([detail["token_ids"]])
    eager = transformers.LlamaForCausalLM(copy.deepcopy(cfg)).eval()  # its own config: the switch below is its alone
    eager.load_state_dict(model.state_dict())
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        ref = eager(ids, output_attentions=True).attentions[0][0, 0].numpy()
    np.testing.assert_allclose(detail["layers"][0]["heads"][0]["pattern"], ref, atol=1e-6)
    # the user's model keeps its own attention implementation for everything else
    assert model.config._attn_implementation == impl
    data = attnscope.capture("Open the window", model=model, tokenizer=tok, include=["pattern"])
    np.testing.assert_array_equal(data["layers"][0]["heads"][0]["pattern"], detail["layers"][0]["heads"][0]["pattern"])


def test_several_widgets_in_one_notebook():
    a = attnscope.show("The cat sat")
    b = attnscope.show("A small dog ran", layer=1, head=3)
    assert a.model_id != b.model_id
    assert a._esm == b._esm  # one loader, keyed by the modules' hash: the page loads them once
    a.text = "The dog sat"
    assert "".join(_answer(a.grid)["tokens"]) == "The␣dog␣sat"
    assert "".join(_answer(b.grid)["tokens"]) == "A␣small␣dog␣ran"  # b is untouched
    assert json.loads(b.detail)["layer"] == 1 and json.loads(b.detail)["head"] == 3
    # one model, loaded once for both
    assert a._svc is b._svc


def test_the_example_notebook_runs_on_a_real_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from tests.kit.notebook import NOTEBOOK, isolated_jupyter

    nb = nbformat.read(NOTEBOOK, as_version=4)
    with isolated_jupyter(tmp_path / "home"):
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == 2
    assert all("data:image/png;base64," in o["data"]["text/html"] for o in widgets)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "float32" in text
    # the committed notebook's outputs are real: the same kinds of output, cell by cell
    committed = nbformat.read(NOTEBOOK, as_version=4)

    def kinds(book):
        return [
            sorted(o.get("data", {})) or o.output_type for c in book.cells if c.cell_type == "code" for o in c.outputs
        ]

    assert kinds(committed) == kinds(nb)
