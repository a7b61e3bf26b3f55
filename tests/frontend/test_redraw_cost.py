"""What a keystroke redraws (issue 31, item 10): the token strip keeps the chips that did not
change, and the fields of an answer that no view on screen draws are decoded only when read.
Each test checks the page against the server's own answer."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import numpy as np
import pytest

from tests.kit.live import post_json, text_of_tokens

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat because the mat was warm."


def server_tokens(base_url: str, text: str) -> dict:
    return post_json(base_url + "/api/attention", {"text": text, "layers": [], "include": [], "top_k": 0})


def test_a_keystroke_at_the_end_keeps_the_chips_before_it(tab):
    tab.open("/#text=" + quote(SENTENCE))
    # tag every chip: a chip the page rebuilt has no tag
    n = tab.page.evaluate(
        """() => { const chips = [...document.querySelectorAll('[data-testid=tokens] .chip')];
                   chips.forEach((c, i) => { c.__kept = i; }); return chips.length; }"""
    )
    box = tab.page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" It")
    tab.settle()
    text = SENTENCE + " It"
    answer = server_tokens(tab.base_url, text)
    chips = tab.page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=tokens] .chip')].map((c) => ({
              kept: c.__kept ?? null, index: Number(c.dataset.index), title: c.title,
              text: c.querySelector('.chip-text').textContent, id: c.querySelector('.chip-id').textContent }))"""
    )
    # the strip is the new answer's, chip for chip
    assert [c["text"] for c in chips] == answer["tokens"]
    assert [c["id"] for c in chips] == [str(i) for i in answer["token_ids"]]
    assert [c["index"] for c in chips] == list(range(len(answer["tokens"])))
    for c, (start, end) in zip(chips, answer["offsets"], strict=True):
        assert c["title"].startswith(f"position {c['index']} · ")
        assert c["title"].endswith(f"characters {start}–{end}: " + json.dumps(text[start:end]))
    # the chips before the edit are the same elements: only the changed end was built
    kept = [c["kept"] for c in chips]
    assert kept[: n - 1] == list(range(n - 1))
    assert kept[-1] is None


def test_a_field_no_view_draws_is_decoded_when_read_and_then_equals_the_answer(tab):
    tab.open("/#view=head&text=" + quote(SENTENCE))
    state = tab.page.evaluate(
        """() => { const h = window.attnscope.state.detail.response.layers[0].heads[0];
                   const lazy = (k) => typeof Object.getOwnPropertyDescriptor(h, k).get === 'function';
                   const before = { q: lazy('q'), k: lazy('k'), pattern: lazy('pattern') };
                   const q = h.q;
                   return { before, after: lazy('q'), q, layer: window.attnscope.state.layer,
                            head: window.attnscope.state.head }; }"""
    )
    # the head view draws the pattern; q and k wait until something reads them
    assert state["before"] == {"q": True, "k": True, "pattern": False}
    assert state["after"] is False
    plain = post_json(
        tab.base_url + "/api/attention",
        {"text": SENTENCE, "layers": [state["layer"]], "heads": [state["head"]], "include": ["q"], "top_k": 0},
    )
    want = plain["layers"][0]["heads"][0]["q"]
    got = state["q"]
    assert len(got) == len(want) and len(got[0]) == len(want[0])
    assert max(abs(a - b) for ra, rb in zip(got, want, strict=True) for a, b in zip(ra, rb, strict=True)) < 1e-4



DRAWN_HEAD = """() => {
  const gd = document.querySelector('[data-testid=head-heatmap]');
  const s = window.attnscope.state;
  // the canvas's pixel at each cell's centre: a weight's colour, or the grey of the stripes on a masked cell
  const canvas = gd.querySelector('.plot-cells');
  const g = canvas.getContext('2d');
  const ratio = canvas.width / gd.clientWidth;
  const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis;
  const z = gd.data[0].z;
  const hatched = z.map((row, i) => row.map((_, j) => {
    const x = Math.floor((xa.offset + xa.d2p(j)) * ratio), y = Math.floor((ya.offset + ya.d2p(i)) * ratio);
    const [r, gr, b, a] = g.getImageData(x, y, 1, 1).data;
    return a === 255 && [r, gr, b].every((c) => c >= 195 && c <= 242);
  }));
  return { kept: canvas.__kept === true, layer: s.layer, head: s.head, z, hatched,
           ticks: [...gd.querySelectorAll('.ytick')].map((t) => t.textContent),
           toggles: [...document.querySelectorAll('[data-testid=heads-grid] .ablate-toggle')]
             .map((b) => b.__kept === true) };
}"""

TAG = """() => {
  document.querySelector('[data-testid=head-heatmap] .plot-cells').__kept = true;
  for (const b of document.querySelectorAll('[data-testid=heads-grid] .ablate-toggle')) b.__kept = true;
}"""


def assert_draws_the_answer(tab, drawn: dict, text: str, **what_if) -> dict:
    """What the head heatmap drew (`drawn`, DRAWN_HEAD's) is the server's pattern for `text`, cell for cell,
    the masked cells gaps over the stripes (grey: no weight's colour is) and every other cell painted; returns
    the answer."""
    body = {"text": text, "layers": [drawn["layer"]], "heads": [drawn["head"]], "include": ["pattern"], "top_k": 0}
    answer = post_json(tab.base_url + "/api/attention", {**body, **what_if})
    pattern, mask = answer["layers"][0]["heads"][0]["pattern"], answer["mask"]
    assert len(drawn["z"]) == len(answer["tokens"]) == len(pattern)
    for zr, pr, mr, hatched in zip(drawn["z"], pattern, mask, drawn["hatched"], strict=True):
        for z, p, m, striped in zip(zr, pr, mr, hatched, strict=True):
            assert (z is None) if not m else abs(z - p) < 1e-3
            assert striped == (not m)
    return answer


def test_a_keystroke_redraws_the_head_in_place_with_the_new_answer(tab):
    """The head heatmap is redrawn into the canvas it has (not a new plot each time), and what it drew and
    labelled is the new answer's. The switched-off heads' toggles over the grid stay the
    same elements, and follow a switch."""
    tab.open("/#view=head&text=" + quote(SENTENCE))
    tab.page.evaluate(TAG)
    box = tab.page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" It")
    tab.settle()
    drawn = tab.page.evaluate(DRAWN_HEAD)
    assert drawn["kept"], "the head heatmap was drawn as a new plot"
    tokens = assert_draws_the_answer(tab, drawn, SENTENCE + " It")["tokens"]
    # a short text: every query labelled (cut to 12 characters), the last one the new token
    assert drawn["ticks"] == [t if len(t) <= 12 else t[:11] + "…" for t in tokens]
    assert drawn["toggles"] and all(drawn["toggles"])
    # switching the chosen head off presses its toggle
    tab.page.evaluate("() => document.activeElement.blur()")
    tab.page.keyboard.press("x")
    tab.settle()
    toggle = tab.page.locator(f"[data-testid=heads-grid] [data-testid=ablate-L{drawn['layer']}H{drawn['head']}]")
    assert toggle.get_attribute("aria-pressed") == "true"


def test_a_what_if_that_keeps_the_tokens_redraws_the_head_with_its_numbers(tab):
    """Scaling off changes every weight and no token: the plot, redrawn in place, shows the new weights."""
    tab.open("/#view=head&text=" + quote(SENTENCE))
    tab.page.evaluate(TAG)
    tab.page.get_by_test_id("scale-toggle").click()
    tab.settle()
    drawn = tab.page.evaluate(DRAWN_HEAD)
    assert drawn["kept"], "the head heatmap was drawn as a new plot"
    assert_draws_the_answer(tab, drawn, SENTENCE, scale="none")


def test_the_grid_image_is_each_thumbnail_cell_in_its_colour(tab):
    """Every pixel of the grid's image: a thumbnail cell in the Viridis colour of its level, grey where the
    layer's mask hides the key, white between the tiles (and the mean column on the same rule)."""
    tab.open("/#view=head&text=" + quote(SENTENCE))
    bad = tab.page.evaluate(
        """async () => {
            const { gridImage, viridisLUT, layerMask, gridColumns } = await import('/js/draw/gridcanvas.js');
            const grid = window.attnscope.state.grid.response;
            const lut = viridisLUT();
            const bad = [];
            for (const aggregate of [false, true]) {
              const { size, mask } = grid.thumbnail;
              const img = gridImage({ layers: grid.layers, size, mask, aggregate });
              const cols = gridColumns(grid.layers, aggregate);
              const want = new Map(); // pixel offset -> [r, g, b] inside the tiles
              grid.layers.forEach((layer, r) => cols.forEach((head, c) => {
                const m = layerMask(layer, mask);
                for (let i = 0; i < size; i++) for (let j = 0; j < size; j++) {
                  let level;
                  if (head === -1) {
                    let s = 0;
                    for (const h of layer.heads) s += h.thumbnail[i][j];
                    level = Math.round(s / layer.heads.length);
                  } else level = layer.heads[c].thumbnail[i][j];
                  const o = ((1 + r * (size + 1) + i) * img.width + 1 + c * (size + 1) + j) * 4;
                  want.set(o, m[i][j] ? [...lut.subarray(level * 3, level * 3 + 3)] : [236, 238, 242]);
                }
              }));
              for (let o = 0; o < img.data.length; o += 4) {
                const rgba = [...img.data.subarray(o, o + 4)];
                const expect = [...(want.get(o) ?? [255, 255, 255]), 255];
                if (rgba.join() !== expect.join()) bad.push({ aggregate, o, rgba, expect });
              }
              if (img.width !== cols.length * (size + 1) + 1 || img.height !== grid.layers.length * (size + 1) + 1)
                bad.push({ aggregate, width: img.width, height: img.height });
            }
            return bad.slice(0, 5);
        }"""
    )
    assert bad == []


DECODE_HALVES = """async ([bdata, native]) => {
  const { flat } = await import('/js/wire.js');
  const own = Uint8Array.fromBase64;
  if (!native) Uint8Array.fromBase64 = undefined; // the decoder for browsers without one
  try {
    const { values, shape } = flat({ dtype: 'f2', bdata, shape: '65536' });
    return { shape, bits: Array.from(new Uint32Array(values.buffer, values.byteOffset, values.length)) };
  } finally {
    Uint8Array.fromBase64 = own;
  }
}"""


@pytest.mark.parametrize("native", [True, False])
def test_every_half_float_on_the_wire_decodes_to_its_value(tab, native):
    """All 65536 half floats (f2, the wire's scores) decode to numpy's float32 of each, bit for bit (the sign
    of a zero, subnormals, infinities); a NaN (a masked score) stays a NaN. With the browser's base64 decoder
    and without it."""
    tab.open("/", settle=False)
    halves = np.arange(65536, dtype="<u2")
    got = tab.page.evaluate(DECODE_HALVES, [base64.b64encode(halves.tobytes()).decode(), native])
    assert got["shape"] == [65536]
    bits = np.array(got["bits"], dtype=np.uint32)
    want = halves.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.isnan(bits.view(np.float32)[nan]).all()
    assert (bits[~nan] == want.view(np.uint32)[~nan]).all()


WATCH_MUTATIONS = """() => {
  window.__mutations = [];
  new MutationObserver((ms) => {
    for (const m of ms) {
      const el = m.target.nodeType === Node.ELEMENT_NODE ? m.target : m.target.parentElement;
      window.__mutations.push(`${m.type} ${m.attributeName ?? ''} on ${el?.id || el?.className || el?.tagName}`);
    }
  }).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
}"""


@pytest.mark.parametrize("what_if", [False, True])
def test_a_render_that_changes_nothing_writes_nothing_into_the_page(tab, what_if):
    """Choosing the token already chosen renders the page again from the same state: no text, attribute,
    property or child is written (an equal write still makes the browser restyle), with the what-if on
    as without it."""
    tab.open("/#view=head&text=" + quote(SENTENCE))
    if what_if:
        tab.page.get_by_test_id("scale-toggle").click()
        tab.settle()
    chip = tab.page.locator("[data-testid=tokens] .chip").last
    chip.click()  # the last token is chosen: from here on, the same click changes nothing
    tab.settle()
    tab.page.evaluate(WATCH_MUTATIONS)
    renders = tab.page.evaluate("() => window.attnscope.renders")
    chip.click()
    tab.settle()
    tab.page.wait_for_timeout(100)  # the observer's records come after the render's task
    assert tab.page.evaluate("() => window.attnscope.renders") == renders + 1
    assert tab.page.evaluate("() => window.__mutations") == []


# The page's animation frames held by the test: requested callbacks wait until __flushFrames runs them.
HOLD_FRAMES = """() => {
  const queue = new Map();
  let next = 1;
  window.requestAnimationFrame = (callback) => { queue.set(next, callback); return next++; };
  window.cancelAnimationFrame = (id) => queue.delete(id);
  window.__framesAsked = () => queue.size;
  window.__flushFrames = () => {
    const callbacks = [...queue.values()];
    queue.clear();
    for (const callback of callbacks) callback(performance.now());
  };
}"""

BOTH_ANSWERED = """(text) => {
  const s = window.attnscope.state;
  return s.grid?.text === text && s.detail?.text === text && !s.pending.grid && !s.pending.detail;
}"""


def test_the_two_answers_of_a_keystroke_are_drawn_by_one_render_at_the_next_frame(tab):
    """The chosen head's answer and the grid's, asked together, are stored as they land and drawn at the
    page's next frame, both by one render (one layout and paint, not one each); until then the page does
    not call itself settled. What that render drew is the new text's answer."""
    page = tab.page
    tab.open("/#view=head&text=" + quote(SENTENCE))
    page.evaluate(TAG)
    page.evaluate(HOLD_FRAMES)
    box = page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" It")
    text = SENTENCE + " It"
    page.wait_for_function(BOTH_ANSWERED, arg=text)
    renders = page.evaluate("() => window.attnscope.renders")
    assert page.evaluate("() => window.__framesAsked()") == 1
    assert not page.evaluate("() => window.attnscope.settled")  # answered, not drawn yet
    assert page.evaluate("() => document.querySelector('[data-testid=head-heatmap]').data[0].z.length") == len(
        server_tokens(tab.base_url, SENTENCE)["tokens"]
    )
    page.evaluate("() => window.__flushFrames()")
    assert page.evaluate("() => window.attnscope.renders") == renders + 1
    assert page.evaluate("() => window.attnscope.settled")
    drawn = page.evaluate(DRAWN_HEAD)
    assert drawn["kept"], "the head heatmap was drawn as a new plot"
    assert_draws_the_answer(tab, drawn, text)
    assert page.evaluate("() => window.__framesAsked()") == 0


def test_a_text_past_the_heatmaps_cells_asks_both_answers_once_and_draws_each_from_it(tab):
    """A keystroke in a text too long to be sure it fits the heatmap's cells asks the chosen head pooled; then
    one request brings the grid and the chosen head (requests.js `bothRequest`): the grid holds every head, the
    chosen head's answer is its layer and head alone, its statistics with the server's per-row entropies, and
    the heatmap draws the server's pattern for the new text."""
    page = tab.page
    text = text_of_tokens(tab.base_url, 250)
    tab.open("/#view=head&text=" + quote(text))
    page.evaluate(TAG)
    asked = []
    page.on("request", lambda r: asked.append(r.post_data_json) if r.url.endswith("/api/attention") else None)
    box = page.get_by_test_id("text-input")
    box.press("End")
    box.press("Backspace")
    tab.settle()
    new_text = text[:-1]
    assert len(asked) == 1, asked
    body = asked[0]
    assert body["text"] == new_text and "layers" not in body and body["thumbnail"] == 64
    assert body["focus"]["layer"] == page.evaluate("() => window.attnscope.state.layer")
    got = page.evaluate(
        """() => { const s = window.attnscope.state, g = s.grid.response, d = s.detail.response;
                   const h = d.layers[0].heads[0];
                   return { grid: g.layers.map((l) => l.heads.length), layers: d.layers.map((l) => l.layer),
                            heads: d.layers[0].heads.map((x) => x.head), rows: h.stats.row_entropy,
                            entropy: h.stats.entropy, layer: s.layer, head: s.head }; }"""
    )
    model = page.evaluate("() => window.attnscope.state.model")
    assert got["grid"] == [model["n_head"]] * model["n_layer"]
    assert got["layers"] == [got["layer"]] and got["heads"] == [got["head"]]
    served = post_json(
        tab.base_url + "/api/attention",
        {"text": new_text, "layers": [got["layer"]], "heads": [got["head"]], "include": ["stats"], "top_k": 0},
    )["layers"][0]["heads"][0]["stats"]
    assert len(got["rows"]) == len(served["row_entropy"])
    assert max(abs(a - b) for a, b in zip(got["rows"], served["row_entropy"], strict=True)) < 1e-3
    assert abs(got["entropy"] - served["entropy"]) < 1e-4
    drawn = page.evaluate(DRAWN_HEAD)
    assert drawn["kept"], "the head heatmap was drawn as a new plot"
    assert_draws_the_answer(tab, drawn, new_text)
    assert page.evaluate("() => document.querySelector('[data-testid=heads-grid]').classList.contains('drawn')")
