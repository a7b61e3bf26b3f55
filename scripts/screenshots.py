"""Screenshots of every view of the explorer and of the lessons, for docs/screenshots/.

Starts the real server (or uses ``--url``), opens each view in headless Debian chromium at
1280×800 (and the head view at 1024 px wide) and saves PNGs:

    python scripts/screenshots.py                        # shipped model (see tests/kit/live.py)
    ATTNSCOPE_CHECKPOINT=runs/small/checkpoint python scripts/screenshots.py
    python scripts/screenshots.py --url http://127.0.0.1:8000 --out /tmp/shots
    cat README.md docs/*.md model/ours/evalsets/everyday.txt > /tmp/corpus.txt
    attnscope atlas --corpus /tmp/corpus.txt --out /tmp/atlas --seq-len 128
    attnscope serve --atlas /tmp/atlas &  python scripts/screenshots.py --url http://127.0.0.1:8000 --only atlas

Views are scrolled so that the tab bar sits under the top bar: what a user sees after
choosing that tab.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.kit
sys.path.insert(0, str(ROOT / "tests" / "frontend"))
from tests.kit.live import CHROMIUM, FILLER, chromium, get_json, live_server, text_of_tokens, wait_settled  # noqa: E402

SENTENCE = "The cat sat on the mat because the mat was warm."
REPEATED = "Open the red door, then close the blue window. Open the red door, then close the blue window."
COPY = REPEATED.removesuffix(" window.")  # one token short of the copy: the next token is the induction head's


@dataclass
class Shot:
    name: str
    hash: str
    width: int = 1280
    height: int = 800
    scroll_to_views: bool = True
    page: str = "/"
    type_after: str | None = None  # text entered (then Enter) after the first picture is drawn
    scroll_selector: str | None = None
    open_atlas_head: tuple[int, int] | None = None  # (layer, head) of the atlas map to click: its card opens


def shots(long_text: str) -> list[Shot]:
    q = quote
    return [
        Shot("overview", f"#view=head&layer=3&head=2&pos=15&text={q(REPEATED)}", scroll_to_views=False),
        Shot("head", f"#view=head&layer=3&head=2&pos=15&text={q(REPEATED)}"),
        Shot("compare", f"#view=scaling&layer=0&head=0&text={q(SENTENCE)}"),
        Shot("pipeline", f"#view=pipeline&layer=0&head=0&text={q(SENTENCE)}"),
        Shot("variance", f"#view=variance&layer=3&head=2&text={q(SENTENCE)}"),
        Shot("roles", f"#view=roles&role=induction&layer=3&head=2&text={q(REPEATED)}"),
        Shot("lines", f"#view=lines&layer=3&head=2&text={q(SENTENCE)}"),
        Shot("rollout", f"#view=rollout&text={q(REPEATED)}"),
        Shot(
            "two-texts",
            f"#view=twotexts&layer=3&head=2&text={q('The doctor said she was late.')}"
            f"&textb={q('The doctor said he was late.')}",
        ),
        Shot("q-k", f"#view=qk&layer=1&head=2&text={q(SENTENCE)}"),
        Shot(
            "whatif-no-mask",
            f"#view=head&causal=0&layer=0&head=0&text={q(SENTENCE)}",
            scroll_to_views=False,
            scroll_selector="#whatif-banner",
        ),
        Shot("long-context", f"#view=head&layer=3&head=2&text={q(long_text)}"),
        Shot("error-too-long", f"#view=head&text={q(SENTENCE)}", scroll_to_views=False, type_after=FILLER * 6),
        Shot("head-1024", f"#view=head&layer=3&head=2&pos=15&text={q(REPEATED)}", width=1024, scroll_to_views=False),
        Shot("compare-1024", f"#view=scaling&layer=0&head=0&text={q(SENTENCE)}", width=1024),
        Shot("atlas", "#view=atlas&text=The%20cat", height=1950, open_atlas_head=(3, 2)),  # a server with --atlas
        # the induction head L3H2 switched off (README.md, docs/VIEWS.md): the card says what " window" falls to
        Shot("ablation", f"#view=head&layer=3&head=2&off=3.2&text={q(COPY)}", height=1560, scroll_to_views=False),
        Shot("lessons", "", page="/lessons.html", scroll_to_views=False),
        Shot("lessons-variance", "", page="/lessons.html", scroll_to_views=False, scroll_selector="#lesson-variance"),
    ]


SCROLL_TO_VIEWS = """() => {
  const bar = document.querySelector('.viewbar');
  const top = document.querySelector('.topbar').offsetHeight;
  window.scrollTo(0, bar.getBoundingClientRect().top + window.scrollY - top);
}"""


def take(browser, base_url: str, shot: Shot, out: Path) -> Path:
    page = browser.new_page(viewport={"width": shot.width, "height": shot.height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(base_url + shot.page + shot.hash)
    if shot.page == "/":
        wait_settled(page, timeout=120_000)
        page.wait_for_function("() => document.querySelector('.view:not([hidden]) .drawn') !== null")
    else:
        page.wait_for_selector("#variance-sweep.drawn", timeout=120_000)
    if shot.type_after is not None:
        box = page.get_by_test_id("text-input")
        box.fill(shot.type_after)
        box.press("Enter")
        wait_settled(page, timeout=120_000)
    if shot.open_atlas_head is not None:  # a click on that cell of the map; its card and its q/k plot drawn
        layer, head = shot.open_atlas_head
        page.evaluate(
            """([layer, head]) => { const gd = document.querySelector('#atlas-map');
                 const z = gd.data[0].z; const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
                 window.__cell = [box.left + box.width * (head + 0.5) / z[0].length,"""
            """ box.top + box.height * (layer + 0.5) / z.length]; }""",
            [layer, head],
        )
        x, y = page.evaluate("() => window.__cell")
        page.mouse.click(x, y)
        page.wait_for_function("() => document.querySelector('#atlas-qk')?.data?.length >= 2", timeout=60_000)
    if shot.scroll_to_views:
        page.evaluate(SCROLL_TO_VIEWS)
    if shot.scroll_selector:
        page.evaluate(
            "(sel) => { const el = document.querySelector(sel); window.scrollTo(0, el.offsetTop - 60); }",
            shot.scroll_selector,
        )
    page.mouse.move(0, 0)
    page.wait_for_timeout(400)  # let Plotly finish any resize
    path = out / f"{shot.name}.png"
    page.screenshot(path=str(path))
    page.close()
    if errors:
        raise RuntimeError(f"{shot.name}: page errors {errors}")
    return path


def picture(path: Path) -> Path:
    """A small drawn scene (sky, sun, hill, house) for the image view's shot: no file downloaded."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (320, 224), (120, 170, 230))
    d = ImageDraw.Draw(im)
    d.ellipse((230, 20, 290, 80), fill=(250, 210, 60))
    d.ellipse((-80, 150, 400, 360), fill=(70, 150, 70))
    d.rectangle((60, 110, 150, 190), fill=(200, 80, 60))
    d.polygon([(50, 112), (105, 62), (160, 112)], fill=(120, 60, 40))
    d.rectangle((95, 150, 115, 190), fill=(80, 50, 30))
    im.save(path)
    return path


def vision_shot(browser, out: Path) -> Path:
    """The Image view on a tiny random Gemma 3 built on the spot (tests/kit/vision.py): a drawn picture
    picked beside the text, every layer's mean for the last token, one region hovered."""
    import tempfile

    from tests.kit.live import serving
    from tests.kit.vision import build_gemma3

    root = Path(tempfile.mkdtemp(prefix="attnscope-vision-"))
    with serving(build_gemma3(root / "gemma3", image_size=224, tokens=64)) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(server.url + f"/#view=head&layer=1&imgmode=all&text={quote('What is in the picture?')}")
        wait_settled(page, timeout=120_000)
        page.get_by_test_id("image-file").set_input_files(str(picture(root / "scene.png")))
        page.wait_for_function("() => document.querySelectorAll('[data-testid=image-cell]').length === 64")
        page.evaluate(SCROLL_TO_VIEWS)
        page.locator("[data-testid=image-cell]").nth(27).hover()
        path = out / "vision.png"
        page.screenshot(path=str(path))
        page.close()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Screenshots of every view into docs/screenshots/")
    ap.add_argument(
        "--url", help="an attnscope server that is already running (default: start one; and the vision shot's)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--only", nargs="*", help="names of the shots to take (default: all)")
    args = ap.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing: install Debian's chromium package", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)

    def run(base_url: str) -> None:
        long_text = text_of_tokens(base_url, 256)
        with chromium() as browser:
            atlas = get_json(base_url + "/api/atlas")["atlases"]
            for shot in shots(long_text):
                if args.only and shot.name not in args.only:
                    continue
                if shot.open_atlas_head is not None and not atlas:
                    print(f"{shot.name}: skipped, the server has no atlas (serve --atlas DIR)")
                    continue
                print(take(browser, base_url, shot, args.out))
            if not args.url and (not args.only or "vision" in args.only):  # its own server: a tiny Gemma 3
                print(vision_shot(browser, args.out))

    if args.url:
        run(args.url.rstrip("/"))
    else:
        with live_server(threads=2) as server:
            print(f"server: {server.url}, checkpoint {server.checkpoint}")
            run(server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
