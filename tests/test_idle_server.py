"""The README's server is quiet at idle (issue 44, item 1): Streamlit's file watcher is off wherever it starts.

With the watcher on, `streamlit run app.py` watches the app's folder recursively, the README's .venv included (about
6,300 folders), and its inotify queue overflows without end: 0.54 of a core at idle (bench/bench_idle.py measures
it; its table is in bench/README.md). The test reads the setting as Streamlit itself resolves it, not the file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vitviz.commands.app import streamlit_flags

ROOT = Path(__file__).resolve().parent.parent
READ_OPTION = (
    "from streamlit import config; config.get_config_options(force_reparse=True); "
    "print(config.get_option('server.fileWatcherType'))"
)


def test_the_readmes_command_reads_the_watcher_off():
    """`streamlit run app.py` from the checkout reads .streamlit/config.toml from its working directory."""
    result = subprocess.run(
        [sys.executable, "-c", READ_OPTION], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "none"


def test_vitviz_app_passes_the_watcher_off():
    assert "--server.fileWatcherType=none" in streamlit_flags()
