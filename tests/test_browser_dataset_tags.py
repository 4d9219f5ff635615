"""Tags, saved views, similarity scores and patch-search results sent on, in headless Chromium with real clicks: tag a
ticked row and filter the Table by the tag; save a filtered view, change the filter, open the view; the Grid's
"Similar" captions with their similarity and the Table sorted by it; patch-search results shown in the Grid and one
opened in Photo. Each view is looked at 800, 1280 and 1920 px wide (saved under $VITVIZ_SHOTS when set)."""

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    choose,
    eventually,
    index_server,
    no_exception,
    open_index,
    require_browser,
    wait_until_drawn,
    wait_until_idle,
)
from test_browser_dataset_defects import shot

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

WIDTHS = (800, 1280, 1920)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_dataset_tags")
    with index_server(folder) as running:  # 24 generated images and a broken one, indexed by a tiny model
        yield running, folder


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def at_widths(page, name: str, sight: str | None = None) -> None:
    """The page at each width, laid out again, scrolled to the text ``sight``; a screenshot each."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        eventually(lambda width=width: page.evaluate("window.innerWidth") == width, what=f"a {width} px window")
        wait_until_idle(page)
        if sight is not None:
            page.get_by_text(sight).first.scroll_into_view_if_needed()
        shot(page, f"{name}-{width}")
    no_exception(page)


def click_and_wait(page, role: str, name: str, text: str) -> None:
    page.get_by_role(role, name=name).first.click()
    wait_until_drawn(page, text)
    wait_until_idle(page)


def test_tagging_ticked_rows_and_filtering_by_the_tag(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 1280, 900)
    box = page.locator("[data-testid=stDataFrame]").first.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's box (the grid is a canvas)
    page.get_by_role("button", name="Tag 1 ticked").wait_for()
    field = page.get_by_role("textbox", name="Tag the ticked rows")
    field.fill("not a tag!")
    field.press("Enter")
    wait_until_idle(page)
    click_and_wait(page, "button", "Tag 1 ticked", "No tag added: a tag is 1 to 64")
    field.fill("keep")
    field.press("Enter")
    wait_until_idle(page)
    click_and_wait(page, "button", "Tag 1 ticked", "Tagged 1 of the 1 ticked images")
    choose(page, "Tag", "keep")
    wait_until_drawn(page, "1 image matches")
    page.wait_for_function("location.search.includes('tag=keep')")
    page.keyboard.press("Escape")  # the tag picker's list closed
    at_widths(page, "tags-table", "Tag the ticked rows")
    page.close()


def test_a_saved_view_comes_back_after_the_filter_changes(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 1280, 900)
    page.get_by_text("wrong", exact=True).click()
    page.wait_for_function("location.search.includes('correctness=wrong')")
    wait_until_idle(page)
    wrong = page.get_by_text("images match").first.inner_text().split(";")[0]
    name = page.get_by_role("textbox", name="View name")
    name.fill("wrong ones")
    name.press("Enter")
    wait_until_idle(page)
    click_and_wait(page, "button", "Save this view", "Saved the view")
    page.get_by_text("all", exact=True).first.click()
    page.wait_for_function("!location.search.includes('correctness=wrong')")
    wait_until_idle(page)
    page.locator("[data-testid=stSidebar] [data-testid=stBaseButton-secondary]", has_text="Open").click()
    wait_until_drawn(page, "Opened the view")
    wait_until_drawn(page, wrong)
    assert page.get_by_role("radio", name="wrong").is_checked()
    page.wait_for_function("location.search.includes('correctness=wrong')")
    at_widths(page, "saved-views", "Opened the view")
    page.close()


def test_similar_images_show_their_similarity_and_the_table_sorts_by_it(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 1280, 900)
    page.get_by_role("tab", name="Grid", exact=True).click()
    click_and_wait(page, "button", "Show the table's filtered images (25)", "25 images: the Table tab's filters")
    click_and_wait(page, "button", "Similar", "image 0 and the ")
    captions = page.locator("[data-testid=stImageCaption]", has_text="similarity")  # not the legend's
    eventually(lambda: captions.count() == 12, what="12 captions")
    texts = captions.all_inner_texts()
    assert texts[0].startswith("0: "), texts
    scores = [float(t.rsplit("similarity ", 1)[1].split(",")[0]) for t in texts]
    assert scores == sorted(scores, reverse=True), scores
    at_widths(page, "similarity-grid", "Images 1 to 12")
    page.get_by_role("tab", name="Table", exact=True).click()
    wait_until_drawn(page, "images match")
    choose(page, "Sort by", "similarity")
    wait_until_drawn(page, "the Grid's selection's (12 images)")
    no_exception(page)
    page.close()


def test_patch_search_results_go_to_the_grid_and_one_opens_in_photo(server, browser):
    running, folder = server
    page = open_index(browser, running.url, folder / "index", 1280, 900)
    page.get_by_role("tab", name="Patch search", exact=True).click()
    wait_until_drawn(page, "most similar patches")
    at_widths(page, "patch-search-buttons", "Show in Grid")
    page.set_viewport_size({"width": 1280, "height": 900})
    click_and_wait(page, "button", "Show in Grid", "images: the images of the 8 patches most like patch")
    assert page.get_by_role("tab", name="Grid", exact=True).get_attribute("aria-selected") == "true"
    texts = page.locator("[data-testid=stImageCaption]", has_text=":").all_inner_texts()  # not the legend's
    assert texts and all("similarity" in t for t in texts if "one scale" not in t), texts
    at_widths(page, "patch-search-grid", "Images 1 to")
    page.get_by_role("tab", name="Patch search", exact=True).click()
    wait_until_drawn(page, "most similar patches")
    page.get_by_role("button", name="Open in Photo").first.click()
    wait_until_drawn(page, "what does the Vision Transformer look at?")
    picker = page.get_by_role("combobox", name="Image").first
    eventually(lambda: "index: " in (picker.input_value() or picker.inner_text()), what="the photo in the picker")
    no_exception(page)
    page.close()
