"""The Dataset page's SQL box through AppTest (vitviz_dashboard/dataset/sql_box.py): a query runs when it is
submitted and not on the tab's other reruns, its result is kept; a running query is stopped by the Stop button; the
table's columns put prediction, probability and correct before the file's path and size."""

import time

import pytest
from dataset_harness import checked, dataset_app, make_images
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_command
from vitviz.dataset import DatasetIndex
from vitviz_dashboard.dataset.table import image_columns

MARKER = "SELECT 42 AS answer, 'sql box' AS marker"
SLOW = "SELECT count(*) AS n FROM range(1000000000000)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql_box")
    model = tiny_checkpoint(root / "model.pt")
    assert index_command([str(make_images(root / "images")), "--model", str(model), "--out", str(root / "index")]) == 0
    return root / "index"


@pytest.fixture(autouse=True)
def allowed(folder, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(folder.parent))  # the page opens folders only where allowed


@pytest.fixture
def counted(monkeypatch):
    """Every SQL text DatasetIndex.query is given, in order."""
    calls: list[str] = []
    query = DatasetIndex.query

    def counting(self, sql, *args, **kwargs):
        calls.append(sql)
        return query(self, sql, *args, **kwargs)

    monkeypatch.setattr(DatasetIndex, "query", counting)
    return calls


def submit(at: AppTest, sql: str) -> AppTest:
    at.text_area(key="dataset|sql").set_value(sql)
    at.button(key="dataset|sql_run").click()
    return checked(at.run())


def running(at: AppTest) -> bool:
    return any(text.value.startswith("Running for") for text in at.info)


def until_ended(at: AppTest, timeout: float = 60) -> AppTest:
    """Run the page again until the session's query has ended (a browser's fragment would look twice a second)."""
    deadline = time.monotonic() + timeout
    while running(at):
        assert time.monotonic() < deadline, "the query did not end"
        time.sleep(0.3)
        checked(at.run())
    return at


def test_the_query_runs_once_when_submitted_and_its_result_is_kept(folder, counted):
    at = dataset_app(folder)
    assert MARKER not in counted  # the box does not run its text by itself
    until_ended(submit(at, MARKER))
    assert counted.count(MARKER) == 1
    assert any(list(frame.value.columns) == ["answer", "marker"] for frame in at.dataframe)
    at.radio(key="kept|dataset|correctness").set_value("correct")  # another rerun of the tab
    checked(at.run())
    at.text_area(key="dataset|sql").set_value("SELECT 1 AS typed_not_submitted")
    checked(at.run())
    assert counted.count(MARKER) == 1 and not any("typed_not_submitted" in sql for sql in counted)
    assert any(list(frame.value.columns) == ["answer", "marker"] for frame in at.dataframe)  # still shown


def test_a_running_query_is_stopped_by_the_stop_button(folder):
    at = submit(dataset_app(folder), SLOW)
    assert running(at) and at.button(key="dataset|sql_stop")
    at.button(key="dataset|sql_stop").click()
    started = time.monotonic()
    until_ended(checked(at.run()), timeout=30)
    assert time.monotonic() - started < 15
    assert [text.value for text in at.info if "stopped" in text.value] == ["The query was stopped (Stop was pressed)."]
    assert not at.error


def test_a_refused_query_shows_one_message(folder):
    at = until_ended(submit(dataset_app(folder), "SELECT * FROM read_csv('/etc/passwd')"))
    assert len(at.error) == 1 and "outside the index" in at.error[0].value


def test_prediction_probability_and_correct_come_before_the_path_and_size(folder):
    columns = image_columns(vitviz.open_index(folder))
    assert columns[:5] == ["image_id", "label", "prediction", "probability", "correct"]
    assert columns[5:] == ["path", "width", "height", "error"]
