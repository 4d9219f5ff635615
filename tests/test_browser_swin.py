"""The Photo page with a Swin in headless Chromium at 800, 1280 and 1920 px: a tiny Swin save_pretrained folder typed
into the sidebar, the page drawn; in Heads & layers a click on a patch of a shifted block shows that patch's window
per head, and another stage keeps the patch; no exception on the page, no error in the browser's console.
Screenshots go to tests/screenshots/ (VITVIZ_SCREENSHOTS)."""

import os
from pathlib import Path

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    choose,
    click_picture_shown,
    new_page,
    no_exception,
    require_browser,
    streamlit_server,
    wait_until_drawn,
)
from PIL import Image
from tiny_swins import swin_folder

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

SCREENSHOTS = Path(os.environ.get("VITVIZ_SCREENSHOTS", ROOT / "tests" / "screenshots"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_swin")
    swin = swin_folder(folder / "swin")
    env = {"VITVIZ_SAMPLES": "", "VITVIZ_TEST_PRECISION": "fp32", "VITVIZ_MODEL_DIRS": str(folder)}
    with streamlit_server(folder, env) as running:
        yield running, folder, swin


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_swin_page_click_a_patch_on_a_shifted_block_and_switch_stages(server, width):
    running, folder, swin = server
    photo = folder / "photo.png"
    image = Image.new("RGB", (320, 320), (40, 120, 200))
    image.paste((230, 200, 40), (60, 60, 220, 260))
    image.save(photo)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, width, 1000)
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(running.url, wait_until="domcontentloaded")
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        choose(page, "Model", "path or upload...")
        field = page.get_by_role("textbox", name="vitviz checkpoint file or Hugging Face folder")
        field.fill(str(swin))
        field.press("Enter")
        page.get_by_text("Swin, 3 stages").first.wait_for(timeout=120_000)
        page.locator("[data-testid=stMain] input[type=file]").first.set_input_files(str(photo))
        wait_until_drawn(page, "Attention rollout across windows and stages")
        no_exception(page)
        page.screenshot(path=str(SCREENSHOTS / f"swin_overview_{width}.png"), full_page=True)

        page.get_by_role("tab", name="Heads & layers", exact=True).click()
        wait_until_drawn(page, "stage 1: 16x16 tokens, windows 4x4, blocks 0 to 1")
        page.get_by_text("block 1 (shifted by 2x2)", exact=True).click()
        wait_until_drawn(page, "of stage 1, block 1 (shifted by 2x2)")
        picture, shown = click_picture_shown(page, "photo.png with stage 1's grid")
        # patch (0, 0) of the 16 x 16 grid: in the shifted block its window wraps round to the far corners
        picture.click(position={"x": shown["width"] / 32, "y": shown["height"] / 32})
        wait_until_drawn(page, "patch (0, 0) of stage 1, block 1 (shifted by 2x2)")
        page.get_by_text("16 tokens in this window (a shifted window can wrap").wait_for(timeout=60_000)
        no_exception(page)
        page.screenshot(path=str(SCREENSHOTS / f"swin_window_shifted_{width}.png"), full_page=True)

        page.get_by_text("stage 2: 8x8 tokens, windows 4x4, blocks 2 to 3", exact=True).click()
        wait_until_drawn(page, "patch (0, 0) of stage 2")
        no_exception(page)
        page.screenshot(path=str(SCREENSHOTS / f"swin_window_stage2_{width}.png"), full_page=True)
        assert not page.get_by_text("Traceback").count()
        assert not errors, errors
        browser.close()
