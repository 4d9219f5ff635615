"""A real `streamlit run app.py` on a loopback port, and headless Chromium sessions against it.

Used by tests/test_browser.py (one user clicking around), tests/test_concurrent_sessions.py
and bench/load_sessions.py (many users at once). The server runs in its own process through
`python tests/browser_harness.py serve COUNTS -- <streamlit options>`, which counts model
loads and forward passes into the file COUNTS, so a load run can check the model was loaded
once however many sessions asked for it. VITVIZ_TEST_PRECISION=fp32 settles the page's precision "auto" on
fp32 without timing, for tests that compare the page's numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Every Playwright wait, navigation included, may take this long before a test fails: on a busy 2-core machine
# (CI beside other work) a first page load took over Playwright's default 30 s. A hang still fails, later.
PAGE_TIMEOUT_MS = 180_000


def new_page(browser, width: int, height: int):
    """A page of ``width`` x ``height`` px whose every wait and navigation allows PAGE_TIMEOUT_MS."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    page.set_default_navigation_timeout(PAGE_TIMEOUT_MS)
    return page


def require_browser() -> None:
    """Skip the calling test module where Chromium or Playwright is missing on a developer's machine;
    under CI (CI=true) a missing browser fails instead."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("playwright") is None or not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests: install chromium and playwright (see .ci/run)", pytrace=False)
        pytest.skip("needs Debian's chromium and the playwright package", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    counts_file: Path

    def _lines(self) -> list[str]:
        return self.counts_file.read_text().splitlines() if self.counts_file.exists() else []

    def counts(self) -> dict[str, int]:
        """How often the server loaded a model and ran the ViT on an image."""
        lines = self._lines()
        return {name: lines.count(name) for name in ("model_loads", "forward_passes")}

    def script_runs(self) -> list[tuple[str, float]]:
        """Every script run so far: ("page" or "fragment", milliseconds of server time)."""
        runs = [line.split() for line in self._lines() if line.startswith("run ")]
        return [(kind, float(ms)) for _, kind, ms in runs]

    def store(self) -> dict[str, int]:
        """The memory budget's store (vitviz_dashboard/cache/budget.py) after the latest script run: bytes held, the
        peak so far, the limit, entries and evictions; and "max_held", the most held after any run."""
        lines = [line.split()[1:] for line in self._lines() if line.startswith("store ")]
        if not lines:
            return {}
        held, peak, limit, entries, evictions = map(int, lines[-1])
        return {
            "held": held,
            "peak": peak,
            "limit": limit,
            "entries": entries,
            "evictions": evictions,
            "max_held": max(int(line[0]) for line in lines),
        }

    def peak_memory_mb(self) -> float:
        """The server's peak resident memory (VmHWM) so far."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


@contextlib.contextmanager
def streamlit_server(folder: Path, env: dict[str, str] | None = None, start_timeout: float = 60):
    """Start app.py on a free loopback port; yield a Server; stop it afterwards."""
    port = free_port()
    counts_file = folder / "server_counts.txt"
    # No file watcher: by default Streamlit watches the checkout (recursively, .venv included) and, when a
    # source file changes, drops its modules from sys.modules; an edit to vitviz/ while a test ran then made
    # the sessions' concurrent re-imports fail (KeyError: 'vitviz_dashboard.cache.results' on every page).
    command = [
        sys.executable,
        __file__,
        "serve",
        str(counts_file),
        "--",
        str(ROOT / "app.py"),
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
    ]
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(
                        "streamlit did not start: " + (folder / "server.log").read_text(errors="replace")
                    ) from None
                time.sleep(0.5)
        yield Server(f"http://127.0.0.1:{port}", process, counts_file)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextlib.contextmanager
def index_server(folder: Path, model: Path | None = None, images: Path | None = None, **env: str):
    """``vitviz index`` of ``images`` by ``model`` into folder/index, then a ``streamlit_server`` that lists the
    models in ``folder``, shows no sample images and computes in fp32 (``env`` adds or overrides variables).
    By default the model is a tiny checkpoint at folder/model.pt and the images dataset_harness.make_images's."""
    from dataset_harness import make_images
    from tiny_models import tiny_checkpoint

    from vitviz.commands.index import main as index_command

    model = model or tiny_checkpoint(folder / "model.pt")
    images = images or make_images(folder / "images")
    assert index_command([str(images), "--model", str(model), "--out", str(folder / "index")]) == 0
    base = {"VITVIZ_SAMPLES": "", "VITVIZ_TEST_PRECISION": "fp32", "VITVIZ_MODEL_DIRS": str(folder)}
    with streamlit_server(folder, base | env) as running:
        yield running


def serve(counts_file: str, streamlit_args: list[str]) -> None:
    """The server process: count model loads and forward passes, then run streamlit in-process."""
    sys.path.insert(0, str(ROOT))  # run as a script from tests/: make vitviz importable
    from streamlit.web import cli

    import vitviz
    import vitviz.analysis

    lock = threading.Lock()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            with lock, open(counts_file, "a") as f:
                f.write(name + "\n")
            return function(*args, **kwargs)

        return wrapper

    # app.py imports these from the already-imported modules, so it gets the counting versions
    vitviz.load_model = counted("model_loads", vitviz.load_model)
    vitviz.analysis.analyse_image = counted("forward_passes", vitviz.analysis.analyse_image)
    fixed = os.environ.get("VITVIZ_TEST_PRECISION")
    if fixed:  # precision "auto" settled without timing: a busy machine cannot switch the page to bf16
        import math

        import vitviz_dashboard.cache.models
        from vitviz.model.precision import PrecisionChoice

        choice = PrecisionChoice(fixed, math.nan, math.nan, f"{fixed}, fixed by the tests")
        vitviz_dashboard.cache.models.measure_precision = lambda model: choice

    # the server time of every script run, whole page or one fragment (a tab)
    from streamlit.runtime.scriptrunner.script_runner import ScriptRunner

    run_script = ScriptRunner._run_script

    profile_folder = os.environ.get("VITVIZ_PROFILE_RUNS")  # a cProfile dump per run, for bench work

    def timed_run(self, rerun_data):
        start = time.perf_counter()
        profiler = None
        if profile_folder:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        try:
            return run_script(self, rerun_data)
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(f"{profile_folder}/run-{time.time_ns()}.prof")
            kind = "fragment" if rerun_data.fragment_id_queue else "page"
            from vitviz_dashboard.cache.budget import STORE

            held = STORE.stats()
            with lock, open(counts_file, "a") as f:
                f.write(f"run {kind} {1000 * (time.perf_counter() - start):.2f}\n")
                f.write(f"store {held['held']} {held['peak']} {held['limit']} {held['entries']} {held['evictions']}\n")

    ScriptRunner._run_script = timed_run
    sys.argv = ["streamlit", "run", *streamlit_args]
    cli.main()


IMAGE_SIZE = (96, 72)  # of the images the sessions upload


def session_image(session: int, index: int, size=IMAGE_SIZE) -> bytes:
    """A different PNG for every (session, index): coloured noise seeded by both."""
    pixels = np.random.default_rng(1000 * session + index).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class LoadReport:
    sessions: int
    seconds: float
    uploads: int = 0
    control_changes: int = 0
    problems: list[str] = field(default_factory=list)  # exceptions or error messages any page showed
    round_trip_s: list[float] = field(default_factory=list)  # upload until the page is idle again


# Streamlit marks its root element with the script's state; this records that a run started,
# so "the page is idle again" can be told apart from "the rerun has not begun yet".
_WATCH_RUNS = """() => {
    const app = document.querySelector("[data-testid='stApp']");
    window.__vitvizRunSeen = false;
    if (!window.__vitvizObserver) {
        // a short run may start and end before the callback: look at each change's old value too
        window.__vitvizObserver = new MutationObserver((records) => {
            for (const record of records) {
                if (record.oldValue === "running" || app.getAttribute("data-test-script-state") === "running") {
                    window.__vitvizRunSeen = true;
                }
            }
        });
        window.__vitvizObserver.observe(app, {attributes: true, attributeOldValue: true,
                                              attributeFilter: ["data-test-script-state"]});
    }
}"""
_RUN_FINISHED = """(done) => {
    const app = document.querySelector("[data-testid='stApp']");
    const idle = app.getAttribute("data-test-script-state") === "notRunning";
    // a busy browser may draw a whole short run in one frame, so the running state is never seen;
    // then what the run put on the page (done: a text only that run shows) is the evidence
    return idle && (window.__vitvizRunSeen || (done !== null && app.innerText.includes(done)));
}"""


_SHOWS = """(done) => document.querySelector("[data-testid='stApp']").getAttribute("data-test-script-state")
    === "notRunning" && document.querySelector("[data-testid='stApp']").innerText.includes(done)"""

# The page has heard that its last run finished. A widget's rerun request does not change this state
# until the run starts, so this means "no run under way" only where every earlier action waited for its
# own run to finish, as _act_and_wait and _upload do.
_IDLE = """() => document.querySelector("[data-testid='stApp']")?.getAttribute("data-test-script-state")
    === "notRunning" """

# The files the uploader lists, "(uploading)" after those whose upload has not finished (a spinner).
_UPLOADER_FILES = """() => Array.from(document.querySelectorAll("[data-testid='stFileChip']"), (chip) =>
    chip.innerText.split("\\n")[0]
    + (chip.querySelector("[data-testid='stFileChipIconSpinner']") ? " (uploading)" : ""))"""


async def _act_and_wait(page, action, timeout_ms: int, done: str | None = None, what: str = "action") -> None:
    """Do something that reruns the script, then wait until that run has finished.

    ``done``, a text only the finished run shows, is accepted as evidence of the run when the
    browser never showed the running state.

    Acts only once the page is idle: the run-seen flag cannot tell the action's run from a run already
    under way, so acting during one (the page's first run is often still going when its first texts
    show) would take the end of that earlier run for the action's run (see _upload).
    """
    await page.wait_for_function(_IDLE, timeout=timeout_ms)
    await page.evaluate(_WATCH_RUNS)
    await action()
    try:
        await page.wait_for_function(_RUN_FINISHED, arg=done, timeout=timeout_ms)
    except Exception as error:  # a session that breaks is a finding, not a crash of the run
        state = await page.evaluate("""() => [window.__vitvizRunSeen,
            document.querySelector("[data-testid='stApp']").getAttribute("data-test-script-state")]""")
        raise TimeoutError(f"no finished run after {what} (run seen, state: {state})") from error


async def _upload(page, path: Path, done: str, timeout_ms: int) -> None:
    """Hand a file to the page's uploader once the page is idle, then wait until the page shows ``done``
    (a text only the new image's run draws).

    Why idle first: test runs used to lose an upload under load (8 browsers on 2 cores; about one run in
    five, two in five in the traces behind this note), from two things together.
    - The driver took the end of an earlier run for the upload's run. It waited for "a run finished",
      and the page's first run was often still going when the driver saw the page's info text; so the
      wait ended before the upload's rerun had begun, and the next file went in while the previous
      file's rerun was starting.
    - Streamlit drops the upload URL of a file sent just as a run starts. The browser asks the server
      for a URL over the websocket (file_urls_request) and PUTs the file there only when the answer
      comes. On every SCRIPT_STARTED, AppSession clears the session's outgoing queue, keeping only
      lifecycle messages (ForwardMsgQueue.clear(retain_lifecycle_msgs=True)), so an answer not yet
      flushed to the browser is thrown away; the browser waits for it with no timeout, and the file
      is never uploaded nor seen by the script.
    Traces of the lost uploads: the server made the URL 0-30 ms before a run of the same session
    started, the browser never received it and never sent the PUT. A file sent while no run is under
    way, and a wait for that file's own run (its caption), lose nothing: 216 uploads in 9 runs, each
    sent once, all shown. So no file is sent again: an upload that is only slow (up to 40 s here) is
    waited for, and one that is lost fails the test.
    """
    await page.wait_for_function(_IDLE, timeout=timeout_ms)
    # timeout_ms, not Playwright's 30 s: with 8 busy tabs on 2 cores, handing over the file alone took 13 s
    await page.locator("input[type=file]").first.set_input_files(str(path), timeout=timeout_ms)
    try:
        await page.wait_for_function(_SHOWS, arg=done, timeout=timeout_ms)
    except Exception as error:
        files = await page.evaluate(_UPLOADER_FILES)
        raise TimeoutError(
            f"the page never showed {done!r} after uploading {path.name} (the uploader lists {files})"
        ) from error


async def _choose(page, label: str, option: str, attempts: int = 3) -> None:
    """Pick an option of a selectbox by clicks: open its list, click the option. No typing: with many
    browser tabs at once, keys typed into a tab without focus were sometimes lost and the list stayed
    unfiltered or closed. If the option does not show, close the list and try again."""
    box = page.get_by_role("combobox", name=label).first
    for attempt in range(attempts):
        await box.click()
        try:
            await page.get_by_role("option", name=option, exact=True).click(timeout=10_000)
            return
        except Exception:  # the list did not open in time: close it, try again
            if attempt == attempts - 1:
                raise
            await page.keyboard.press("Escape")


async def _problems(page) -> list[str]:
    """Exceptions and error messages on the page (info notes are not problems)."""
    texts = await page.locator("[data-testid='stException']").all_inner_texts()
    alerts = await page.locator("[data-testid='stAlertContent']").all_inner_texts()
    return texts + [t for t in alerts if re.search(r"could not|error|failed", t, re.IGNORECASE)]


async def _one_session(
    browser, url: str, index: int, deadline: float, report: LoadReport, folder: Path, images: int, timeout_ms: int
) -> None:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(max(timeout_ms, PAGE_TIMEOUT_MS))
    context.set_default_navigation_timeout(max(timeout_ms, PAGE_TIMEOUT_MS))
    page = await context.new_page()
    try:
        await page.goto(url, wait_until="domcontentloaded")
        await page.get_by_text("Upload one or more photos").wait_for(timeout=timeout_ms)
        upload = 0
        while time.monotonic() < deadline or upload < images:  # every image once, then until the deadline
            name = f"session{index}-image{upload % images}.png"
            path = folder / name
            path.write_bytes(session_image(index, upload % images))
            start = time.monotonic()
            # the rollout's caption names the image: the page drew the new image
            await _upload(page, path, f"{name}, {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]}", timeout_ms)
            report.round_trip_s.append(time.monotonic() - start)
            report.uploads += 1
            # control changes: the Image picker back to the previous image, then forward again
            if upload > 0:
                previous = f"session{index}-image{(upload - 1) % images}.png"
                for target in (previous, name):
                    await _act_and_wait(
                        page,
                        lambda target=target: _choose(page, "Image", target),
                        timeout_ms,
                        f"{target}, {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]}",
                        f"choosing {target}",
                    )
                    report.control_changes += 1
            report.problems += [f"session {index}: {text[:300]}" for text in await _problems(page)]
            upload += 1
    except Exception as error:
        report.problems.append(f"session {index}: {type(error).__name__}: {str(error)[:300]}")
    finally:
        await context.close()


def run_sessions(
    url: str, folder: Path, sessions: int = 8, seconds: float = 30, images: int = 6, timeout_ms: int = 120_000
) -> LoadReport:
    """`sessions` browser tabs, each uploading its `images` images in turn (after each, the Image picker
    goes back to the previous image and forward again), going on until `seconds` have passed."""
    from playwright.async_api import async_playwright

    report = LoadReport(sessions, seconds)

    async def main() -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            deadline = time.monotonic() + seconds
            await asyncio.gather(
                *(_one_session(browser, url, i, deadline, report, folder, images, timeout_ms) for i in range(sessions))
            )
            await browser.close()

    started = time.monotonic()
    asyncio.run(main())
    report.seconds = time.monotonic() - started
    return report


# --- one page, step by step (the sync API): tests/test_browser_layout.py and docs/make_screenshots.py ---------


# tab names that are not wholly inside the page (hidden behind a scroll arrow)
HIDDEN_TABS = """() => [...document.querySelectorAll('[role=tab]')].filter(t => {
    const r = t.getBoundingClientRect(), list = t.closest('[role=tablist]').getBoundingClientRect();
    return r.right > list.right + 1 || r.left < list.left - 1 || r.right > window.innerWidth;
}).map(t => t.innerText)"""


def wait_until_drawn(page, text: str) -> None:
    """Wait until the page shows ``text``, the script has finished and every image has loaded."""
    page.get_by_text(text).first.wait_for(timeout=120_000)
    # the script has finished (Streamlit shows its status widget while running), then images load
    page.wait_for_function("!document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
    page.wait_for_function("[...document.images].every(image => image.complete)", timeout=60_000)


def open_index(browser, url: str, index: Path, width: int = 1280, height: int = 900):
    """A new page of the Dataset page at ``url`` with the index folder ``index`` typed in and its table drawn."""
    page = new_page(browser, width, height)
    page.goto(f"{url}/dataset")
    field = page.get_by_role("textbox", name="Index folder")
    field.fill(str(index))
    field.press("Enter")
    wait_until_drawn(page, "25 images match")
    return page


def no_exception(page) -> None:
    """Fails, with the first one's text, where the page draws an exception."""
    errors = page.locator("[data-testid=stException]")
    assert errors.count() == 0, errors.first.inner_text()


def click_picture_shown(page, alt: str, exact: bool = False):
    """The picture of widgets.click_picture with this alt text, once it is drawn and its image has loaded (it lives
    in a component's shadow root, which document.images does not list): (its locator, its bounding box)."""
    picture = page.get_by_alt_text(alt, exact=exact)
    picture.wait_for(timeout=90_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('*')].some(e => e.shadowRoot && "
        "[...e.shadowRoot.querySelectorAll('img')].some(i => i.complete && i.width > 0))"
    )
    return picture, picture.bounding_box()


def wait_until_idle(page, timeout_ms: int = 120_000) -> None:
    """Wait until no script run is under way (Streamlit's status widget gone, the app marked not running)."""
    page.wait_for_function("!document.querySelector('[data-testid=stStatusWidget]')", timeout=timeout_ms)
    page.wait_for_function(_IDLE, timeout=timeout_ms)


def eventually(check, timeout_s: float = 60, what: str = "a condition") -> None:
    """Poll ``check()`` until it is true: for what the browser does in its own time (a relayout after a resize), so a
    busy machine waits longer instead of failing."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout_s} s")
        time.sleep(0.2)


def choose(page, label: str, option: str, attempts: int = 3) -> None:
    """Pick an option of a selectbox by clicks; a list that did not open in time is closed and opened again
    (as _choose does for the many-session runs)."""
    for attempt in range(attempts):
        page.get_by_role("combobox", name=label).first.click()
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=10_000)
            return
        except Exception:  # the list did not open in time
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "serve" or sys.argv[3] != "--":
        raise SystemExit("usage: python tests/browser_harness.py serve COUNTS_FILE -- APP [streamlit options]")
    serve(sys.argv[2], sys.argv[4:])
