"""The Dataset page's views for a selection, in headless Chromium as a user would drive them: a lasso drawn on the
Embedding map makes its points' images the selection and the grid below shows them; a "Similar" click under a
thumbnail selects that image's nearest images. With VITVIZ_SHOTS set, each view is saved at 800, 1280 and 1920 px."""

import os
import time

import numpy as np
import pytest
from browser_harness import CHROMIUM, CHROMIUM_ARGS, new_page, require_browser, streamlit_server, wait_until_drawn
from test_browser_dataset_defects import CLASSES, ten_class_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_command
from vitviz.dataset.analysis import project_embeddings

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset_views")
    model = tiny_checkpoint(folder / "model.pt", names=CLASSES)
    images = ten_class_images(folder / "images")
    assert index_command([str(images), "--model", str(model), "--out", str(folder / "index")]) == 0
    env = {"VITVIZ_SAMPLES": "", "VITVIZ_TEST_PRECISION": "fp32", "VITVIZ_MODEL_DIRS": str(folder)}
    with streamlit_server(folder, env) as running:
        yield running, folder


# the map's plot area in viewport pixels, and its x axis's range (PC 1)
MAP_GEOMETRY = """() => {
    const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
    const box = plot.getBoundingClientRect(), xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis;
    const left = box.left + xa._offset, top = box.top + ya._offset;
    return {left, top, width: xa._length, height: ya._length, range: xa.range};
}"""


# the displayed widths of the grid's thumbnails (its images with a caption that starts with an image id)
THUMBNAIL_WIDTHS = """() => [...document.querySelectorAll('[data-testid=stImage]')]
    .filter(e => /^[0-9]/.test((e.querySelector('[data-testid=stImageCaption]') || {}).innerText || ''))
    .map(e => e.querySelector('img').getBoundingClientRect().width)"""


def shot(page, name: str) -> None:
    if os.environ.get("VITVIZ_SHOTS"):
        page.screenshot(path=f"{os.environ['VITVIZ_SHOTS']}/{name}.png", full_page=True)


def shown_ids(page, expected: list[int], seconds: float = 30) -> list[int]:
    """The ids of the grid's thumbnails (captions "id: path, ..."), sorted, once they are ``expected`` or the time is
    up (the text above them, and the last selection's thumbnails, may be drawn before them)."""
    deadline = time.monotonic() + seconds
    while True:
        captions = page.locator("[data-testid=stImageCaption]").all_inner_texts()
        ids = sorted(int(c.split(":")[0]) for c in captions if c[:1].isdigit())
        if ids == sorted(expected) or time.monotonic() > deadline:
            return ids
        page.wait_for_timeout(250)


def open_tab(page, url: str, folder, tab: str, drawn: str) -> None:
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(folder / "index"))
    field.press("Enter")
    wait_until_drawn(page, "images match")
    page.get_by_role("tab", name=tab, exact=True).click()
    wait_until_drawn(page, drawn)


def test_a_lasso_on_the_embedding_map_selects_images_into_the_grid_and_similar_selects_the_nearest(server):
    running, folder = server
    index = vitviz.open_index(folder / "index")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 1280, 1000)
        open_tab(page, running.url, folder, "Embedding map", "No images chosen yet")
        page.locator("[data-testid=stPlotlyChart] .js-plotly-plot").first.wait_for()
        page.locator("[data-testid=stPlotlyChart]").first.scroll_into_view_if_needed()
        geometry = page.evaluate(MAP_GEOMETRY)
        left, top, width, height = geometry["left"], geometry["top"], geometry["width"], geometry["height"]
        readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"]
        projection = project_embeddings(index, readable.to_numpy())  # the map's points, as the page computes them
        # the lasso's right edge halfway between the two points nearest the middle, so no point is near the edge
        low, high = geometry["range"]
        pixels = np.sort((projection.points[:, 0] - low) / (high - low) * width)
        middles, gaps = (pixels[:-1] + pixels[1:]) / 2, pixels[1:] - pixels[:-1]
        edge = min(middles[gaps > 4], key=lambda m: abs(m - width / 2))  # no point within 2 px of the edge
        expected = sorted(
            int(i) for i in projection.image_ids[(projection.points[:, 0] - low) / (high - low) * width < edge]
        )
        assert 0 < len(expected) < len(readable), geometry  # the left half holds some of the points, not all
        # a lasso (the map's default tool) around the left part of the plot area
        corners = [(left + 2, top + 2), (left + edge, top + 2), (left + edge, top + height - 2)]
        corners += [(left + 2, top + height - 2), (left + 2, top + 4)]
        page.mouse.move(*corners[0])
        page.mouse.down()
        for corner in corners[1:]:
            page.mouse.move(*corner, steps=10)
        page.mouse.up()
        wait_until_drawn(page, f"{len(expected)} images: chosen on the embedding map")
        assert shown_ids(page, expected[:24]) == expected[:24]
        shot(page, "embedding-1280-lasso")
        # "Similar" under the first thumbnail: its nearest images become the selection
        captions = page.locator("[data-testid=stImageCaption]").all_inner_texts()
        first = int(next(c for c in captions if c[:1].isdigit()).split(":")[0])  # after the legend's caption
        page.get_by_role("button", name="Similar").first.click()
        near = index.nearest_images(first, k=12)
        wait_until_drawn(page, f"image {first} and the {len(near) - 1} images nearest to it")
        assert shown_ids(page, near["image_id"].tolist()) == sorted(near["image_id"])
        for width in (800, 1280, 1920):
            page.set_viewport_size({"width": width, "height": 1000})
            for tab in ("Grid", "Embedding map", "Slices"):
                page.get_by_role("tab", name=tab, exact=True).click()
                page.wait_for_timeout(2500)
                shot(page, f"{tab.replace(' ', '-').lower()}-{width}")
                if tab == "Grid":  # every thumbnail at one width, whatever its caption (a long one stretched its photo)
                    widths = page.evaluate(THUMBNAIL_WIDTHS)
                    assert len(widths) == len(near) and max(widths) - min(widths) <= 1, (width, widths)
        browser.close()
