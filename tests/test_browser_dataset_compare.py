"""The researcher's views against FiftyOne and LIT in headless Chromium, each driven by a real drag or click: a box
on the Embedding map draws its images solid and lists them, and a tick in that list rings the image on the map; a
click on a slice's bar shows its images; the Compare tab on a second index of the same images, a click on a row of
disagreements choosing the image whose two maps are drawn. With VITVIZ_SHOTS set, each view is saved at 800, 1280
and 1920 px."""

import numpy as np
import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    index_server,
    new_page,
    no_exception,
    require_browser,
    wait_until_drawn,
    wait_until_idle,
)
from test_browser_dataset_defects import shot
from test_dataset_compare_slices import graded_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.dataset.analysis import project_embeddings
from vitviz.dataset.compare import disagreements, match_indexes

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

WIDTHS = (800, 1280, 1920)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset_compare")
    images = graded_images(folder / "images")
    other = tiny_checkpoint(folder / "other.pt", num_layers=3)
    assert index_main([str(images), "--model", str(other), "--out", str(folder / "other")]) == 0
    with index_server(folder, tiny_checkpoint(folder / "model.pt"), images) as running:
        yield running, folder


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


PLOT = "[data-testid=stPlotlyChart] .js-plotly-plot"
MAP_GEOMETRY = """() => {
    const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
    const box = plot.getBoundingClientRect(), xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis;
    return {left: box.left + xa._offset, top: box.top + ya._offset, width: xa._length, height: ya._length,
            range: xa.range};
}"""
# the image ids the drawn map shows solid (its traces' selectedpoints), and those it rings
SOLID = """() => {
    const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
    return plot.data.filter(t => t.name !== 'ticked' && t.selectedpoints)
        .flatMap(t => [...t.selectedpoints].map(i => Number(t.customdata[i]))).sort((a, b) => a - b);
}"""
RINGED = """() => {
    const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
    const ring = plot && plot.data.find(t => t.name === 'ticked');
    return ring ? [...ring.customdata].map(Number) : [];
}"""


def open_tab(page, url: str, folder, tab: str, drawn: str) -> None:
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(folder / "index"))
    field.press("Enter")
    wait_until_drawn(page, "images match")
    page.get_by_role("tab", name=tab, exact=True).click()
    wait_until_drawn(page, drawn)


def at_widths(page, name: str, below: str | None = None) -> None:
    """The view at each of WIDTHS (saved under $VITVIZ_SHOTS), and scrolled down to the text ``below`` if given."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(1500)
        wait_until_idle(page)
        shot(page, f"{name}-{width}")
        if below:
            page.get_by_text(below).first.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            shot(page, f"{name}-{width}-below")
    no_exception(page)


def test_a_box_on_the_map_is_drawn_solid_and_listed_and_a_tick_there_rings_it(server, browser):
    running, folder = server
    index = vitviz.open_index(folder / "index")
    page = new_page(browser, 1280, 1000)
    open_tab(page, running.url, folder, "Embedding map", "No images chosen yet")
    page.locator(PLOT).first.wait_for()
    page.locator("[data-testid=stPlotlyChart]").first.scroll_into_view_if_needed()
    geometry = page.evaluate(MAP_GEOMETRY)
    left, top, width, height = geometry["left"], geometry["top"], geometry["width"], geometry["height"]
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"]
    projection = project_embeddings(index, readable.to_numpy())  # the map's points, as the page computes them
    low, high = geometry["range"]
    pixels = np.sort((projection.points[:, 0] - low) / (high - low) * width)
    middles, gaps = (pixels[:-1] + pixels[1:]) / 2, pixels[1:] - pixels[:-1]
    edge = min(middles[gaps > 4], key=lambda m: abs(m - width / 2))  # no point within 2 px of the edge
    expected = sorted(
        int(i) for i in projection.image_ids[(projection.points[:, 0] - low) / (high - low) * width < edge]
    )
    # the Box select tool, then a drag over the left part of the plot area
    page.locator(PLOT).first.hover()
    page.locator('.modebar-btn[data-val="select"]').first.click()
    page.mouse.move(left + 2, top + 2)
    page.mouse.down()
    page.mouse.move(left + edge, top + height / 2, steps=8)
    page.mouse.move(left + edge, top + height - 2, steps=8)
    page.mouse.up()
    wait_until_drawn(page, f"{len(expected)} images: chosen on the embedding map")
    page.wait_for_function(f"({SOLID})().length === {len(expected)}", timeout=60_000)
    assert page.evaluate(SOLID) == expected  # the box's images solid on the map, the rest faded
    assert page.evaluate(RINGED) == []
    # tick the first row of the selection's table (a canvas): that image is ringed on the map
    table = page.locator("[data-testid=stDataFrame]").first
    table.scroll_into_view_if_needed()
    box = table.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)
    page.wait_for_function(f"JSON.stringify(({RINGED})()) === '[{expected[0]}]'", timeout=60_000)
    assert page.evaluate(SOLID) == expected  # the selection still solid
    page.locator("[data-testid=stPlotlyChart]").first.scroll_into_view_if_needed()
    at_widths(page, "embedding-selection", "The selection:")
    page.close()


def test_a_click_on_a_slice_bar_shows_its_images(server, browser):
    running, folder = server
    index = vitviz.open_index(folder / "index")
    page = new_page(browser, 1280, 1000)
    open_tab(page, running.url, folder, "Slices", "Wilson's score interval")
    # the bar of the label with the higher accuracy (a bar of accuracy 0 has no height to click)
    accuracy = index.query("SELECT label, avg(correct::INT) AS a, count(*) AS n FROM images GROUP BY label")
    best = accuracy.sort_values(["a", "label"], ascending=[False, True]).iloc[0]
    label, count = str(best["label"]), int(best["n"])
    assert best["a"] > 0
    bar = page.locator(f"{PLOT} .bars .point path").nth(sorted(accuracy["label"]).index(label))
    bar.scroll_into_view_if_needed()
    area = bar.bounding_box()  # a real click at its middle (plotly's drag layer above the bars takes it)
    page.mouse.click(area["x"] + area["width"] / 2, area["y"] + area["height"] / 2)
    wait_until_drawn(page, f"{count} images: the slice label = {label}")
    page.get_by_role("button", name="Open them in the Grid tab").wait_for()
    at_widths(page, "slices-click", "Open them in the Grid tab")
    page.get_by_role("button", name="Open them in the Grid tab").click()
    wait_until_drawn(page, "Export")
    assert page.get_by_text(f"{count} images: the slice label = {label}").count() >= 1
    no_exception(page)
    page.close()


def test_the_compare_tab_lists_disagreements_and_a_row_click_draws_both_maps(server, browser):
    running, folder = server
    matched = match_indexes(vitviz.open_index(folder / "index"), vitviz.open_index(folder / "other"))
    differing = disagreements(matched)
    assert len(differing) >= 2
    page = new_page(browser, 1280, 1000)
    open_tab(page, running.url, folder, "Compare", "Type the folder of a second index")
    field = page.get_by_role("textbox", name="Second index folder")
    field.fill(str(folder / "other"))
    field.press("Enter")
    wait_until_drawn(page, "images in both")
    first = int(differing["image_id_a"].iloc[0])
    wait_until_drawn(page, f"image {first} of index:")
    # a click on the second row of the disagreements (a canvas): its image is chosen and both maps drawn
    table = page.locator("[data-testid=stDataFrame]").first
    table.scroll_into_view_if_needed()
    box = table.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 35 + 17)
    second, other_id = int(differing["image_id_a"].iloc[1]), int(differing["image_id_b"].iloc[1])
    wait_until_drawn(page, f"image {second} of index:")
    wait_until_drawn(page, f"image {other_id} of other:")
    assert page.get_by_text("one scale for both indexes").count() == 1
    at_widths(page, "compare", "one scale for both indexes")
    page.close()
