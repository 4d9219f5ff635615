"""The SAE views in a real browser (`streamlit run app.py`, headless Chromium via Playwright): the Dataset page's
Features (SAE) tab with a latent's top images, and the Photo page's SAE features tab, whose slider is moved by the
keyboard, applied (the banner and the before-and-after table appear) and undone by the banner's restore button."""

import re

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    click_picture_shown,
    eventually,
    new_page,
    no_exception,
    require_browser,
    streamlit_server,
    wait_until_drawn,
    wait_until_idle,
)
from dataset_harness import INDEX, QUICK, make_images
from PIL import Image
from tiny_models import tiny_checkpoint

from vitviz.commands.index import main as index_main
from vitviz.commands.sae import main as sae_main

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_sae")
    model = tiny_checkpoint(folder / "model.pt", num_layers=3)
    assert (
        index_main([str(make_images(folder / "images")), "--model", str(model), "--out", str(folder / "index"), *INDEX])
        == 0
    )
    assert sae_main(
        ["train", str(folder / "index"), "--block", "0", *QUICK, "--seed", "1", "--out", str(folder / "sae")]
    )
    env = {
        "VITVIZ_DEFAULT_CHECKPOINT": str(model),
        "VITVIZ_SAMPLES": "",
        "VITVIZ_TEST_PRECISION": "fp32",
        "VITVIZ_MODEL_DIRS": str(folder),
    }
    with streamlit_server(folder, env) as running:
        yield running, folder


def type_into(page, label: str, text: str) -> None:
    field = page.get_by_role("textbox", name=label)
    field.fill(text)
    field.press("Enter")


def test_features_tab_and_the_photo_tabs_slider(server):
    running, folder = server
    photo = folder / "photo.png"
    Image.new("RGB", (64, 48), (200, 80, 30)).save(photo)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 1400, 1000)
        page.goto(f"{running.url}/dataset")
        type_into(page, "Index folder", str(folder / "index"))
        wait_until_drawn(page, "25 images match")
        page.get_by_role("tab", name="Features (SAE)", exact=True).click()
        type_into(page, "SAE from the Hub or a folder", str(folder / "sae"))
        wait_until_drawn(page, "Classes it raises most")
        page.get_by_text("largest code").first.wait_for(timeout=90_000)
        no_exception(page)

        page.get_by_role("link", name="Photo").click()
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        page.locator("input[type=file]").first.set_input_files(str(photo))
        page.get_by_text("Attention rollout").first.wait_for(timeout=120_000)
        page.get_by_role("tab", name="SAE features", exact=True).click()
        type_into(page, "SAE from the Hub or a folder", str(folder / "sae"))
        wait_until_drawn(page, "latents that fire most on this photo")
        no_exception(page)
        # a click on the photo picks the patch whose latents are listed. The model saw the centre 48 x 48 of the
        # 64 x 48 photo, a 4 x 4 grid of 12-pixel patches from x = 8: patch (0, 0)'s centre is at (14, 6)
        picture, shown = click_picture_shown(page, "photo.png: each patch's largest SAE code")
        assert page.get_by_role("spinbutton", name="Row").input_value() == "2"  # the middle, before the click
        picture.click(position={"x": shown["width"] * 14 / 64, "y": shown["height"] * 6 / 48})
        eventually(
            lambda: [page.get_by_role("spinbutton", name=n).input_value() for n in ("Row", "Column")] == ["0", "0"],
            what="patch (0, 0) chosen by the click",
        )
        wait_until_idle(page)
        no_exception(page)
        # the chosen latent's slider: -2 to 2 x its largest activation (the Features tab wrote it beside the SAE)
        slider = page.locator("[data-testid=stSlider]").filter(has_text="Latent ").get_by_role("slider")
        assert (slider.get_attribute("min"), slider.get_attribute("max"), slider.input_value()) == ("-2", "2", "0")
        slider.focus()
        slider.press("ArrowRight")  # one step: 0.1 x its largest activation
        eventually(lambda: slider.input_value() == "0.1", what="the slider at 0.1")
        wait_until_idle(page)
        page.get_by_role("button", name="Apply to the page's model").click()
        wait_until_drawn(page, "Edited model.")
        banner = page.locator("[data-testid=stAlert]").filter(has_text="Edited model.").first.inner_text()
        value = re.search(r"set to (-?[0-9.e+-]+?)\. The", banner)
        assert value and float(value.group(1)) > 0, banner  # 0.1 x its largest activation
        page.get_by_text("What the intervention changes").wait_for(timeout=90_000)
        no_exception(page)
        page.get_by_role("button", name="Restore the model").click()
        page.get_by_text("Edited model.").wait_for(state="detached", timeout=90_000)
        no_exception(page)
        browser.close()
