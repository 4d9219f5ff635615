"""The Video page in a real browser (`streamlit run app.py`, headless Chromium via Playwright) at 800, 1280 and 1920 px:
a tiny VideoMAE folder typed in, a clip uploaded, the frame slider moved, a patch clicked on the large frame (its
attention shown) and the overlay downloaded as a GIF of the model's four frames."""

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    click_picture_shown,
    new_page,
    no_exception,
    require_browser,
    streamlit_server,
    wait_until_drawn,
    wait_until_idle,
)
from PIL import Image
from tiny_videos import moving_clip, tiny_video_folder

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_video")
    model = tiny_video_folder(folder / "videomae")
    env = {"VITVIZ_SAMPLES": "", "VITVIZ_TEST_PRECISION": "fp32", "VITVIZ_MODEL_DIRS": str(folder)}
    with streamlit_server(folder, env) as running:
        yield running, folder, model


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_upload_slide_click_a_patch_and_download(server, browser, width, tmp_path):
    running, folder, model = server
    clip = tmp_path / "walk.mp4"
    clip.write_bytes(moving_clip(12))
    page = new_page(browser, width, 1000)
    page.goto(f"{running.url}/video")
    field = page.get_by_role("textbox", name="Model")
    field.fill(str(model))
    field.press("Enter")
    wait_until_drawn(page, "Prediction: ")  # the sample clip first
    page.locator("input[type=file]").first.set_input_files(str(clip))
    page.get_by_text("walk.mp4").first.wait_for()
    wait_until_drawn(page, "Prediction: ")
    wait_until_idle(page)
    no_exception(page)
    # the slider: focus its thumb and step it on to frame 2
    page.get_by_role("slider", name="Frame").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_until_drawn(page, "Frame 2: attention rollout")
    # a click on the large frame, at its bottom-right part: that patch's attention, on frames 2-3
    picture, box = click_picture_shown(page, "frame 2 of walk.mp4")
    picture.click(position={"x": box["width"] * 0.9, "y": box["height"] * 0.6})
    wait_until_drawn(page, "attention of the patch at row 2, column 3, frames 2-3")
    no_exception(page)
    assert page.get_by_test_id("stAlertContentError").count() == 0
    page.screenshot(path=str(tmp_path / f"video_{width}.png"), full_page=True)  # to look at when it fails
    with page.expect_download(timeout=60_000) as started:
        page.get_by_role("button", name="Overlay (GIF)").click()
    saved = tmp_path / "overlay.gif"
    started.value.save_as(saved)
    gif = Image.open(saved)
    assert gif.format == "GIF" and gif.size == (320, 320)
    page.close()
