"""The SQL box's Stop button in a real browser (`streamlit run app.py`, headless Chromium via Playwright): a slow query
runs in one session while a second session of the same server opens the same index and draws its page; then Stop
ends the query, with one message."""

import time

import pytest
from browser_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    index_server,
    no_exception,
    open_index,
    require_browser,
)

require_browser()
from playwright.sync_api import sync_playwright  # noqa: E402

SLOW = "SELECT count(*) AS n FROM range(1000000000000)"  # hours of counting: only Stop ends it here


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser_sql_stop")
    with index_server(folder, VITVIZ_QUERY_SECONDS="600") as running:  # the time limit must not stop the query
        yield running, folder


def test_stop_ends_a_slow_query_while_another_session_draws_its_page(server):
    running, folder = server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        first = open_index(browser, running.url, folder / "index")
        first.get_by_text("SQL (read-only, DuckDB over the tables images and heads)").click()
        first.get_by_role("textbox", name="SELECT ...").fill(SLOW)
        first.get_by_role("button", name="Run query").click()
        stop = first.get_by_role("button", name="Stop")
        stop.wait_for(timeout=120_000)
        first.get_by_text("Running for").first.wait_for()
        # a second session of the same server opens the index and draws its table while the query runs
        started = time.monotonic()
        second = open_index(browser, running.url, folder / "index")  # browser.new_page: a context of its own
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
