"""The page as a person sees it: every tab at 800, 1280 and 1920 px in headless Chromium, on the shipped
default model and a bundled example photo.

Each tab is screenshotted whole (tests/screenshots/layout_<width>_<tab>.png, or VITVIZ_SCREENSHOTS), and the
test fails on any console error or uncaught page error, on a tab name pushed out of sight, on content wider
than the page, on a label, button or chart title cut short, on the logit lens's two pictures drawn at two sizes,
and on an error shown in the page. It also changes a control that redraws an overlay while the
old one is on screen (the head fusion), which once left the browser asking for a /media file already gone.
"""

import contextlib
import os
from pathlib import Path

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HIDDEN_TABS,
    ROOT,
    choose,
    new_page,
    require_browser,
    streamlit_server,
    wait_until_drawn,
)

require_browser()
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

SCREENSHOTS = Path(os.environ.get("VITVIZ_SCREENSHOTS", ROOT / "tests" / "screenshots"))
WIDTHS = [800, 1280, 1920]
# each tab, and a text it shows once drawn
TABS = {
    "Overview": "Attention rollout",
    "Heads & layers": "Every head in layer",
    "Click a patch": "Each head: what patch",
    "Features": "Parts (k-means)",
    "Class-specific": "Logit lens",
    "Model anatomy": "Position-embedding similarity",
    "Tokens": "Attention to the prefix tokens",
    "Faithfulness": "Replace patches by",
    "SAE features": "SAE from the Hub or a folder",
}

# the height of everything in the page's scrolling main area, to screenshot it whole (Streamlit scrolls an
# inner element, not the document, so Playwright's full_page alone stops at the window's height)
CONTENT_HEIGHT = (
    "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], section')].map(e => e.scrollHeight))"
)
# the pictures Streamlit serves (overlays, legends): a new overlay has a new address
MEDIA_IMAGES = "() => [...document.images].map(image => image.src).filter(src => src.includes('/media/'))"
# elements of the main area wider than it (content that would need a horizontal scroll)
TOO_WIDE = """() => { const main = document.querySelector('[data-testid=stMain]');
    return main.scrollWidth > main.clientWidth + 1 ? [main.scrollWidth, main.clientWidth] : null; }"""

# text the page cuts: labels and buttons ending in an ellipsis ("Remove backgr…"), chart titles wider than their
# chart ("Logit drop when removed (a"), in the main area and the sidebar
CUT_TEXT = """() => {
    const cut = [];
    for (const e of document.querySelectorAll('[data-testid=stMain] *, [data-testid=stSidebar] *')) {
        const style = getComputedStyle(e);
        if (style.textOverflow === 'ellipsis' && e.scrollWidth > e.clientWidth + 1 && e.innerText.trim()) {
            cut.push(e.innerText.trim());
        }
    }
    for (const title of document.querySelectorAll('.js-plotly-plot .gtitle, .js-plotly-plot .g-xtitle, '
                                                  + '.js-plotly-plot .g-ytitle')) {
        const chart = title.closest('.js-plotly-plot').getBoundingClientRect(), box = title.getBoundingClientRect();
        if (box.width && (box.left < chart.left - 1 || box.right > chart.right + 1)) cut.push(title.textContent);
    }
    return cut; }"""
# the logit lens's two pictures of the photo, side by side: (width, height) of each
LENS_PICTURES = """() => [...document.querySelectorAll('[data-testid=stImage]')].filter(e => /^block \\d+: /.test(
    e.innerText)).map(e => { const r = e.querySelector('img').getBoundingClientRect(); return [r.width, r.height]; })"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layout")
    examples = ROOT / "vitviz_dashboard" / "examples"
    with streamlit_server(folder, {"VITVIZ_SAMPLES": str(examples)}) as running:
        yield running


def screenshot(page, name: str, width: int) -> None:
    height = int(page.evaluate(CONTENT_HEIGHT))
    page.set_viewport_size({"width": width, "height": max(900, min(height + 40, 9000))})
    page.wait_for_timeout(500)  # Streamlit re-lays out the page for its new height
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    page.set_viewport_size({"width": width, "height": 900})


@pytest.mark.parametrize("width", WIDTHS)
def test_every_tab_at_every_width_without_console_errors(server, width):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser, width, 900)
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
        page.goto(server.url, wait_until="domcontentloaded")
        # a fresh clone's first screen: a bundled example photo, its prediction, the Overview
        wait_until_drawn(page, "Attention rollout")
        assert page.get_by_text("Prediction:").count() >= 1
        # the tab list wraps once the page's style applies: wait for it (a fresh server's first page drew its tabs
        # before the style once), then check
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(f"() => ({HIDDEN_TABS})().length === 0", timeout=30_000)
        assert page.evaluate(HIDDEN_TABS) == [], "a tab name is out of sight"
        # a control that redraws the overlay in place
        overlays = page.evaluate(MEDIA_IMAGES)
        choose(page, "Head fusion", "max")
        page.wait_for_function(f"() => ({MEDIA_IMAGES})().join() != {overlays!r}.join()", timeout=120_000)
        wait_until_drawn(page, "Attention rollout")
        for tab, text in TABS.items():
            page.get_by_role("tab", name=tab, exact=True).click()
            wait_until_drawn(page, text)
            if tab == "Faithfulness":  # run the test: its curves, table and warnings are what the tab shows
                page.get_by_text("Run the perturbation test (").click()
                wait_until_drawn(page, "area, most-relevant first")
            assert page.get_by_text("Prediction:").count() >= 1, tab  # the prediction, whichever tab is open
            assert page.locator("[data-testid=stException]").count() == 0, tab
            assert page.evaluate(TOO_WIDE) is None, f"{tab}: content wider than the page"
            assert page.evaluate(CUT_TEXT) == [], f"{tab}: cut text"
            if tab == "Class-specific":  # the lens's probability and votes: one size, whatever the width
                # the two pictures come after the "Logit lens" heading: on a busy machine, a moment later
                page.wait_for_function(f"() => ({LENS_PICTURES})().length === 2", timeout=120_000)
                (a, b) = page.evaluate(LENS_PICTURES)
                assert abs(a[0] - b[0]) <= 2 and abs(a[1] - b[1]) <= 2, (a, b)
            screenshot(page, f"layout_{width}_{tab.split()[0].lower().replace('-', '_')}.png", width)
        assert errors == [], errors
        browser.close()
