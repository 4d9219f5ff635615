"""The Ask page's LVLM-Interpret views in a real browser (`streamlit run app.py`, headless Chromium via Playwright)
on a tiny LLaVA folder: a click on a cell of the layer x head overview sets the map's layer and head; a click on a
patch's marker shows which tokens look at it, and its knock-out the answer's change; a box dragged over the photo
chooses several patches. Set VITVIZ_SHOTS to a folder to keep screenshots at 800, 1280 and 1920 px."""

import os

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    new_page,
    no_exception,
    require_browser,
    streamlit_server,
    wait_until_drawn,
)
from PIL import Image
from tiny_models import tiny_checkpoint
from tiny_vlms import tiny_vlm_folder

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

# a plotly chart found by its y axis's title (as the figure gives it: a hidden axis has none in _fullLayout)
FIND = """title => [...document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot')]
    .find(p => p._fullLayout && ((p.layout.yaxis || {}).title || {}).text === title)"""
# its plot area, and the viewport pixels of data points (x, y) and of its markers (trace 1)
CHART = (
    """([title, points]) => {
    const plot = ("""
    + FIND
    + """)(title);
    if (!plot) return null;
    const box = plot.getBoundingClientRect(), xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis;
    const at = ([x, y]) => [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(y)];
    const trace = plot.data[1];
    return {points: points.map(at), markers: trace.x.map((x, i) => at([x, trace.y[i]]))};
}"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_ask_views")
    vlm = tiny_vlm_folder("llava", tmp_path_factory)
    env = {
        "VITVIZ_DEFAULT_CHECKPOINT": str(tiny_checkpoint(folder / "model.pt")),
        "VITVIZ_SAMPLES": "",
        "VITVIZ_TEST_PRECISION": "fp32",
        "VITVIZ_MODEL_DIRS": str(vlm.parent),
    }
    with streamlit_server(folder, env) as running:
        yield running, folder, vlm


def shot(page, name: str) -> None:
    if os.environ.get("VITVIZ_SHOTS"):
        page.screenshot(path=f"{os.environ['VITVIZ_SHOTS']}/{name}.png", full_page=True)


def chart(page, title: str, points=()) -> dict:
    """The chart titled ``title`` once drawn, scrolled to the middle of the window, then its geometry (CHART)."""
    page.wait_for_function("t => (" + CHART + ")([t, []]) !== null", arg=title, timeout=60_000)
    page.evaluate("t => (" + FIND + ")(t).scrollIntoView({block: 'center'})", title)
    page.wait_for_timeout(300)  # the scroll settles
    return page.evaluate(CHART, [title, [list(p) for p in points]])


def asked(page, url: str, vlm, photo) -> None:
    page.goto(f"{url}/ask")
    field = page.get_by_role("textbox", name="Model")
    field.fill(str(vlm))
    field.press("Enter")
    page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
    page.locator("input[type=file]").first.set_input_files(str(photo))
    page.get_by_text("Type a question about the photo").wait_for(timeout=120_000)
    page.get_by_role("textbox", name="Answer to explain (optional)").fill("a red cat")
    page.get_by_role("button", name="Ask", exact=True).click()
    wait_until_drawn(page, "Attention of token 0 '")


def test_click_a_layer_head_cell_then_a_patch_then_knock_it_out_then_a_box(server):
    running, folder, vlm = server
    photo = folder / "photo.png"
    Image.effect_noise((300, 200), 60).convert("RGB").save(photo)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 1280, 1000)
        asked(page, running.url, vlm, photo)
        # the overview: head across, layer up; a click on layer 1, head 2 sets the map
        [cell] = chart(page, "layer", [(2, 1)])["points"]
        page.mouse.click(*cell)
        wait_until_drawn(page, "on the image, layers 1 to 1, head 2")
        # a patch: a click on image token 5's marker
        markers = chart(page, "y (pixels)")["markers"]
        page.mouse.click(*markers[5])
        wait_until_drawn(page, "1 patch chosen.")
        assert page.get_by_text("The question (each token at its own position)").count() == 1
        page.get_by_role("button", name="Knock out the 1 chosen patch (2 passes of the model)").click()
        wait_until_drawn(page, "summed log p of the answer")
        # the box tool, and a box around the four markers at the top left (tokens 0, 1, 4, 5 of the 4 x 4 grid)
        markers = chart(page, "y (pixels)")["markers"]
        page.mouse.move(*markers[5])  # the chart's tools show while the pointer is over it
        page.locator("[data-title='Box Select']").click()  # the one chart on the page that selects by box
        (x0, y0), (x1, y1) = markers[0], markers[5]
        step_x, step_y = (x1 - x0) / 2, (y1 - y0) / 2
        page.mouse.move(x0 - step_x, y0 - step_y)
        page.mouse.down()
        page.mouse.move(x1 + step_x, y1 + step_y, steps=10)
        page.mouse.up()
        wait_until_drawn(page, "4 patches chosen.")
        no_exception(page)
        assert page.get_by_test_id("stAlertContentError").count() == 0
        for width in (800, 1280, 1920):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(1500)
            shot(page, f"ask-views-{width}")
        browser.close()
