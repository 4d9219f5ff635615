"""`vitviz app`: the dashboard in the browser, `streamlit run` on the installed page with its settings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def app_path() -> Path:
    """The dashboard's page, wherever the package is installed (it ships with vitviz). Found, not imported: the
    library never imports the dashboard, and the server imports it in its own process."""
    return Path(importlib.util.find_spec("vitviz_dashboard").origin).resolve().parent / "app.py"


def streamlit_flags() -> list[str]:
    """The dashboard's Streamlit settings (vitviz_dashboard/streamlit_config.toml) as `streamlit run` flags.

    Streamlit reads .streamlit/config.toml only from the working directory and the home folder, so an
    installed dashboard started elsewhere would lose them (the 50 MB upload limit among them).
    """
    import tomllib

    with open(app_path().with_name("streamlit_config.toml"), "rb") as f:
        config = tomllib.load(f)
    flags = []
    for section, items in config.items():
        for key, value in items.items():
            flags.append(f"--{section}.{key}={str(value).lower() if isinstance(value, bool) else value}")
    return flags


def main(argv: list[str] | None = None) -> int:
    rest = sys.argv[1:] if argv is None else argv
    if rest[:1] in (["-h"], ["--help"]):
        print(
            "usage: vitviz app [streamlit options], e.g. `vitviz app --server.port 8502`;\n"
            "it runs `streamlit run` on the dashboard; `streamlit run --help` lists the options"
        )
        return 0
    # a child process, exactly as `streamlit run` would start it
    # the user's flags come last, so they override the dashboard's settings
    command = [sys.executable, "-m", "streamlit", "run", str(app_path()), *streamlit_flags(), *rest]
    if os.name == "posix":  # the server replaces this process, so Ctrl-C and `kill` reach it directly
        os.execv(sys.executable, command)
    server = subprocess.Popen(command)
    try:
        return server.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches the server too; let it shut down, without a traceback here
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
