"""The Dataset page's defects that live in the browser, tried in headless Chromium at 800 px as a new user would:
the confusion matrix's cells are squares whose pitch is the same across and down, a click on a cell selects its
images, and a box drawn with the chart's box tool selects several cells."""

import os

import pytest
from browser_harness import CHROMIUM, CHROMIUM_ARGS, index_server, new_page, require_browser, wait_until_drawn
from PIL import Image
from tiny_models import tiny_checkpoint

import vitviz

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def ten_class_images(folder, per_class=3):
    """``per_class`` random 32 x 32 photos in each of CIFAR-10's class folders."""
    import numpy as np

    rng = np.random.default_rng(1)
    for name in CLASSES:
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / name / f"{i:02d}.png")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset_defects")
    model = tiny_checkpoint(folder / "model.pt", names=CLASSES)
    with index_server(folder, model, ten_class_images(folder / "images")) as running:
        yield running, folder


# the confusion chart's axes in the page: where each class's cell is drawn, in viewport pixels
CELL_GEOMETRY = """() => {
    const plot = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');
    const box = plot.getBoundingClientRect(), xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis;
    const n = (xa._categories && xa._categories.length) || xa.tickvals.length;  // a category axis or a linear one
    return {left: box.left + xa._offset, top: box.top + ya._offset,
            x: [...Array(n).keys()].map(i => xa.l2p(i)), y: [...Array(n).keys()].map(i => ya.l2p(i))};
}"""


# the "Open in Photo" buttons whose label is cut (an ellipsis) or that stick out of their column
BUTTONS_CUT = """() => [...document.querySelectorAll('[data-testid=stButton] button')]
    .filter(b => b.innerText.includes('Open in Photo'))
    .filter(b => {
        const label = b.querySelector('[data-testid=stMarkdownContainer]');
        const column = b.closest('[data-testid=stColumn]').getBoundingClientRect(), box = b.getBoundingClientRect();
        return label.scrollWidth > label.clientWidth + 1 || box.right > column.right + 1;
    }).map(b => b.getBoundingClientRect().width)"""


def open_errors_tab(page, url: str, folder) -> None:
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(folder / "index"))
    field.press("Enter")
    wait_until_drawn(page, "images match")
    page.get_by_role("tab", name="Errors", exact=True).click()
    wait_until_drawn(page, "Confusion matrix")
    page.locator("[data-testid=stPlotlyChart] .js-plotly-plot").first.wait_for()
    page.locator("[data-testid=stPlotlyChart]").first.scroll_into_view_if_needed()


def picked(page, label: str) -> str:
    """The value of the selectbox labelled ``label``."""
    return page.get_by_role("combobox", name=label).first.input_value(timeout=10_000)


def shot(page, name: str) -> None:
    """A screenshot under $VITVIZ_SHOTS, when it is set, to look at the page as a user would."""
    if os.environ.get("VITVIZ_SHOTS"):
        page.screenshot(path=f"{os.environ['VITVIZ_SHOTS']}/{name}.png", full_page=True)


def test_a_click_on_a_confusion_cell_selects_its_images_and_a_box_selects_several(server):
    running, folder = server
    index = vitviz.open_index(folder / "index")
    cells = index.query(
        "SELECT label, prediction, count(*) AS n FROM images WHERE label <> prediction GROUP BY ALL "
        "ORDER BY n DESC, label, prediction"
    )
    true, predicted, count = cells["label"][0], cells["prediction"][0], int(cells["n"][0])
    row, column = CLASSES.index(true), CLASSES.index(predicted)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 800, 900)
        open_errors_tab(page, running.url, folder)
        geometry = page.evaluate(CELL_GEOMETRY)
        across = geometry["x"][1] - geometry["x"][0]
        down = geometry["y"][1] - geometry["y"][0]
        assert across == pytest.approx(down, abs=0.5), geometry  # square cells: one pitch across and down
        assert across >= 24, geometry  # a count of three digits fits in a cell at 800 px
        # a click on the cell (true, predicted), off the diagonal
        page.mouse.click(geometry["left"] + geometry["x"][column], geometry["top"] + geometry["y"][row])
        wait_until_drawn(page, f"{true} predicted as {predicted}: the most confident {min(count, 24)} shown")
        assert (picked(page, "True label"), picked(page, "Predicted")) == (true, predicted)
        page.get_by_role("button", name="Open in Photo").first.scroll_into_view_if_needed()
        cut = page.evaluate(BUTTONS_CUT)
        assert cut == [], cut  # each "Open in Photo" reads whole at 800 px (it wraps), inside its column
        shot(page, "errors-800-clicked")
        # the box tool, then a box around the top-left 2 x 2 cells (the chart scrolled back into view)
        page.locator("[data-testid=stPlotlyChart]").first.scroll_into_view_if_needed()
        geometry = page.evaluate(CELL_GEOMETRY)
        page.locator("[data-testid=stPlotlyChart]").first.hover()
        page.locator('.modebar-btn[data-val="select"]').first.click()
        x, y = geometry["x"], geometry["y"]
        page.mouse.move(geometry["left"] + x[0] - across * 0.4, geometry["top"] + y[0] - down * 0.4)
        page.mouse.down()
        page.mouse.move(geometry["left"] + x[1], geometry["top"] + y[1], steps=8)
        page.mouse.move(geometry["left"] + x[1] + across * 0.4, geometry["top"] + y[1] + down * 0.4, steps=4)
        page.mouse.up()
        first_four = index.query(
            f"SELECT count(*) AS n FROM images WHERE label IN ('{CLASSES[0]}', '{CLASSES[1]}') "
            f"AND prediction IN ('{CLASSES[0]}', '{CLASSES[1]}')"
        )["n"][0]
        wait_until_drawn(page, f"4 cells ({CLASSES[0]} predicted as {CLASSES[0]}")
        assert f"the most confident {min(int(first_four), 24)} shown" in page.locator("body").inner_text()
        shot(page, "errors-800-box")
        browser.close()
