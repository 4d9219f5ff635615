"""The query process's side of vitviz/dataset/sandbox.py, run as ``python -I sandbox_child.py FD FOLDER``: it imports
nothing of vitviz (so it starts without torch), only DuckDB and pandas.

Each index gets one DuckDB connection with its views, DuckDB's ``memory_limit``, ``threads``, a private
``temp_directory`` (a folder of its own inside FOLDER, which the caller made with mode 0700) and
``max_temp_directory_size``; then the external access is limited to the index's shards and the configuration locked.
A query runs on a cursor of that connection; a timer thread calls the cursor's ``interrupt()`` at the time limit
(the connection's own ``interrupt()`` does not reach a cursor's query), and so does a "stop" message from the caller.

When the caller goes (its end of the socket closes, or this process's parent changes: the caller was killed), the
child removes FOLDER and ends, so that no spill folder outlives its caller.
"""

import os
import shutil
import signal
import sys
import tempfile
import threading
from multiprocessing.connection import Connection
from typing import NoReturn

POLL_SECONDS = 0.02  # how often a "stop" from the caller is looked for
IDLE_SECONDS = 1.0  # between requests, how often the child looks whether its caller still runs
PARENT = os.getppid()  # the caller; a change means it has gone (the child was re-parented)


def _caller_gone(temporary: str) -> NoReturn:
    """Nobody waits for an answer: remove the folder and end at once (a DuckDB thread may still be busy)."""
    shutil.rmtree(temporary, ignore_errors=True)
    os._exit(0)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _connect(request: dict, temporary: str):
    """A connection with the index's views, the limits, a private spill folder, and then nothing else allowed."""
    import duckdb

    connection = duckdb.connect(":memory:")
    for table, files in request["views"].items():
        connection.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{', '.join(map(_quote, files))}])")
    tags = request.get("tags")  # [the tags file beside the index, its stamp], or None (vitviz/dataset/tags.py)
    _tags_view(connection, tags[0] if tags else None)
    spill = tempfile.mkdtemp(dir=temporary)  # one folder per index: a query can see only its own spill files
    connection.execute(f"SET memory_limit = '{int(request['memory_mb'])}MB'")
    connection.execute(f"SET threads = {int(request['threads'])}")
    connection.execute(f"SET temp_directory = {_quote(spill)}")
    connection.execute(f"SET max_temp_directory_size = '{int(request['spill_mb'])}MB'")
    connection.execute(f"SET allowed_directories = [{_quote(request['allowed'])}]")
    if tags:  # the one file outside the shards a query may read
        connection.execute(f"SET allowed_paths = [{_quote(tags[0])}]")
    connection.execute("SET enable_external_access = false")
    connection.execute("SET autoinstall_known_extensions = false")
    connection.execute("SET autoload_known_extensions = false")
    connection.execute("SET lock_configuration = true")
    return connection


def _tags_view(connection, path: str | None) -> None:
    """The view ``tags`` (image_id, tag): the tags file's rows, none without one; a damaged file's view raises its
    one line when a query reads it (the other tables still answer)."""
    import duckdb

    if path is not None:
        try:
            connection.execute(
                "CREATE VIEW tags AS SELECT image_id::BIGINT AS image_id, tag::VARCHAR AS tag "
                f"FROM read_parquet({_quote(path)})"
            )
            return
        except duckdb.Error:
            problem = f"{path} is not a readable tags file: delete it"
            failing = f"SELECT error({_quote(problem)})::BIGINT AS image_id, ''::VARCHAR AS tag"
            connection.execute(f"CREATE VIEW tags AS {failing}")
            return
    connection.execute("CREATE VIEW tags AS SELECT 0::BIGINT AS image_id, ''::VARCHAR AS tag WHERE false")


def _answer(request: dict, connections: dict, temporary: str, control: Connection) -> tuple[str, object]:
    import duckdb

    tags = tuple(request.get("tags") or ())
    key = (tuple((t, tuple(f)) for t, f in request["views"].items()), tags, request["memory_mb"], request["threads"])
    if key not in connections:
        if len(connections) >= 4:
            connections.pop(next(iter(connections))).close()
        connections[key] = _connect(request, temporary)
    cursor = connections[key].cursor()
    outcome: dict = {}

    def execute():
        try:
            frame = cursor.execute(request["sql"]).df()
            megabytes = frame.memory_usage(deep=True).sum() / 2**20
            outcome["answer"] = ("result", megabytes) if megabytes > request["result_mb"] else ("ok", frame)
        except duckdb.InterruptException:
            outcome["answer"] = (outcome.get("why", "time"), None)
        except duckdb.OutOfMemoryException:
            outcome["answer"] = ("memory", None)
        except duckdb.PermissionException as error:
            outcome["answer"] = ("permission", str(error))
        except MemoryError:
            outcome["answer"] = ("memory", None)
        except duckdb.Error as error:  # its message names its kind ("Binder Error: ...")
            outcome["answer"] = ("error", str(error))
        except Exception as error:  # pandas' refusal
            outcome["answer"] = ("error", f"{type(error).__name__}: {error}")

    def interrupt(why: str) -> None:
        outcome.setdefault("why", why)
        cursor.interrupt()

    thread = threading.Thread(target=execute, daemon=True)
    timer = threading.Timer(request["seconds"], interrupt, args=("time",))
    thread.start()
    timer.start()
    while thread.is_alive():
        thread.join(POLL_SECONDS)
        try:
            if control.poll() and control.recv() == "stop":
                interrupt("stop")
        except (EOFError, OSError):  # the caller has gone
            _caller_gone(temporary)
        if os.getppid() != PARENT:
            _caller_gone(temporary)
    timer.cancel()
    cursor.close()
    return outcome["answer"]


def _serve(fd: int, temporary: str) -> None:
    """The child's loop: one request at a time, each a dict with "views" ({table: [parquet files]}), "tags" ([the
    tags file, its stamp] or None), "allowed" (the folder reads are limited to), "sql", "seconds", "memory_mb",
    "threads", "spill_mb" and "result_mb"."""
    import duckdb  # noqa: F401 - imported before "ready", so the caller's baseline memory includes it
    import pandas  # noqa: F401

    control = Connection(fd)
    control.send("ready")
    connections: dict = {}
    while True:
        try:
            while not control.poll(IDLE_SECONDS):
                if os.getppid() != PARENT:  # the caller has gone, but someone else holds its end of the socket
                    _caller_gone(temporary)
            request = control.recv()
        except (EOFError, OSError):  # the caller has gone
            _caller_gone(temporary)
        if isinstance(request, dict):
            answer = _answer(request, connections, temporary, control)
            try:
                control.send(answer)
            except (EOFError, OSError):  # the caller has gone
                _caller_gone(temporary)
            except Exception as error:  # a result that pickle cannot carry
                control.send(("error", f"the result cannot be sent back ({type(error).__name__}: {error})"))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the caller's terminal is the caller's to handle
    _serve(int(sys.argv[1]), sys.argv[2])
    os._exit(0)
