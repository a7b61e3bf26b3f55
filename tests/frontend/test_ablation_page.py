"""Switching heads off, head effects and generation on the page, in a real browser against the real server."""

from __future__ import annotations

import json
import re
import urllib.request
from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

REPEATED = "Open the red door, then close the blue window. Open the red door, then close the blue"


def ablated_prob(tab, token_id: int, ablate: list[dict]) -> float:
    body = {"text": REPEATED, "layers": [], "include": [], "top_k": 50, "ablate": ablate}
    preds = post_json(tab.base_url + "/api/attention", body)["predictions"][-1]
    return next((p["prob"] for p in preds if p["id"] == token_id), 0.0)


def state(tab, expr: str):
    return tab.page.evaluate(f"() => window.attnscope.state.{expr}")


def test_toggle_a_head_off_and_back(tab):
    tab.open("/#text=" + quote(REPEATED))
    page = tab.page
    toggle = page.get_by_test_id("ablate-L1H2")
    assert toggle.get_attribute("aria-pressed") == "false"
    before = post_json(tab.base_url + "/api/attention", {"text": REPEATED, "layers": [], "include": [], "top_k": 1})
    top = before["predictions"][-1][0]

    toggle.click()
    tab.settle()
    assert state(tab, "ablate") == [{"layer": 1, "head": 2}]
    page.wait_for_function("() => location.hash.includes('off=1.2')")
    assert page.get_by_test_id("ablate-L1H2").get_attribute("aria-pressed") == "true"
    # the predictions drawn are the ablated model's, and the card says before -> after
    effect = page.get_by_test_id("ablate-effect")
    page.wait_for_function("() => document.querySelector('[data-testid=ablate-effect]').dataset.after !== undefined")
    assert effect.get_attribute("data-token") == top["token"]
    assert float(effect.get_attribute("data-before")) == pytest.approx(top["prob"], abs=1e-6)
    expected_after = ablated_prob(tab, top["id"], [{"layer": 1, "head": 2}])
    assert float(effect.get_attribute("data-after")) == pytest.approx(expected_after, abs=1e-6)
    assert "→" in effect.inner_text()
    detail = page.evaluate("() => window.attnscope.state.detail.response.predictions.at(-1)")
    assert detail[0]["prob"] == pytest.approx(
        post_json(
            tab.base_url + "/api/attention",
            {"text": REPEATED, "layers": [], "include": [], "top_k": 1, "ablate": [{"layer": 1, "head": 2}]},
        )["predictions"][-1][0]["prob"],
        abs=1e-6,
    )

    # and back on: the set is empty, the URL forgets it, the card is quiet
    page.get_by_test_id("ablate-L1H2").click()
    tab.settle()
    assert state(tab, "ablate") == []
    page.wait_for_function("() => !location.hash.includes('off=')")
    assert page.get_by_test_id("ablate-L1H2").get_attribute("aria-pressed") == "false"
    assert effect.inner_text() == ""
    assert not tab.unexpected_console_errors()


def test_the_key_x_switches_the_chosen_head_and_a_link_keeps_the_set(tab):
    tab.open("/#text=" + quote(REPEATED) + "&layer=2&head=1&off=0.3")
    assert state(tab, "ablate") == [{"layer": 0, "head": 3}]
    tab.page.locator("body").click(position={"x": 5, "y": 5})
    tab.page.keyboard.press("x")
    tab.settle()
    assert state(tab, "ablate") == [{"layer": 0, "head": 3}, {"layer": 2, "head": 1}]
    tab.page.wait_for_function("() => location.hash.includes('off=0.3%2C2.1') || location.hash.includes('off=0.3,2.1')")


def test_the_effects_heatmap_opens_a_head(tab):
    tab.open("/#text=" + quote(REPEATED))
    page = tab.page
    page.get_by_test_id("effects-run").click()
    page.wait_for_function("() => document.querySelector('[data-testid=effects-heatmap]').dataset.token !== undefined")
    fig = tab.figure("effects-heatmap")
    served = post_json(tab.base_url + "/api/head-effects", {"text": REPEATED})
    assert fig["data"][0]["z"] == served["delta"]
    assert "window" in page.get_by_test_id("effects-caption").inner_text()
    # click the cell of layer 2, head 1
    box = page.evaluate(
        """() => {
            const gd = document.querySelector('[data-testid=effects-heatmap]');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
            return { x: r.left + xa._offset + xa.d2p('H1'), y: r.top + ya._offset + ya.d2p('L2') };
        }"""
    )
    page.mouse.click(box["x"], box["y"])
    page.wait_for_function("() => window.attnscope.state.layer === 2 && window.attnscope.state.head === 1")
    tab.settle()
    assert page.locator("#head-title").inner_text().startswith("Layer 2 · head 1")


def test_generation_streams_tokens_into_the_box_and_stops_on_a_click(tab):
    prompt = "A package manager keeps track of every file that"  # the shipped model goes on for 60+ tokens
    tab.open("/#text=" + quote(prompt))
    page = tab.page
    page.get_by_test_id("generate-count").fill("200")
    # the shipped model makes ~100 tokens/s here: the page itself clicks Stop once the 10th token is in
    page.evaluate(
        """() => {
            const box = document.querySelector('[data-testid=generate]');
            const watch = new MutationObserver(() => {
                if (Number(box.dataset.steps || 0) < 10) return;
                watch.disconnect();
                window.seenAtTen = {
                    text: document.querySelector('[data-testid=text-input]').value,
                    strip: !document.querySelector('[data-testid=generate-strip]').hidden,
                };
                box.querySelector('[data-testid=generate-run]').click();
            });
            watch.observe(box, { attributes: true });
        }"""
    )
    page.get_by_test_id("generate-run").click()
    page.wait_for_function("() => window.seenAtTen !== undefined")
    seen = page.evaluate("() => window.seenAtTen")
    assert seen["text"].startswith(prompt) and len(seen["text"]) > len(prompt)
    assert seen["strip"]
    page.wait_for_function("() => document.querySelector('[data-testid=generate]').dataset.reason !== undefined")
    box = page.get_by_test_id("generate")
    assert box.get_attribute("data-reason") == "stopped"
    steps = int(box.get_attribute("data-steps"))
    assert 10 <= steps < 200
    page.wait_for_timeout(500)
    assert int(box.get_attribute("data-steps")) == steps  # nothing more arrived
    assert page.get_by_test_id("generate-run").inner_text() == "Continue"
    tab.settle()
    assert state(tab, "text") == page.get_by_test_id("text-input").input_value()
    assert not tab.unexpected_console_errors()


def effects_card(tab) -> dict:
    """The head effects card as a reader sees it: stale or not, its note, its button, what it measured."""
    return tab.page.evaluate(
        """() => {
            const card = document.querySelector('[data-testid=effects]');
            const note = card.querySelector('[data-testid=effects-note]');
            const plot = card.querySelector('[data-testid=effects-heatmap]');
            return {
                stale: card.dataset.stale === '1',
                note: note.hidden ? '' : note.textContent,
                button: card.querySelector('[data-testid=effects-run]').textContent,
                position: plot.dataset.position ?? null,
                measuring: card.querySelector('[data-testid=effects-run]').disabled,
            };
        }"""
    )


def measure_effects(tab) -> dict:
    """Click Measure (or Measure again) and wait for the answer; the card as it is then."""
    tab.page.get_by_test_id("effects-run").click()
    tab.page.wait_for_function(
        "() => !document.querySelector('[data-testid=effects-run]').disabled"
        " && document.querySelector('[data-testid=effects-heatmap]').dataset.token !== undefined"
    )
    tab.settle()
    return effects_card(tab)


def test_the_effects_card_says_when_its_answer_is_out_of_date(tab):
    tab.open("/#text=" + quote(REPEATED))
    page = tab.page
    fresh = measure_effects(tab)
    n_tokens = len(tab.tokens())
    assert not fresh["stale"] and fresh["note"] == "" and fresh["button"] == "Measure"
    assert fresh["position"] == str(n_tokens - 1)

    # another text: the card no longer describes the box, and says so
    page.get_by_test_id("text-input").fill(REPEATED + " window")
    tab.settle()
    card = effects_card(tab)
    assert card["stale"] and "Out of date" in card["note"] and "the text" in card["note"]
    assert card["button"] == "Measure again"
    card = measure_effects(tab)
    assert not card["stale"] and card["note"] == ""
    assert card["position"] == str(len(tab.tokens()) - 1)

    # another token chosen
    page.locator("[data-testid=tokens] .chip").nth(3).click()
    tab.settle()
    card = effects_card(tab)
    assert card["stale"] and "the chosen token" in card["note"] and "the text" not in card["note"]
    card = measure_effects(tab)
    assert not card["stale"] and card["position"] == "3"

    # a head switched off
    page.get_by_test_id("ablate-L1H2").click()
    tab.settle()
    card = effects_card(tab)
    assert card["stale"] and "the switched-off heads" in card["note"]
    assert not measure_effects(tab)["stale"]

    # a what-if: head effects do not follow it (the server measures the model as trained), in words
    page.get_by_test_id("causal-toggle").click()
    tab.settle()
    card = effects_card(tab)
    assert not card["stale"]
    assert "what-if switches do not apply" in card["note"]
    assert not tab.unexpected_console_errors()


def continue_text(tab, text: str, n: int):
    """Open ``text``, press Continue for ``n`` tokens and wait until the strip is done."""
    tab.open("/#text=" + quote(text))
    tab.page.get_by_test_id("generate-count").fill(str(n))
    tab.page.get_by_test_id("generate-run").click()
    tab.page.wait_for_function("() => document.querySelector('[data-testid=generate]').dataset.reason !== undefined")
    tab.settle()


def test_a_generation_strip_says_when_the_text_changed_after_it(tab):
    continue_text(tab, "The cat sat on the", 3)
    page = tab.page
    note = page.get_by_test_id("generate-note")
    assert note.is_hidden()
    page.get_by_test_id("text-input").fill("A different text")
    tab.settle()
    assert note.is_visible() and "Out of date: the text changed" in note.inner_text()
    assert "stale" in page.get_by_test_id("generate").get_attribute("class")


# each row of the Continue strip: the weights it draws (`row`, the chosen head's or the server's
# mean) and each cell's brightness on the canvas (red + green: dark for 0, yellow for 1)
STRIP_ROWS = """(mode) => {
    const s = window.attnscope.state;
    const strip = document.querySelector('[data-testid=generate-strip]');
    const g = strip.getContext('2d');
    const weights = (step) => (mode === "mean" ? step.attention_mean : step.attention[s.layer][s.head]);
    const cell = strip.width / weights(s.generation.steps.at(-1)).length;  // the widest row sets the cell size
    return s.generation.steps.map((step, r) => ({
        row: weights(step),
        bright: weights(step).map((_, k) => {
            const [red, green] = g.getImageData(Math.floor((k + 0.5) * cell), Math.floor((r + 0.5) * cell), 1, 1).data;
            return red + green;
        }),
    }));
}"""


def assert_brightest_where_heaviest(rows: list[dict]) -> None:
    """In each row with weights that differ, the heaviest cell is drawn brighter than the lightest."""
    for r in rows:
        strongest = max(range(len(r["row"])), key=lambda k: r["row"][k])
        weakest = min(range(len(r["row"])), key=lambda k: r["row"][k])
        if r["row"][strongest] - r["row"][weakest] > 0.05:
            assert r["bright"][strongest] > r["bright"][weakest]


def test_the_generation_strip_draws_weights_in_the_heatmaps_colours_with_a_legend(tab):
    """Weight 1 is yellow and 0 dark, as in every heatmap (the strip had the scale reversed): in each
    row the cell the new token weighted most is the brightest, and a legend says which end is which."""
    continue_text(tab, "The cat sat on the mat. The cat", 4)
    page = tab.page
    rows = page.evaluate(STRIP_ROWS, "head")
    assert len(rows) == 4
    assert_brightest_where_heaviest(rows)
    legend = page.get_by_test_id("generate-legend")
    assert legend.is_visible() and " ".join(legend.inner_text().split()) == "0 1 attention weight"
    assert page.get_by_test_id("generate-status").inner_text().startswith("4 new tokens")


def test_the_strips_mean_of_all_heads_is_the_servers(tab):
    """ "mean of all heads" draws each step's `attention_mean` (the server averages, the page draws):
    in each row the brightest cell is where that mean is largest."""
    continue_text(tab, "The cat sat on the mat. The cat", 4)
    page = tab.page
    page.get_by_test_id("generate-mode").select_option("mean")
    tab.settle()
    rows = page.evaluate(STRIP_ROWS, "mean")
    assert len(rows) == 4
    assert_brightest_where_heaviest(rows)
    assert not tab.unexpected_console_errors()


def test_continue_samples_as_the_link_says_and_the_link_keeps_the_seed(tab):
    """Transformer Explainer's controls: temperature (the page's), top-k, top-p and a seed, in the
    link; the streamed text is the server's for that body, and a drawn seed lands in the link."""
    text = "The cat sat on the mat. Then the"
    tab.open("/#text=" + quote(text) + "&temp=1.5&sample=1&topk=5&topp=0.9&seed=7")
    page = tab.page
    assert page.get_by_test_id("generate-sample").is_checked()
    assert [page.get_by_test_id(f"generate-{k}").input_value() for k in ("topk", "topp", "seed")] == ["5", "0.9", "7"]
    bodies = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/api/generate") else None)
    page.get_by_test_id("generate-count").fill("6")
    page.get_by_test_id("generate-run").click()
    page.wait_for_function("() => document.querySelector('[data-testid=generate]').dataset.reason !== undefined")
    tab.settle()
    body = bodies[-1]
    assert {k: body[k] for k in ("do_sample", "temperature", "top_k", "top_p", "seed")} == {
        "do_sample": True,
        "temperature": 1.5,
        "top_k": 5,
        "top_p": 0.9,
        "seed": 7,
    }
    with urllib.request.urlopen(
        urllib.request.Request(
            tab.base_url + "/api/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
    ) as r:
        done = json.loads(r.read().decode().strip().splitlines()[-1])
    assert page.get_by_test_id("text-input").input_value() == done["text"]

    # no seed given: the server draws one, and the link keeps it so that it repeats this text
    page.get_by_test_id("generate-seed").fill("")
    page.get_by_test_id("generate-seed").dispatch_event("change")
    page.get_by_test_id("generate-run").click()
    page.wait_for_function(
        "() => window.attnscope.state.sampling.seed !== null"
        " && !document.querySelector('[data-testid=generate-run]').dataset.running"
    )
    tab.settle()
    assert re.search(r"[#&]seed=\d+", page.evaluate("() => window.location.hash"))
    assert not tab.unexpected_console_errors()


# Every read of layout a script makes from now on, with the script that made it (a URL path under /js/).
WATCH_LAYOUT_READS = """() => {
  window.__layoutReads = [];
  const watch = (proto, name) => {
    const d = Object.getOwnPropertyDescriptor(proto, name);
    const wrap = (fn) => function (...args) {
      const at = (new Error().stack.match(/\\/js\\/[\\w/]+\\.js/g) ?? []).filter((s) => !s.endsWith('plotly.min.js'));
      window.__layoutReads.push([name, at[0] ?? '']);
      return fn.apply(this, args);
    };
    if (d.get) Object.defineProperty(proto, name, { ...d, get: wrap(d.get) });
    else Object.defineProperty(proto, name, { ...d, value: wrap(d.value) });
  };
  for (const n of ['offsetLeft', 'offsetTop', 'offsetWidth', 'offsetHeight']) watch(HTMLElement.prototype, n);
  for (const n of ['clientWidth', 'clientHeight', 'getBoundingClientRect']) watch(Element.prototype, n);
}"""

TOGGLES_OFF_THEIR_TILES = """async () => {
  const { toggleSpots } = await import('/js/cards/ablation.js');
  const grid = document.querySelector('[data-testid=heads-grid]');
  const canvas = grid.querySelector('canvas').getBoundingClientRect();
  const g = grid.gridLayout;
  const off = [];
  for (const s of toggleSpots(g.layout, g.grid.layers)) {
    const b = grid.querySelector(`[data-testid=ablate-L${s.layer}H${s.head}]`).getBoundingClientRect();
    // the toggle's top-right corner on its tile's (toggleSpots: inset 2 px), the canvas's corner the origin
    if (Math.abs(b.right - canvas.left - s.x) > 1 || Math.abs(b.top - canvas.top - s.y) > 1) off.push(s);
  }
  return off;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_toggles_sit_on_their_tiles_and_a_keystroke_reads_no_layout_for_them(tab, width):
    """Each head's toggle sits in its tile's top-right corner at both widths, before and after a keystroke; and
    the render a keystroke causes reads no layout for the cards (a read after the page's writes would force
    the browser to lay the page out again in the middle of the render)."""
    tab.open_at(width, "/#text=" + quote(REPEATED))
    page = tab.page
    assert page.evaluate(TOGGLES_OFF_THEIR_TILES) == []
    page.evaluate(WATCH_LAYOUT_READS)
    box = page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" window")
    tab.settle()
    assert state(tab, "text") == REPEATED + " window"
    reads = page.evaluate("() => window.__layoutReads")
    assert reads, "the watch saw no read at all"  # the token strip measures its width: the watch works
    assert [r for r in reads if r[1].startswith("/js/cards/")] == []
    assert page.evaluate(TOGGLES_OFF_THEIR_TILES) == []
