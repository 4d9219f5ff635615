"""Bounds on the SQL of a dataset index: a time and a memory limit per query, one running query per session, and a
cap on the queries that run at once in the whole process (a server's sessions share it).

Why so much: one SELECT can ask DuckDB for more than a machine has (``SELECT list(range) FROM range(3000000000)``),
and some of DuckDB's functions allocate outside its own memory accounting (``repeat``, ``lpad``, ``range()`` as a
list), so its ``memory_limit`` alone does not hold them. Each query therefore runs in a query process of its own
(vitviz/dataset/sandbox.py): DuckDB's limits are set there, a timer interrupts the query at the time limit, and a
query that still goes on past the time limit or past the memory limit has its process ended. What the caller gets is
a ``QueryStopped`` whose one line says which limit stopped the query and how to narrow it.

The settings a server's owner may change (environment variables, read when an index is opened):

    VITVIZ_QUERY_SECONDS     wall-clock limit per query, in seconds (default 20)
    VITVIZ_QUERY_MEMORY_MB   memory limit per query, in MB (default 1024)
    VITVIZ_QUERY_THREADS     DuckDB threads per query, 1 or 2 (default 1)
    VITVIZ_QUERY_SLOTS       queries that may run at once in the process (default 4); others wait for a slot
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

DEFAULT_SECONDS = 20.0
DEFAULT_MB = 1024
DEFAULT_SLOTS = 4
NARROW = "narrow the query: add a LIMIT or a WHERE, or select fewer columns"


class QueryError(ValueError):
    """A query the index refuses (it writes, attaches or reads other files) or DuckDB rejects; the message says why."""


class QueryStopped(QueryError):
    """A query stopped by a limit (``limit`` is "time" or "memory") or by ``stop()`` (``limit`` is "stop")."""

    def __init__(self, message: str, limit: str):
        super().__init__(message)
        self.limit = limit


class QueryBusy(QueryError):
    """A query refused because its session already runs one, or because the process runs as many as it allows."""


@dataclass(frozen=True)
class QueryLimits:
    """The limits of each query of an index: seconds of wall-clock time, MB of memory, DuckDB threads."""

    seconds: float = DEFAULT_SECONDS
    memory_mb: int = DEFAULT_MB
    threads: int = 1

    def __post_init__(self):
        if not 0 < self.seconds <= 86_400:
            raise QueryError(f"the query time limit must be in (0, 86400] seconds; got {self.seconds}")
        if not 64 <= self.memory_mb <= 1_048_576:
            raise QueryError(f"the query memory limit must be in [64, 1048576] MB; got {self.memory_mb}")
        if self.threads not in (1, 2):
            raise QueryError(f"queries run on 1 or 2 DuckDB threads; got {self.threads}")

    @property
    def duckdb_memory_mb(self) -> int:
        """DuckDB's own memory_limit: three quarters of the limit, so that DuckDB's own accounting stops most queries
        with its message before the query process is ended."""
        return self.memory_mb * 3 // 4

    @property
    def result_mb(self) -> int:
        """The most that one page of a result may take (it is copied into the caller's process)."""
        return max(16, self.memory_mb // 4)

    def time_message(self) -> str:
        return f"the query was stopped by the time limit (time: {self.seconds:g} s); {NARROW}"

    def memory_message(self) -> str:
        return f"the query was stopped by the memory limit (memory: {self.memory_mb} MB); {NARROW}"

    def result_message(self, megabytes: float) -> str:
        return (
            f"the query was stopped by the memory limit (memory: a page of its result takes {megabytes:.0f} MB, over "
            f"{self.result_mb} MB); ask for fewer rows a page (limit=...), or select fewer or smaller columns"
        )


def _setting(name: str, convert, default):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return convert(text)
    except ValueError:
        raise QueryError(f"the server setting {name}={text!r} is not a number") from None


def limits_from_environment(seconds: float | None = None, memory_mb: int | None = None) -> QueryLimits:
    """The limits given, else the server's settings (VITVIZ_QUERY_SECONDS, VITVIZ_QUERY_MEMORY_MB,
    VITVIZ_QUERY_THREADS), else the defaults (20 s, 1024 MB, 1 thread)."""
    return QueryLimits(
        seconds=float(seconds) if seconds is not None else _setting("VITVIZ_QUERY_SECONDS", float, DEFAULT_SECONDS),
        memory_mb=int(memory_mb) if memory_mb is not None else _setting("VITVIZ_QUERY_MEMORY_MB", int, DEFAULT_MB),
        threads=_setting("VITVIZ_QUERY_THREADS", int, 1),
    )


_slots_lock = threading.Lock()
_slots: tuple[int, threading.BoundedSemaphore] | None = None


def server_slots() -> tuple[int, threading.BoundedSemaphore]:
    """The process-wide cap on running queries: (its size, the semaphore). Its size is VITVIZ_QUERY_SLOTS (default 4),
    read once, when the first query runs."""
    global _slots
    with _slots_lock:
        if _slots is None:
            size = _setting("VITVIZ_QUERY_SLOTS", int, DEFAULT_SLOTS)
            if size < 1:
                raise QueryError(f"VITVIZ_QUERY_SLOTS must be at least 1; got {size}")
            _slots = (size, threading.BoundedSemaphore(size))
        return _slots


class RunningQuery:
    """One query under way: ``stop()`` asks its query process to interrupt it (the caller then gets QueryStopped)."""

    def __init__(self):
        self.stop_requested = threading.Event()

    def stop(self) -> None:
        self.stop_requested.set()


class QuerySession:
    """One user's queries: at most one runs at a time (a second, while one runs, is refused with QueryBusy), and
    ``stop()`` stops the one running. The Dataset page keeps one per browser session for its SQL box."""

    def __init__(self):
        self._lock = threading.Lock()
        self.running: RunningQuery | None = None

    def begin(self) -> RunningQuery:
        with self._lock:
            if self.running is not None:
                raise QueryBusy(
                    "a query of this session is still running: wait for it, or stop it, before running another"
                )
            self.running = RunningQuery()
            return self.running

    def end(self, running: RunningQuery) -> None:
        with self._lock:
            if self.running is running:
                self.running = None

    def stop(self) -> bool:
        """Stop the running query, if any; True if there was one."""
        with self._lock:
            running = self.running
        if running is None:
            return False
        running.stop()
        return True


__all__ = [
    "QueryBusy",
    "QueryError",
    "QueryLimits",
    "QuerySession",
    "QueryStopped",
    "RunningQuery",
    "limits_from_environment",
    "server_slots",
]
