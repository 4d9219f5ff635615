"""The Dataset page's defects of issue 44 that live in the browser, in headless Chromium with real clicks and drags:
the Grid's thumbnails neither overlap nor are cut at 800, 1280 or 1920 px; the Heads charts' legends are clear of
Plotly's tool bar; a box over several confusion cells leaves the pickers saying how many; ticked table rows outlive a
visit to the Photo page and the address reproduces the filtered view (a bad link gives one warning); patch-search
crops are readable at 800 px and no caption line begins with a comma. With VITVIZ_SHOTS set, each view is saved."""

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    eventually,
    index_server,
    new_page,
    no_exception,
    require_browser,
    wait_until_drawn,
    wait_until_idle,
)
from test_browser_dataset_defects import CELL_GEOMETRY, CLASSES, shot, ten_class_images
from tiny_models import tiny_checkpoint

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

WIDTHS = (800, 1280, 1920)
MATCHING = "30 images match"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset_workbench")
    model = tiny_checkpoint(folder / "model.pt", names=CLASSES)
    with index_server(folder, model, ten_class_images(folder / "images")) as running:
        yield running, folder


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


# the thumbnails of the main area (not the colour bar, 14 px tall) and their captions, as boxes; the main area's box
LAYOUT = """() => {
    const main = document.querySelector('[data-testid=stMainBlockContainer]').getBoundingClientRect();
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const images = [...document.querySelectorAll('[data-testid=stMain] [data-testid=stImage] img')]
        .filter(i => i.naturalHeight > 30);
    const captions = [...document.querySelectorAll('[data-testid=stMain] [data-testid=stImageCaption]')];
    return {main: box({getBoundingClientRect: () => main}), images: images.map(box), captions: captions.map(box)};
}"""

# the first character of every line of the captions that hold ``text``, as laid out in the page
LINE_STARTS = """(text) => {
    const starts = [];
    for (const caption of document.querySelectorAll('[data-testid=stCaptionContainer]')) {
        if (!caption.innerText.includes(text)) continue;
        const walker = document.createTreeWalker(caption, NodeFilter.SHOW_TEXT);
        let top = null;
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (let i = 0; i < node.length; i++) {
                const ch = node.data[i];
                if (/\\s|\\u200b/.test(ch)) continue;
                const range = document.createRange();
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                const rect = range.getClientRects()[0];
                if (rect && (top === null || rect.top > top + 2)) { starts.push(ch); top = rect.top; }
            }
        }
    }
    return starts;
}"""

# each patch-search match's crop (the first picture beside its caption), its width in pixels
CROP_WIDTHS = """() => [...document.querySelectorAll('[data-testid=stCaptionContainer]')]
    .filter(c => c.innerText.includes('similarity'))
    .map(c => c.closest('[data-testid=stVerticalBlock]').querySelector('[data-testid=stImage] img')
        .getBoundingClientRect().width)"""


# both cell pickers show ``text`` (as their placeholder, their value blank)
PICKERS_SAY = """(text) => {
    const pickers = [...document.querySelectorAll('[data-testid=stSelectbox]')]
        .filter(e => /True label|Predicted/.test(e.innerText));
    return pickers.length === 2 && pickers.every(e => e.innerText.includes(text)
        || [...e.querySelectorAll('input')].some(i => (i.placeholder || '').includes(text)));
}"""


def overlapping(boxes: list[list[float]]) -> list[tuple[int, int]]:
    """The pairs of boxes that overlap by more than a pixel each way."""
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], i + 1)
        if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1
    ]


def resized(page, width: int) -> None:
    """The page at ``width`` px, once the browser has laid it out again."""
    page.set_viewport_size({"width": width, "height": 900})
    eventually(lambda: page.evaluate("window.innerWidth") == width, what=f"a {width} px window")
    wait_until_idle(page)
    page.wait_for_function("[...document.images].every(image => image.complete)")


def open_index(browser, url: str, index, width: int, height: int = 900):
    """A new page of the Dataset page with ``index`` typed into the sidebar and its table drawn."""
    page = new_page(browser, width, height)
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(index))
    field.press("Enter")
    wait_until_drawn(page, MATCHING)
    return page


def open_tab(page, name: str, text: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    wait_until_drawn(page, text)


# 12. the grid


def test_the_grid_neither_overlaps_nor_is_cut_at_any_width(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 800, 900)
    open_tab(page, "Grid", "Show the table's filtered images")
    page.get_by_role("button", name="Show the table's filtered images (30)").click()
    wait_until_drawn(page, "30 images: the Table tab's filters")
    page.get_by_role("button", name="Similar").nth(7).wait_for()
    for width in WIDTHS:
        resized(page, width)
        page.get_by_role("button", name="Similar").last.scroll_into_view_if_needed()  # a lazy image loads in sight
        page.wait_for_function(f"({LAYOUT})().images.length === 24", timeout=60_000)
        layout = page.evaluate(LAYOUT)
        assert len(layout["images"]) == 24, layout
        assert overlapping(layout["images"]) == [], (width, layout)
        assert overlapping(layout["captions"]) == [], (width, layout)
        right = layout["main"][2]
        assert all(box[2] <= right + 1 for box in layout["images"] + layout["captions"]), (width, layout)
        page.get_by_role("button", name="Similar").first.scroll_into_view_if_needed()
        shot(page, f"workbench-grid-{width}")
    no_exception(page)
    page.close()


# 17. the Heads legends


def test_the_heads_legends_are_clear_of_the_plotly_tool_bar(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 800, 900)
    open_tab(page, "Heads", "Heads clustered by their dataset-averaged statistics")
    for width in WIDTHS:
        resized(page, width)
        for chart in range(2):  # the distance chart and the settling one, each with a legend of the heads
            plot = page.locator("[data-testid=stPlotlyChart]").nth(chart)
            plot.scroll_into_view_if_needed()
            plot.hover()  # Plotly shows its tool bar while the pointer is over the chart
            bar = plot.locator(".modebar").first
            bar.wait_for(state="visible")
            legend, tools = plot.locator(".legend").first.bounding_box(), bar.bounding_box()
            a = [legend["x"], legend["y"], legend["x"] + legend["width"], legend["y"] + legend["height"]]
            b = [tools["x"], tools["y"], tools["x"] + tools["width"], tools["y"] + tools["height"]]
            assert overlapping([a, b]) == [], (width, chart, legend, tools)
        shot(page, f"workbench-heads-{width}")
    no_exception(page)
    page.close()


# 19. a box over several confusion cells


def test_a_box_over_confusion_cells_leaves_the_pickers_saying_how_many(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 800, 900)
    open_tab(page, "Errors", "Confusion matrix")
    chart = page.locator("[data-testid=stPlotlyChart]").first
    chart.scroll_into_view_if_needed()
    geometry = page.evaluate(CELL_GEOMETRY)
    chart.hover()
    page.locator('.modebar-btn[data-val="select"]').first.click()
    x, y = geometry["x"], geometry["y"]
    across, down = x[1] - x[0], y[1] - y[0]
    page.mouse.move(geometry["left"] + x[0] - across * 0.4, geometry["top"] + y[0] - down * 0.4)
    page.mouse.down()
    page.mouse.move(geometry["left"] + x[1], geometry["top"] + y[1], steps=8)
    page.mouse.move(geometry["left"] + x[1] + across * 0.4, geometry["top"] + y[1] + down * 0.4, steps=4)
    page.mouse.up()
    wait_until_drawn(page, f"4 cells ({CLASSES[0]} predicted as {CLASSES[0]}")
    page.wait_for_function(PICKERS_SAY, arg="4 cells selected", timeout=60_000)
    for label in ("True label", "Predicted"):
        assert page.get_by_role("combobox", name=label).first.input_value() == ""  # not the first cell's class
    page.get_by_role("combobox", name="True label").first.scroll_into_view_if_needed()
    shot(page, "workbench-errors-box-800")
    no_exception(page)
    page.close()


# 20. ticked rows and the address


def test_ticked_rows_outlive_the_photo_page_and_the_address_reproduces_the_view(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 1280, 900)
    grid = page.locator("[data-testid=stDataFrame]").first
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's box (the grid is a canvas)
    wait_until_drawn(page, "Open in Photo")
    page.get_by_role("button", name="Open in Photo").first.click()
    wait_until_drawn(page, "what does the Vision Transformer look at?")
    page.get_by_role("link", name="Dataset").click()
    wait_until_drawn(page, MATCHING)
    page.get_by_role("button", name="Open in Photo").first.wait_for()  # the ticked row's photo is back
    no_exception(page)
    # a filter by a click, then the address opened in a new tab: the same filtered view
    page.get_by_text("wrong", exact=True).click()
    page.wait_for_function("location.search.includes('correctness=wrong')")
    wait_until_idle(page)
    shown = page.get_by_text("images match").first.inner_text().split(";")[0]
    address = page.url
    again = new_page(browser, 1280, 900)
    again.goto(address)
    wait_until_drawn(again, shown)
    assert again.get_by_role("radio", name="wrong").is_checked()
    no_exception(again)
    shot(again, "workbench-link-1280")
    # a link with bad values: one warning that names them, the rest applied, no traceback
    again.goto(address + "&correctness=maybe&tab=Nope")
    wait_until_drawn(again, "do not fit this index")
    assert again.locator("[data-testid=stAlertContentWarning]").count() == 1
    assert "correctness=maybe" in again.locator("[data-testid=stAlertContentWarning]").inner_text()
    no_exception(again)
    again.close()
    page.close()


# 23. patch search


def test_patch_search_crops_are_readable_and_no_caption_line_begins_with_a_comma(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 800, 900)
    open_tab(page, "Patch search", "most similar patches")
    page.get_by_text("similarity").nth(7).wait_for()
    for width in WIDTHS:
        resized(page, width)
        crops = page.evaluate(CROP_WIDTHS)
        assert len(crops) == 8 and min(crops) >= 64, (width, crops)  # a crop a reader can see
        starts = page.evaluate(LINE_STARTS, "similarity")
        assert starts and "," not in starts, (width, starts)
        page.get_by_text("similarity").first.scroll_into_view_if_needed()
        shot(page, f"workbench-search-{width}")
    no_exception(page)
    page.close()


# 16. the per-class mean maps' captions

# the words of every "label (count)" picture caption that a line break cuts in two (a word over two lines has two
# client rectangles), and how many such captions were read
BROKEN_WORDS = """() => {
    const broken = [];
    const captions = [...document.querySelectorAll('[data-testid=stMain] [data-testid=stImageCaption]')]
        .filter(c => /\\(\\d+\\)$/.test(c.innerText.trim()));
    for (const caption of captions) {
        const walker = document.createTreeWalker(caption, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const match of node.data.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(node, match.index);
                range.setEnd(node, match.index + match[0].length);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (tops.size > 1) broken.push(match[0]);
            }
        }
    }
    return {broken, captions: captions.length};
}"""


def test_per_class_mean_captions_never_break_inside_a_word(server, browser):
    running, folder = server
    for width in WIDTHS:
        page = open_index(browser, running.url, folder / "index", width, 900)
        open_tab(page, "Errors", "Per-class mean maps")
        wait_until_drawn(page, "automobile (")
        page.get_by_text("automobile (").first.scroll_into_view_if_needed()
        wait_until_idle(page)
        read = page.evaluate(BROKEN_WORDS)
        assert read["captions"] >= 2 and read["broken"] == [], (width, read)
        shot(page, f"workbench-class-means-{width}")
        no_exception(page)
        page.close()
