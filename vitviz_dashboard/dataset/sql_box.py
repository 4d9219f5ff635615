"""The read-only SQL box of the Table tab: a query runs when it is submitted (not on every rerun of the tab), in a
thread of its own, and its result is kept in the session until another is submitted. While it runs, a fragment looks
at it twice a second and offers a Stop button; a query stopped by a limit (vitviz/dataset/bounds.py) shows one
message that names the limit. Each browser session runs at most one query at a time (its own QuerySession)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from vitviz.dataset import DatasetIndex, QueryError, QuerySession, QueryStopped
from vitviz.messages import counted
from vitviz_dashboard.state import SQL_JOB, dataset_key

SESSION = dataset_key("sql_session")
PAGE_ROWS = 100  # rows of a result shown at once
POLL_SECONDS = 0.5  # how often a running query is looked at
QUICK_SECONDS = 0.5  # a query done within this shows at once, without a fragment looking at it
SQL_EXAMPLE = "SELECT label, prediction, count(*) AS images FROM images GROUP BY ALL ORDER BY images DESC"


@dataclass
class Job:
    """One submitted query of the session: its text, page and index; its result or error once it has ended."""

    sql: str
    page: int
    folder: str
    started: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = None
    result: pd.DataFrame | None = None
    error: QueryError | None = None
    seconds: float = 0.0  # how long it ran, once it has ended

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def query_session() -> QuerySession:
    """This browser session's QuerySession (one running query at a time, and its Stop)."""
    return st.session_state.setdefault(SESSION, QuerySession())


def start(index: DatasetIndex, sql: str, page: int) -> Job:
    """Run the query in a thread; wait QUICK_SECONDS for it, so a quick query shows in this very run."""
    job, session = Job(sql, page, str(index.folder)), query_session()

    def run() -> None:
        try:
            job.result = index.query(sql, limit=PAGE_ROWS, offset=(page - 1) * PAGE_ROWS, session=session)
        except QueryError as error:
            job.error = error
        job.seconds = time.monotonic() - job.started

    job.thread = threading.Thread(target=run, name="vitviz-sql-box", daemon=True)
    job.thread.start()
    job.thread.join(QUICK_SECONDS)
    return job


def sql_box(index: DatasetIndex) -> None:
    """A read-only SQL box (DuckDB over the tables images and heads), a page of rows at a time."""
    with st.expander("SQL (read-only, DuckDB over the tables images and heads)"):
        with st.form(dataset_key("sql_form"), border=False):
            sql = st.text_area("SELECT ...", SQL_EXAMPLE, key=dataset_key("sql"), height=90)
            page = st.number_input("Result page", 1, None, 1, key=dataset_key("sql_page"))
            submitted = st.form_submit_button("Run query", icon=":material/play_arrow:", key=dataset_key("sql_run"))
        job = SQL_JOB.get()
        if submitted:
            if job is not None and job.running():
                st.warning("A query of this session is still running: stop it, or wait for it, first.")
            else:
                job = start(index, sql, int(page))
                SQL_JOB.set(job)
        if job is None or job.folder != str(index.folder):
            st.caption(
                f"Run a query to see its rows. Each query may take {index.limits.seconds:g} s and "
                f"{index.limits.memory_mb} MB; past either it is stopped."
            )
            return
        polling = job.running()
        st.fragment(show_job, run_every=POLL_SECONDS if polling else None)(index, polling)


def show_job(index: DatasetIndex, polling: bool) -> None:
    """The session's query: running (with a Stop button), or its result, or its one message."""
    job: Job = SQL_JOB.get()  # sql_box started it
    if job.running():
        seconds = time.monotonic() - job.started
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.info(
            f"Running for {seconds:.0f} s (page {job.page}); it is stopped at the time limit of "
            f"{index.limits.seconds:g} s or the memory limit of {index.limits.memory_mb} MB.",
            icon=":material/hourglass_top:",
        )
        if right.button("Stop", key=dataset_key("sql_stop"), icon=":material/stop_circle:", type="primary"):
            query_session().stop()
        return
    if polling:  # it ended while the fragment looked at it: draw the page again, without the looking
        st.rerun()
    if isinstance(job.error, QueryStopped) and job.error.limit == "stop":
        st.info("The query was stopped (Stop was pressed).", icon=":material/stop_circle:")
    elif job.error is not None:
        st.error(str(job.error))
    elif job.result is not None:
        more = " (more on the next page)" if job.result.attrs.get("more") else ""
        st.caption(f"{counted(len(job.result), 'row')} of page {job.page}{more}, in {job.seconds:.1f} s")
        st.dataframe(job.result, hide_index=True)
