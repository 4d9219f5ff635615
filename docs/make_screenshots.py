"""Redraw the README's screenshots (docs/*.png): the dashboard on the shipped default model (a 32x32 CIFAR-10 ViT) at
1440x900, each tab scrolled to its tab bar, on photos of CIFAR-10's classes, one of them a photo it gets wrong.

    python docs/make_screenshots.py [PHOTOS]    # needs Debian's chromium and the playwright package

PHOTOS is a folder holding the photos named in SHOTS (default: ../shared/data/photos beside the checkout). The photos
are uploaded to the page, never copied into the repository; only the screenshots are.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_harness import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    HIDDEN_TABS,
    choose,
    streamlit_server,
    wait_until_drawn,
    wait_until_idle,
)
from playwright.sync_api import sync_playwright  # noqa: E402

PHOTOS = ROOT.parent / "shared" / "data" / "photos"
# file name: (tab, a text the tab shows once drawn, the photo, a class to compare with in Class-specific). What the
# default model is for: an airliner (92 % airplane), horses, an eagle; and what it gets wrong: Chelsea the cat, which
# it calls a dog (84 %), shown beside its maps for 'cat'.
SHOTS = {
    "overview.png": ("Overview", "Attention rollout", "vitexplain_plane.png", None),
    "heads.png": ("Heads & layers", "Every head in layer", "darknet_horses.jpg", None),
    "click_a_patch.png": ("Click a patch", "Each head: what patch", "darknet_eagle.jpg", None),
    "class_specific.png": ("Class-specific", "Logit lens", "skimage_chelsea.png", "cat"),
}

# scroll the page's main area so the prediction line, the model's input and the tab bar sit at the top
TO_THE_TABS = """() => { const main = document.querySelector('[data-testid=stMain]');
    const caption = [...document.querySelectorAll('[data-testid=stImageCaption]')]
        .find(e => e.innerText.startsWith('What the model saw'));
    const row = caption.closest('[data-testid=stHorizontalBlock]');
    main.scrollTop += row.getBoundingClientRect().top - 72; }"""  # below the 60 px header


def main(photos: Path) -> None:
    paths = {photo: photos / photo for _, _, photo, _ in SHOTS.values()}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise SystemExit(f"missing photos: {', '.join(missing)} (give the folder that holds them)")
    folder = ROOT / "runs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    with streamlit_server(folder, {"VITVIZ_SAMPLES": ""}) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(server.url, wait_until="domcontentloaded")
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        page.locator("input[type=file]").first.set_input_files([str(path) for path in paths.values()])
        wait_until_drawn(page, "Attention rollout")
        for name, (tab, text, photo, other) in SHOTS.items():
            page.get_by_role("tab", name="Overview", exact=True).click()
            choose(page, "Image", photo)
            wait_until_drawn(page, f"{photo}, ")  # the rollout's caption names the photo: it is drawn
            page.get_by_role("tab", name=tab, exact=True).click()
            wait_until_drawn(page, text)
            if other is not None:
                page.get_by_role("combobox", name="Compare with another class").click()
                page.get_by_role("option", name=re.compile(rf"^{other} \(")).click()
                wait_until_drawn(page, f"relevance for '{other}'")
            page.evaluate(TO_THE_TABS)
            page.evaluate("() => document.activeElement?.blur()")  # no focus ring on the last control used
            page.mouse.move(1000, 170)  # on the prediction line: no chart toolbar, no sidebar button
            wait_until_idle(page)
            page.wait_for_timeout(800)
            if page.evaluate(HIDDEN_TABS):  # every tab name must show in the picture of the page
                raise SystemExit(f"{name}: tab names out of sight: {page.evaluate(HIDDEN_TABS)}")
            page.screenshot(path=str(ROOT / "docs" / name))
            line = page.locator("[data-testid=stMarkdown]", has_text="the model saw the photo").first.inner_text()
            print(f"wrote {ROOT / 'docs' / name}: {photo}: {line}")
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else PHOTOS)
