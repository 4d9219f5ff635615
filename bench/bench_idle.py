"""The server's CPU use at idle, with the README's set-up (.venv inside the app's folder).

Starts `streamlit run app.py` from the repository root exactly as the README does (so Streamlit reads
.streamlit/config.toml), once per variant, opens one page in headless Chromium and leaves it idle, then counts the
server's CPU ticks (user + system, /proc/PID/stat, the server and its children) over --seconds, and the
"Inotify queue overflowed" lines it logged meanwhile. The variants differ only in the file watcher:

- `readme`: no flag, the project's config as the README's command reads it;
- `watcher auto`: `--server.fileWatcherType auto`, Streamlit's own default, as before the project config set it.

Each variant runs alone (one server at a time), in turn, --rounds times; the medians are reported. Linux only.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import parser, save

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"readme": [], "watcher auto": ["--server.fileWatcherType", "auto"]}
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ticks(pid: int) -> int:
    """CPU ticks (user + system) of ``pid`` and of its children that it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime (fields 14-17)


def measure(flags: list[str], seconds: float, log_path: Path) -> dict:
    """One server with ``flags``, one idle Chromium page: its CPU ticks and overflow lines over ``seconds``."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), *flags]
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("streamlit did not start: " + log_path.read_text(errors="replace")) from None
                time.sleep(0.5)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("[data-testid='stApp']", timeout=120_000)
            time.sleep(15)  # the first run's work (the model, the example photos) ends before the count starts
            lines_before = log_path.read_text(errors="replace").count("Inotify queue overflowed")
            start = ticks(server.pid)
            time.sleep(seconds)
            used = ticks(server.pid) - start
            overflows = log_path.read_text(errors="replace").count("Inotify queue overflowed") - lines_before
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    hz = os.sysconf("SC_CLK_TCK")
    return {"ticks": used, "cores": used / hz / seconds, "overflow_lines": overflows}


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--seconds", type=float, default=30.0, help="idle time measured per server")
    args.add_argument("--rounds", type=int, default=3, help="servers started per variant, in turn")
    options = args.parse_args()
    venv_folders = sum(1 for _ in (ROOT / ".venv").rglob("*") if _.is_dir()) if (ROOT / ".venv").is_dir() else 0
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(options.rounds):
            for name, flags in VARIANTS.items():
                runs[name].append(measure(flags, options.seconds, Path(folder) / "server.log"))
    results = {
        "seconds": options.seconds,
        "rounds": options.rounds,
        "venv_folders": venv_folders,
        "clock_ticks_per_s": os.sysconf("SC_CLK_TCK"),
        "median": {
            name: {key: statistics.median(run[key] for run in got) for key in ("ticks", "cores", "overflow_lines")}
            for name, got in runs.items()
        },
        "runs": runs,
    }
    print(f"{options.seconds:.0f} s idle, one Chromium page, .venv with {venv_folders:,} folders in the app's folder")
    for name, median in results["median"].items():
        print(
            f"{name:>14}: {median['ticks']:>6.0f} ticks ({median['cores']:.3f} cores), "
            f"{median['overflow_lines']:.0f} inotify overflow lines"
        )
    save(results, options.out)


if __name__ == "__main__":
    main()
