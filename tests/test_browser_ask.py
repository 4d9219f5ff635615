"""The Ask page in a real browser (`streamlit run app.py`, headless Chromium via Playwright) on a tiny LLaVA folder:
a model typed in, a photo uploaded, a question asked, a token of the answer clicked and its map shown."""

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    new_page,
    require_browser,
    streamlit_server,
    wait_until_drawn,
)
from PIL import Image
from tiny_models import tiny_checkpoint
from tiny_vlms import tiny_vlm_folder

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_ask")
    vlm = tiny_vlm_folder("llava", tmp_path_factory)
    env = {
        "VITVIZ_DEFAULT_CHECKPOINT": str(tiny_checkpoint(folder / "model.pt")),
        "VITVIZ_SAMPLES": "",
        "VITVIZ_TEST_PRECISION": "fp32",
        "VITVIZ_MODEL_DIRS": str(vlm.parent),
    }
    with streamlit_server(folder, env) as running:
        yield running, folder, vlm


def test_ask_click_a_token_and_see_its_map(server):
    running, folder, vlm = server
    photo = folder / "photo.png"
    Image.new("RGB", (300, 200), (40, 120, 200)).save(photo)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 1400, 1000)
        page.goto(f"{running.url}/ask")
        field = page.get_by_role("textbox", name="Model")
        field.fill(str(vlm))
        field.press("Enter")
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        page.locator("input[type=file]").first.set_input_files(str(photo))
        page.get_by_text("Type a question about the photo").wait_for(timeout=120_000)
        page.get_by_role("button", name="Ask", exact=True).click()
        wait_until_drawn(page, "Attention of token 0 '")
        pills = page.get_by_role("radiogroup", name="Answer").get_by_role("radio")
        assert pills.first.inner_text() == "all tokens" and pills.count() >= 3
        pills.nth(2).click()  # the answer's second token
        wait_until_drawn(page, "Attention of token 1 '")
        shown = page.locator("[data-testid=stImage] img").all()
        sizes = [image.evaluate("i => [i.naturalWidth, i.naturalHeight]") for image in shown]
        assert [300, 200] in sizes  # the map over the photo, at the photo's size
        assert page.locator("[data-testid=stException]").count() == 0
        assert page.get_by_test_id("stAlertContentError").count() == 0
        browser.close()
