"""The SQL box's Stop button in a real browser (`streamlit run app.py`, headless Chromium via Playwright): a slow query
runs in one session while a second session of the same server opens the same index and draws its page; then Stop
ends the query, with one message."""

import time

import pytest
from browser_harness import CHROMIUM, CHROMIUM_ARGS, new_page, require_browser, streamlit_server, wait_until_drawn
from dataset_harness import make_images
from tiny_models import tiny_checkpoint

from vitviz.commands.index import main as index_command

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

SLOW = "SELECT count(*) AS n FROM range(1000000000000)"  # hours of counting: only Stop ends it here


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_sql_stop")
    model = tiny_checkpoint(folder / "model.pt")
    images = make_images(folder / "images")
    assert index_command([str(images), "--model", str(model), "--out", str(folder / "index")]) == 0
    env = {
        "VITVIZ_SAMPLES": "",
        "VITVIZ_TEST_PRECISION": "fp32",
        "VITVIZ_MODEL_DIRS": str(folder),
        "VITVIZ_QUERY_SECONDS": "600",  # the time limit must not be what stops the query
    }
    with streamlit_server(folder, env) as running:
        yield running, folder


def open_index_page(browser, url: str, folder) -> object:
    page = new_page(browser, 1280, 900)
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(folder / "index"))
    field.press("Enter")
    wait_until_drawn(page, "25 images match")
    return page


def no_exception(page) -> None:
    assert page.locator("[data-testid=stException]").count() == 0, page.locator(
        "[data-testid=stException]"
    ).first.inner_text()


def test_stop_ends_a_slow_query_while_another_session_draws_its_page(server):
    running, folder = server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        first = open_index_page(browser, running.url, folder)
        first.get_by_text("SQL (read-only, DuckDB over the tables images and heads)").click()
        first.get_by_role("textbox", name="SELECT ...").fill(SLOW)
        first.get_by_role("button", name="Run query").click()
        stop = first.get_by_role("button", name="Stop")
        stop.wait_for(timeout=120_000)
        first.get_by_text("Running for").first.wait_for()
        # a second session of the same server opens the index and draws its table while the query runs
        started = time.monotonic()
        second = open_index_page(browser, running.url, folder)  # browser.new_page: a context of its own
        assert second.get_by_text("25 images match").first.is_visible()
        no_exception(second)
        drawn_in = time.monotonic() - started
        assert stop.is_visible(), "the query ended before the second session drew its page"
        # Stop ends it, with one message; the first session's page works again
        clicked = time.monotonic()
        stop.click()
        first.get_by_text("The query was stopped (Stop was pressed).").wait_for(timeout=60_000)
        assert time.monotonic() - clicked < 30
        assert first.get_by_role("button", name="Stop").count() == 0
        assert first.get_by_text("Running for").count() == 0
        no_exception(first)
        browser.close()
    assert drawn_in < 120
