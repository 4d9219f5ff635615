"""Redraw the README's screenshots (docs/*.png) at 1440x900.

- The Photo page on the shipped default model (a 32x32 CIFAR-10 ViT) in fp32, so the numbers do not depend on which
  precision "auto" picks on this machine: one tab per shot, scrolled to the tab bar, the sidebar's page switcher in
  sight, on photos of CIFAR-10's classes, one of them a photo it gets wrong.
- The Ask page on a tiny random-weight LLaVA folder built here by tests/tiny_vlms.py (no model can be downloaded
  for a screenshot): it shows the page's layout, and its answer means nothing.

    python docs/make_screenshots.py [PHOTOS]    # needs Debian's chromium and the playwright package

PHOTOS is a folder holding the photos named in SHOTS and ASK (default: ../shared/data/photos beside the checkout).
The photos are uploaded to the page, never copied into the repository; only the screenshots are. Each shot prints
what its page shows (the prediction line, or the question and answer): the README's captions quote these.
"""

import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_harness import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    HIDDEN_TABS,
    choose,
    new_page,
    streamlit_server,
    wait_until_drawn,
    wait_until_idle,
)
from playwright.sync_api import sync_playwright  # noqa: E402
from tiny_vlms import make_tiny_vlm  # noqa: E402

from vitviz.loading.specs import DEFAULT_CHECKPOINT  # noqa: E402

PHOTOS = ROOT.parent / "shared" / "data" / "photos"
WIDTH, HEIGHT = 1440, 900
# file name: (tab, a text the tab shows once drawn, the photo, a class to compare with in Class-specific). What the
# default model is for: an airliner (92 % airplane), horses, an eagle; and what it gets wrong: Chelsea the cat, which
# it calls a dog (84 %), shown beside its maps for 'cat'.
SHOTS = {
    "overview.png": ("Overview", "Attention rollout", "vitexplain_plane.png", None),
    "heads.png": ("Heads & layers", "Every head in layer", "darknet_horses.jpg", None),
    "click_a_patch.png": ("Click a patch", "Each head: what patch", "darknet_eagle.jpg", None),
    "class_specific.png": ("Class-specific", "Logit lens", "skimage_chelsea.png", "cat"),
}


@dataclass(frozen=True)
class AskShot:
    """The Ask page's shot: a photo, a question, and the answer token clicked (0: the first)."""

    file: str = "ask.png"
    photo: str = "gradcam_dog_cat.jpg"
    question: str = "Where is the cat in this picture?"
    token: int = 1


ASK = AskShot()

# scroll the Photo page's main area so the prediction line, the model's input and the tab bar sit at the top
TO_THE_TABS = """() => { const main = document.querySelector('[data-testid=stMain]');
    const caption = [...document.querySelectorAll('[data-testid=stImageCaption]')]
        .find(e => e.innerText.startsWith('What the model saw'));
    const row = caption.closest('[data-testid=stHorizontalBlock]');
    main.scrollTop += row.getBoundingClientRect().top - 72; }"""  # below the 60 px header
# scroll the Ask page's main area so the question and answer sit at the top, the tokens and the map below them
TO_THE_ANSWER = """() => { const main = document.querySelector('[data-testid=stMain]');
    const answer = [...document.querySelectorAll('[data-testid=stMarkdown]')]
        .find(e => e.innerText.startsWith('Q:'));
    main.scrollTop += answer.getBoundingClientRect().top - 72; }"""


def settle(page) -> None:
    """No focus ring on the last control used, the mouse on no chart or button, every run finished and drawn."""
    page.evaluate("() => document.activeElement?.blur()")
    page.mouse.move(WIDTH - 440, 170)  # on the prediction line (Photo) or the answer (Ask): no toolbar, no tooltip
    wait_until_idle(page)
    page.wait_for_timeout(800)  # let the last images and charts finish their transitions


def upload_photos(page, url: str, paths: list[Path]) -> None:
    """Open the Photo page, choose fp32 and upload every photo (they stay in the session's picker)."""
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_text("Upload one or more photos").wait_for()
    page.locator("input[type=file]").first.set_input_files([str(path) for path in paths])
    wait_until_drawn(page, "Attention rollout")
    page.get_by_test_id("stSidebar").get_by_text("fp32", exact=True).click()
    page.get_by_test_id("stSidebar").get_by_text("auto chose").wait_for(state="detached")
    wait_until_drawn(page, "Attention rollout")


def photo_shot(page, name: str, tab: str, text: str, photo: str, other: str | None) -> str:
    """One tab of the Photo page on ``photo``, written to docs/``name``; returns the prediction line."""
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
    settle(page)
    if page.evaluate(HIDDEN_TABS):  # every tab name must show in the picture of the page
        raise SystemExit(f"{name}: tab names out of sight: {page.evaluate(HIDDEN_TABS)}")
    page.screenshot(path=str(ROOT / "docs" / name))
    return page.locator("[data-testid=stMarkdown]", has_text="the model saw the photo").first.inner_text()


def ask_page(page, model: Path, shot: AskShot) -> str:
    """The Ask page (reached through the sidebar's page switcher, so the uploads stay) with ``model`` asked
    ``shot.question`` about ``shot.photo`` and the answer's token ``shot.token`` clicked; returns the question and
    answer it shows."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Ask").click()
    page.get_by_text("Name a vision-language model").wait_for()
    field = page.get_by_role("textbox", name="Model")
    field.fill(str(model))
    field.press("Enter")
    choose(page, "Image", shot.photo)
    page.get_by_text("Type a question about the photo").wait_for()
    page.get_by_role("textbox", name="Question").fill(shot.question)
    page.get_by_role("button", name="Ask", exact=True).click()
    wait_until_drawn(page, "Attention of token 0 on the image")
    if shot.token:
        page.get_by_role("radiogroup", name="Answer").get_by_role("radio").nth(shot.token + 1).click()
        wait_until_drawn(page, f"Attention of token {shot.token} on the image")
    page.evaluate(TO_THE_ANSWER)
    settle(page)
    return page.locator("[data-testid=stMarkdown]", has_text="Q:").first.inner_text().replace("\n\n", " ")


def main(photos: Path) -> None:
    paths = {photo: photos / photo for photo in [*(shot[2] for shot in SHOTS.values()), ASK.photo]}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise SystemExit(f"missing photos: {', '.join(missing)} (give the folder that holds them)")
    folder = ROOT / "runs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiny-random-llava-") as tiny:
        model = make_tiny_vlm("llava", Path(tiny))
        # the Ask page opens folders only inside the allowed ones: the tiny model's, beside the defaults
        allowed = os.pathsep.join([str(DEFAULT_CHECKPOINT.parent), str(ROOT), tiny])
        env = {"VITVIZ_SAMPLES": "", "VITVIZ_MODEL_DIRS": allowed}
        with streamlit_server(folder, env) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = new_page(browser, WIDTH, HEIGHT)
            upload_photos(page, server.url, list(dict.fromkeys(paths.values())))
            for name, (tab, text, photo, other) in SHOTS.items():
                line = photo_shot(page, name, tab, text, photo, other)
                print(f"wrote {ROOT / 'docs' / name}: {photo}: {line}")
            said = ask_page(page, model, ASK)
            page.screenshot(path=str(ROOT / "docs" / ASK.file))
            print(f"wrote {ROOT / 'docs' / ASK.file}: {ASK.photo}: {said} (token {ASK.token} clicked)")
            browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else PHOTOS)
