"""The Dataset page in a real browser (`streamlit run app.py`, headless Chromium via Playwright): open an index,
filter, select a row of the table by a click and open it in the Photo page, view the head clusters and search a
patch, with no exception drawn on any of them."""

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    click_picture_shown,
    index_server,
    no_exception,
    open_index,
    require_browser,
    wait_until_drawn,
)

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset")
    with index_server(folder) as running:
        yield running, folder


def test_open_select_open_in_photo_heads_and_search(server):
    running, folder = server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = open_index(browser, running.url, folder / "index", 1400, 1000)
        no_exception(page)
        # the first row's selection box: the grid is a canvas, so click where the row marker column draws it
        grid = page.locator("[data-testid=stDataFrame]").first
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)
        wait_until_drawn(page, "Open in Photo")
        no_exception(page)
        page.get_by_role("button", name="Open in Photo").first.click()
        wait_until_drawn(page, "what does the Vision Transformer look at?")
        page.get_by_text("index: ").first.wait_for()
        no_exception(page)
        page.get_by_role("link", name="Dataset").click()
        wait_until_drawn(page, "25 images match")  # the folder is still typed in
        page.get_by_role("tab", name="Heads", exact=True).click()
        wait_until_drawn(page, "Heads clustered by their dataset-averaged statistics")
        no_exception(page)
        page.get_by_role("tab", name="Patch search", exact=True).click()
        wait_until_drawn(page, "most similar patches")
        no_exception(page)
        # a click on the photo picks the patch: image 1 is 32 x 32, all of it seen, a 4 x 4 grid
        image_field = page.get_by_role("spinbutton", name="Image id")
        image_field.fill("1")
        image_field.press("Enter")
        wait_until_drawn(page, "Image 1 (")
        picture, shown = click_picture_shown(page, "image 1", exact=True)
        picture.click(position={"x": shown["width"] / 8, "y": shown["height"] * 3 / 8})  # patch (1, 0)
        wait_until_drawn(page, "patch (1, 0). Click a patch")
        assert page.get_by_role("spinbutton", name="Patch row").input_value() == "1"
        assert page.get_by_role("spinbutton", name="Patch column").input_value() == "0"
        no_exception(page)
        browser.close()
