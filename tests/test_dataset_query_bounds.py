"""Bounded SQL on a dataset index (vitviz/dataset/bounds.py, sandbox.py): hostile queries, each in a process of its
own, are stopped by the limit expected of them within a bound on time and on the memory of both the caller and its
query process; one running query per session, a cap on queries at once, stop(), the server settings, and DuckDB's
settings (memory, threads, a private spill folder) as the query process has them."""

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from dataset_harness import make_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main
from vitviz.dataset import QueryBusy, QueryError, QuerySession, QueryStopped, bounds

ROOT = Path(__file__).resolve().parents[1]
SMALL_MB = 256  # the tests' memory limit
CALLER_GROWTH_MB = 150  # the most a stopped query may add to the caller's peak
PROCESS_PEAK_MB = 1536  # the bound on a process's peak


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    model = tiny_checkpoint(root / "model.pt")
    out = root / "index"
    assert main([str(make_images(root / "images")), "--model", str(model), "--out", str(out)]) == 0
    return out


# One case in a fresh process: open the index with the case's limits, warm up (the query process starts), note the
# peak, run the case, then check that the index still answers. Prints one JSON line. "whole" runs it through
# vitviz.open_index, as a user would; "light" sends the same request to a query process the way DatasetIndex.query
# does, with only vitviz.dataset's bounds and sandbox imported (importing vitviz imports torch, which takes 20 s on
# a busy machine: one case goes the whole way, the others the light way).
CASE = """
import json, sys, time, types
from pathlib import Path
folder, seconds, memory, sql, way = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
if way == "whole":
    import vitviz
    from vitviz.dataset import QueryStopped, sandbox
    index = vitviz.open_index(folder, query_seconds=seconds, query_memory=memory)
    ask = lambda text: index.query(text)
else:
    for name in ("vitviz", "vitviz.dataset"):  # the packages without their __init__ (which import torch)
        package = types.ModuleType(name)
        package.__path__ = [str(Path.cwd().joinpath(*name.split(".")))]
        sys.modules[name] = package
    from vitviz.dataset import sandbox
    from vitviz.dataset.bounds import QueryLimits, QueryStopped, RunningQuery
    shards = sorted(Path(folder, "shards").iterdir())
    views = {t: [str(s / f"{t}.parquet") for s in shards] for t in ("images", "heads")}
    limits = QueryLimits(seconds, memory)
    def ask(text):
        request = sandbox.query_request(views, Path(folder, "shards"), text, 10_000, 0, limits)
        return sandbox.run_query(request, limits, RunningQuery(), keep=4)
def peak_mb():  # VmHWM starts afresh at exec; ru_maxrss keeps the forking parent's (pytest's) high-water mark
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
ask("SELECT count(*) AS n FROM images")
before = peak_mb()
started = time.monotonic()
try:
    ask(sql)
    outcome, message = "finished", ""
except QueryStopped as stopped:
    outcome, message = stopped.limit, str(stopped)
seconds_taken = time.monotonic() - started
after = peak_mb()
still = int(ask("SELECT count(*) AS n FROM images")["n"][0])
print(json.dumps({"outcome": outcome, "message": message, "seconds": seconds_taken, "before_mb": before,
                  "after_mb": after, "query_process_mb": sandbox.peak_mb(), "images": still}))
"""

TIME, MEMORY = (2, SMALL_MB), (20, SMALL_MB)  # (seconds, MB): the limit a case should meet first is the tight one
CASES = [
    # the four
    ("SELECT list(range) FROM range(3000000000)", MEMORY, "memory"),
    ("SELECT repeat('x', 1500000000)", MEMORY, "memory"),  # allocated outside DuckDB's accounting
    ("SELECT repeat('x', 1500000000) AS whole", MEMORY, "memory"),  # the same through vitviz.open_index
    ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t", TIME, "time"),
    ("SELECT count(*) FROM range(1000000000000)", TIME, "time"),
    # variants
    ("SELECT string_agg(range::VARCHAR, ',') FROM range(1000000000)", MEMORY, "memory"),
    ("SELECT range(300000000) AS huge_list", MEMORY, "memory"),  # a list built outside DuckDB's accounting
    ("SELECT lpad('x', 1500000000, 'y')", MEMORY, "memory"),
    ("SELECT repeat('x', 1000000) FROM range(3000)", MEMORY, "memory"),  # 2 GB in one vector of rows
    ("SELECT count(*) FROM range(1000000) a, range(1000000) b", TIME, "time"),  # a cross join of 10^12 rows
    ("SELECT sum(range) OVER (ORDER BY hash(range)) FROM range(300000000)", MEMORY, "memory"),  # a sort that spills
    ("SELECT count(*) FROM range(50000000) WHERE regexp_matches(range::VARCHAR || 'x', '(a|aa)*b')", TIME, "time"),
    ("SELECT regexp_matches(repeat('a', 100000), '(a*)*b') AS m", TIME, "finished"),  # RE2: no backtracking blowup
]


@pytest.mark.parametrize(("sql", "limits", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_hostile_query_is_stopped_by_its_limit_within_bounds(index_folder, sql, limits, expected):
    seconds, memory = limits
    way = "whole" if "AS whole" in sql else "light"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CASE, str(index_folder), str(seconds), str(memory), sql, way],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outcome"] == expected, result
    if expected == "time":
        assert f"(time: {seconds} s)" in result["message"] and "LIMIT" in result["message"]
        assert result["seconds"] < seconds + 6, result  # the interrupt, or the kill a few seconds after it
    if expected == "memory":
        assert f"(memory: {memory} MB)" in result["message"] and "LIMIT" in result["message"]
    assert result["seconds"] < 30, result
    assert time.monotonic() - started < 180
    # the caller's process: the query added next to nothing to its peak, and stayed under the bound
    assert result["after_mb"] - result["before_mb"] < CALLER_GROWTH_MB, result
    assert result["after_mb"] < PROCESS_PEAK_MB, result
    # the query process: its import baseline (about 180 MB) and the memory limit, with little overshoot
    assert 0 < result["query_process_mb"] < memory + 350, result
    assert result["images"] == 25  # the index answers again after the stop


@pytest.fixture
def index(index_folder):
    return vitviz.open_index(index_folder, query_seconds=20, query_memory=SMALL_MB)


SLOW = "SELECT count(*) FROM range(1000000000000)"


def in_thread(function):
    """Run ``function`` in a thread; return (the thread, a dict that gets "result" or "error")."""
    box: dict = {}

    def run():
        try:
            box["result"] = function()
        except Exception as error:  # any error is handed to the test
            box["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def wait_running(index, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not index._running:
        assert time.monotonic() < deadline, "the query never started"
        time.sleep(0.02)


def test_one_query_per_session_and_stop(index):
    session = QuerySession()
    thread, box = in_thread(lambda: index.query(SLOW, session=session))
    wait_running(index)
    with pytest.raises(QueryBusy, match="still running"):
        index.query("SELECT 1 AS one", session=session)
    assert index.query("SELECT 1 AS one")["one"][0] == 1  # another caller is not held up
    started = time.monotonic()
    assert session.stop()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert isinstance(box.get("error"), QueryStopped) and box["error"].limit == "stop", box
    assert index.query("SELECT 2 AS two", session=session)["two"][0] == 2  # the session may query again
    assert not session.stop()  # nothing left to stop


def test_index_stop_stops_its_running_queries(index):
    thread, box = in_thread(lambda: index.query(SLOW))
    wait_running(index)
    assert index.stop() == 1
    thread.join(30)
    assert isinstance(box.get("error"), QueryStopped) and "stopped" in str(box["error"])


def test_the_server_cap_holds_further_queries(index, monkeypatch):
    monkeypatch.setattr(bounds, "_slots", (1, threading.BoundedSemaphore(1)))
    thread, box = in_thread(lambda: index.query(SLOW))
    wait_running(index)
    waiting = vitviz.open_index(index.folder, query_seconds=1, query_memory=SMALL_MB)
    with pytest.raises(QueryBusy, match="1 queries at once"):
        waiting.query("SELECT 1")
    index.stop()
    thread.join(30)
    assert waiting.query("SELECT 1 AS one")["one"][0] == 1  # the slot is free again


def query_processes() -> list[int]:
    """The process ids of this process's query processes (children running sandbox_child.py)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"sandbox_child.py" in command:
            found.append(int(entry.name))
    return found


def test_a_query_process_killed_from_outside_is_not_taken_for_a_limit(index):
    thread, box = in_thread(lambda: index.query(SLOW))
    wait_running(index)
    time.sleep(0.5)
    for pid in query_processes():
        os.kill(pid, signal.SIGKILL)
    thread.join(30)
    error = box.get("error")
    assert type(error) is QueryError and "ended unexpectedly" in str(error), box
    assert index.query("SELECT 3 AS three")["three"][0] == 3  # a fresh query process answers


def test_duckdb_settings_in_the_query_process(index):
    row = index.query(
        "SELECT current_setting('memory_limit') AS memory, current_setting('threads') AS threads, "
        "current_setting('temp_directory') AS spill, current_setting('max_temp_directory_size') AS spill_max, "
        "current_setting('lock_configuration') AS locked"
    ).iloc[0]
    assert row["memory"].endswith("MiB") and float(row["memory"].split()[0]) <= SMALL_MB * 3 / 4
    assert int(row["threads"]) == 1 and bool(row["locked"])
    spill = Path(row["spill"])
    assert spill.parent.name.startswith("vitviz-query-")  # made by the caller with tempfile, for this process only
    assert stat.S_IMODE(os.stat(spill.parent).st_mode) == 0o700
    assert row["spill_max"].split()[0] != "0"
    # DuckDB lets a query read its own spill folder (only its own spill files are there), nothing around it
    with pytest.raises(QueryError, match="outside the index"):
        index.query(f"SELECT * FROM glob('{spill.parent}/*')")
    with pytest.raises(QueryError, match="outside the index"):
        index.query(f"SELECT * FROM read_text('{spill.parent.parent}/*')")
    with pytest.raises(QueryError, match="only SELECT"):
        index.query("SET memory_limit = '100GB'")
    with pytest.raises(QueryError, match="outside the index"):
        index.query("SELECT * FROM read_csv('/etc/passwd')")


def test_limits_from_arguments_settings_and_defaults(index_folder, monkeypatch):
    monkeypatch.delenv("VITVIZ_QUERY_SECONDS", raising=False)
    monkeypatch.delenv("VITVIZ_QUERY_MEMORY_MB", raising=False)
    assert vitviz.open_index(index_folder).limits == bounds.QueryLimits(20.0, 1024, 1)
    monkeypatch.setenv("VITVIZ_QUERY_SECONDS", "7.5")
    monkeypatch.setenv("VITVIZ_QUERY_MEMORY_MB", "512")
    assert vitviz.open_index(index_folder).limits == bounds.QueryLimits(7.5, 512, 1)
    assert vitviz.open_index(index_folder, query_seconds=3, query_memory=300).limits == bounds.QueryLimits(3, 300, 1)
    monkeypatch.setenv("VITVIZ_QUERY_SECONDS", "soon")
    with pytest.raises(QueryError, match="VITVIZ_QUERY_SECONDS='soon' is not a number"):
        vitviz.open_index(index_folder)
    with pytest.raises(QueryError, match="memory limit must be"):
        vitviz.open_index(index_folder, query_seconds=1, query_memory=1)


def test_a_cursors_own_interrupt_stops_its_query():
    """What the query process relies on: the interrupt of the cursor that runs a query stops it."""
    connection = duckdb.connect(":memory:", config={"threads": 1})
    cursor = connection.cursor()
    timer = threading.Timer(0.5, cursor.interrupt)
    started = time.monotonic()
    timer.start()
    with pytest.raises(duckdb.InterruptException):
        cursor.execute(SLOW).fetchall()
    assert time.monotonic() - started < 10
