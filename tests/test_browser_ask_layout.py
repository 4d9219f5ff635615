"""The Ask page's layout as a person sees it, at 800, 1280 and 1920 px in headless Chromium, on a tiny LLaVA folder:
the legends of the image-share and knock-out charts clear of their x-axis titles and plots (the window widened from
800 px, as a person resizes it), the share chart's heading at most two lines, and the chosen token's map no narrower
than the logit lens's picture below it (issue 44, item 7). The page is screenshotted whole at each width
(tests/screenshots/ask_layout_<width>.png, or VITVIZ_SCREENSHOTS)."""

import os
from pathlib import Path

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    eventually,
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

SCREENSHOTS = Path(os.environ.get("VITVIZ_SCREENSHOTS", ROOT / "tests" / "screenshots"))
WIDTHS = [800, 1280, 1920]

# every chart's legend, x-axis title and plot area: their boxes on the page {left, top, right, bottom}, named by
# the chart's y-axis title
CHART_BOXES = """() => {
    const box = e => { const r = e.getBoundingClientRect();
        return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
    return [...document.querySelectorAll('.js-plotly-plot')].filter(c => c.querySelector('.legend')).map(c => ({
        chart: c.querySelector('.g-ytitle')?.textContent,
        legend: box(c.querySelector('.legend')),
        title: box(c.querySelector('.g-xtitle')),
        plot: box(c.querySelector('.draglayer .nsewdrag')),
    }));
}"""
# the share chart's heading (the one in the chart's column): how many lines its text takes
TITLE_LINES = """() => {
    const chart = [...document.querySelectorAll('.js-plotly-plot')].find(
        c => c.querySelector('.g-ytitle')?.textContent === 'share of the attention');
    const h = chart.closest('[data-testid=stColumn]').querySelector('h1, h2, h3, h4');
    const range = document.createRange();
    range.selectNodeContents(h.querySelector('[data-heading-text]') || h);  // not the link icon beside it
    return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.bottom))).size;
}"""
# the width on screen of the picture whose caption holds ``text``
PICTURE_WIDTH = """(text) => {
    const shown = [...document.querySelectorAll('[data-testid=stImage]')].find(e => e.innerText.includes(text));
    return shown ? shown.querySelector('img').getBoundingClientRect().width : null;
}"""
CONTENT_HEIGHT = (
    "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], section')].map(e => e.scrollHeight))"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_ask_layout")
    vlm = tiny_vlm_folder("llava", tmp_path_factory)
    env = {
        "VITVIZ_DEFAULT_CHECKPOINT": str(tiny_checkpoint(folder / "model.pt")),
        "VITVIZ_SAMPLES": "",
        "VITVIZ_TEST_PRECISION": "fp32",
        "VITVIZ_MODEL_DIRS": str(vlm.parent),
    }
    with streamlit_server(folder, env) as running:
        yield running, folder, vlm


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def screenshot(page, width: int) -> None:
    """The whole page at ``width``, then the window back to 1000 px high."""
    height = int(page.evaluate(CONTENT_HEIGHT))
    page.set_viewport_size({"width": width, "height": max(1000, min(height + 40, 9000))})
    page.wait_for_timeout(1500)  # Streamlit re-lays out the page for its new height, plotly its margins
    page.screenshot(path=str(SCREENSHOTS / f"ask_layout_{width}.png"), full_page=True)
    page.set_viewport_size({"width": width, "height": 1000})


def test_the_share_chart_and_the_maps_fit_at_every_width(server):
    running, folder, vlm = server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    photo = folder / "photo.png"
    Image.new("RGB", (300, 200), (40, 120, 200)).save(photo)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, 1920, 1000)
        page.goto(f"{running.url}/ask")
        field = page.get_by_role("textbox", name="Model")
        field.fill(str(vlm))
        field.press("Enter")
        page.get_by_text("Upload one or more photos").wait_for(timeout=120_000)
        page.locator("input[type=file]").first.set_input_files(str(photo))
        page.get_by_text("Type a question about the photo").wait_for(timeout=120_000)
        page.get_by_role("button", name="Ask", exact=True).click()
        wait_until_drawn(page, "Attention of token 0")
        wait_until_drawn(page, "Hidden state after layer")
        no_exception(page)
        # the knock-out curves too: their chart has the same legend (a tiny model's 20 passes, a moment)
        page.get_by_role("button", name="Knock out image tokens").click()
        wait_until_drawn(page, "most relevant first")
        failures = []
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 1000})
            # the charts and the columns follow the window in the browser's own time
            eventually(lambda: len(page.evaluate(CHART_BOXES)) >= 2, what="the charts drawn")
            page.wait_for_timeout(1000)
            for chart in page.evaluate(CHART_BOXES):
                for part in ("title", "plot"):  # the plot: a legend left where a narrower window had put it
                    if overlap(chart["legend"], chart[part]):
                        failures.append(f"{width} px: the legend of '{chart['chart']}' overlaps its {part}")
            lines = page.evaluate(TITLE_LINES)
            if lines > 2:
                failures.append(f"{width} px: the share chart's heading takes {lines} lines")
            main, lens = (page.evaluate(PICTURE_WIDTH, text) for text in ("Attention of token 0", " at layer "))
            if main + 1 < lens:
                failures.append(f"{width} px: the map is {main:.0f} px wide, the lens picture below it {lens:.0f} px")
            screenshot(page, width)
        no_exception(page)
        browser.close()
    assert not failures, failures
