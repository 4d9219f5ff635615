"""Query processes: each SQL query of an index runs in a child process (vitviz/dataset/sandbox_child.py, which sets
DuckDB's limits and interrupts a query at its time limit), so a query that allocates outside DuckDB's accounting can
be ended without taking the caller's process with it.

In the caller, the thread that waits for the answer also watches the child: a child whose resident memory passes the
memory limit, or that is still busy a few seconds past the time limit or a stop (a DuckDB function that allocates a
huge value is not interruptible), is killed, and a fresh child is started for the next query. Idle children are kept
for reuse, as many as the process runs queries at once (vitviz/dataset/bounds.py).

Each child's spill folder, ``vitviz-query-<caller's pid>-*`` in the temporary folder, does not outlive its caller: the
child removes it when the caller goes (its end of the socket closes, or the child's parent changes), even when the
caller was killed; and a new query process first removes the folders left behind (a child killed with its caller):
those whose caller no longer runs and whose lock file (held by the caller and the child) nobody holds.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from vitviz.dataset.bounds import QueryError, QueryLimits, QueryStopped, RunningQuery

GRACE_SECONDS = 3.0  # after the time limit or a stop, how long an interrupt may take before the child is killed
POLL_SECONDS = 0.02  # how often the caller looks at the child's memory
START_SECONDS = 120.0  # a child that has not started by then is given up
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CHILD = Path(__file__).with_name("sandbox_child.py")
FOLDER_PREFIX = "vitviz-query-"  # then the caller's pid and a dash: the caller owns the folder
OWNED = re.compile(rf"{FOLDER_PREFIX}(\d+)-")
LOCK = ".owner"  # in the folder: flocked by the caller, and by the child through the inherited descriptor


def _high_water_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB; 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration, ValueError):
        return 0.0


_peaks: list[float] = [0.0]  # the highest peak of any query process so far


def peak_mb() -> float:
    """The highest peak resident memory (MB) of any query process of this process so far, ended ones included."""
    for worker in list(_idle):
        _peaks[0] = max(_peaks[0], _high_water_mb(worker.process.pid))
    return _peaks[0]


def _resident_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _held(folder: str) -> bool:
    """Whether a live process holds the folder's lock (a caller or child of another PID namespace, say)."""
    try:
        descriptor = os.open(os.path.join(folder, LOCK), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(descriptor)


def sweep_stale_folders(temporary: str | None = None) -> list[str]:
    """Remove this user's query folders in ``temporary`` (the temporary folder by default) whose caller no longer runs
    and whose lock nobody holds (a caller and its child both killed, say); the folders removed."""
    temporary = temporary or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(temporary))
    except OSError:
        return removed
    for entry in entries:
        owner = OWNED.match(entry.name)
        if owner is None or int(owner.group(1)) == os.getpid() or _running(int(owner.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _held(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


class Worker:
    """One query process, seen from the caller."""

    def __init__(self):
        sweep_stale_folders()
        # mode 0700: DuckDB spills here, and nowhere else; named by this process's pid, so that it can be swept
        self.folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        self.lock = os.open(os.path.join(self.folder, LOCK), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # the child inherits it: held while either of them runs
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(  # -I: isolated, nothing of the caller's paths; the child needs only DuckDB
            [sys.executable, "-I", str(CHILD), str(theirs.fileno()), self.folder],
            pass_fds=[theirs.fileno(), self.lock],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        self.connection = Connection(ours.detach())
        if not self.connection.poll(START_SECONDS):
            self.close()
            raise QueryError("the query process did not start; try again")
        try:
            self.connection.recv()  # "ready": the imports are done
        except (EOFError, OSError):
            self.close()
            raise QueryError("the query process ended as it started; try again") from None
        self.baseline_mb = _resident_mb(self.process.pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """End the process (killed: it may be busy) and remove its temporary folder."""
        if self.process.poll() is None:
            _peaks[0] = max(_peaks[0], _high_water_mb(self.process.pid))
            self.process.kill()
        self.process.wait()
        self.connection.close()
        os.close(self.lock)
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, request: dict, limits: QueryLimits, running: RunningQuery):
        """Send one query, wait for its answer while watching the child's memory and time: a DataFrame, or raises."""
        self.connection.send(request)
        started, stop_sent = time.monotonic(), None
        ceiling, highest = self.baseline_mb + limits.memory_mb, 0.0
        while not self.connection.poll(POLL_SECONDS):
            now = time.monotonic()
            highest = max(highest, _resident_mb(self.process.pid))
            if highest > ceiling:
                self.close()
                raise QueryStopped(limits.memory_message(), "memory")
            if running.stop_requested.is_set() and stop_sent is None:
                self.connection.send("stop")
                stop_sent = now
            if stop_sent is not None and now - stop_sent > GRACE_SECONDS:
                self.close()
                raise QueryStopped("the query was stopped (Stop was pressed)", "stop")
            if now - started > limits.seconds + GRACE_SECONDS:
                self.close()
                raise QueryStopped(limits.time_message(), "time")
            if not self.alive():
                break
        try:
            kind, value = self.connection.recv()
        except (EOFError, OSError):  # the child died: near the limit, it could not allocate; else something killed it
            code = self.process.poll()
            self.close()
            if highest > ceiling * 0.8:
                raise QueryStopped(limits.memory_message(), "memory") from None
            raise QueryError(f"the query process ended unexpectedly (exit status {code}); try again") from None
        if kind == "ok":
            return value
        if kind == "time":
            raise QueryStopped(limits.time_message(), "time")
        if kind == "stop":
            raise QueryStopped("the query was stopped (Stop was pressed)", "stop")
        if kind == "memory":
            raise QueryStopped(limits.memory_message(), "memory")
        if kind == "result":
            raise QueryStopped(limits.result_message(value), "memory")
        if kind == "permission":
            raise QueryError(f"the query reads something outside the index, which is not allowed: {one_line(value)}")
        raise QueryError(f"DuckDB could not run the query: {one_line(value)}")


def one_line(message: str) -> str:
    """The first line of DuckDB's message: the lines after it quote the query as the query process ran it (inside
    query_request's LIMIT and OFFSET, which the user never wrote) with a caret under the culprit."""
    return next((line.strip() for line in str(message).splitlines() if line.strip()), "no message")


def query_request(
    views: dict[str, list[str]], allowed: Path, statement: str, limit: int, offset: int, limits: QueryLimits
) -> dict:
    """What a query process is sent: the views (table: its Parquet files), the folder reads are limited to, one
    SELECT's rows [offset, offset + limit] (one more than asked, to tell whether more follow) and the limits."""
    return {
        "views": views,
        "allowed": str(allowed) + "/",
        "sql": f"SELECT * FROM ({statement}) LIMIT {int(limit) + 1} OFFSET {int(offset)}",
        "seconds": limits.seconds,
        "memory_mb": limits.duckdb_memory_mb,
        "threads": limits.threads,
        "spill_mb": limits.memory_mb,
        "result_mb": limits.result_mb,
    }


_idle: list[Worker] = []
_idle_lock = threading.Lock()


def run_query(request: dict, limits: QueryLimits, running: RunningQuery, keep: int):
    """Run ``request`` (see sandbox_child._serve) in an idle query process or a new one; keep at most ``keep`` idle
    ones afterwards."""
    with _idle_lock:
        worker = _idle.pop() if _idle else None
    if worker is None or not worker.alive():
        worker = Worker()
    try:
        result = worker.run(request, limits, running)
    except QueryStopped as stopped:
        if stopped.limit == "memory" and worker.alive():  # DuckDB stopped it itself, but may keep its peak: end it
            worker.close()
        raise
    finally:
        if worker.alive() and _resident_mb(worker.process.pid) > worker.baseline_mb + limits.memory_mb / 4:
            worker.close()  # it kept much of a big query's memory: the next query starts from a fresh one
        if worker.alive():
            with _idle_lock:
                if len(_idle) < keep:
                    _idle.append(worker)
                    worker = None
            if worker is not None:
                worker.close()
    return result


def close_all() -> None:
    """End every idle query process (at exit; tests call it to read the processes' peak memory)."""
    with _idle_lock:
        workers, _idle[:] = list(_idle), []
    for worker in workers:
        worker.close()


atexit.register(close_all)
