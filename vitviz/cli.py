"""The `vitviz` command: one entry point for the dashboard and the command-line tools.

    vitviz app [streamlit options]     start the dashboard (`streamlit run` on the installed page)
    vitviz explain IMAGES... [options] batch explanations (same as `python -m vitviz.explain`)
    vitviz train [options]             train a ViT (`python -m vitviz.train`)
    vitviz evaluate MODEL [options]    accuracy, per-class accuracy, confusion matrix (`python -m vitviz.evaluate`)
    vitviz benchmark [options]         faithfulness of the explanation methods over a data set
    vitviz index SOURCE --out DIR      index a whole dataset once (docs/dataset-index.md)
    vitviz sae train [options]         train a sparse autoencoder on one block's activations

`vitviz <command> --help` shows each command's options. `python -m vitviz` is the same command.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

# command -> (module whose main(argv) runs it, one-line summary)
COMMANDS = {
    "app": ("", "start the dashboard in the browser (extra options go to `streamlit run`)"),
    "explain": ("vitviz.explain_cli", "explanation maps, overlays and predictions for a folder of images"),
    "train": ("vitviz.train", "train a ViT on CIFAR-10, MNIST or an image folder"),
    "evaluate": ("vitviz.evaluate", "top-1, per-class accuracy and confusion matrix on a labelled folder"),
    "benchmark": ("vitviz.benchmark", "faithfulness of the explanation methods over a labelled image folder"),
    "index": ("vitviz.dataset.command", "index a dataset once (Parquet, arrays, FAISS), then query it: open_index"),
    "sae": ("vitviz.sae.command", "sparse autoencoders on a block's activations: vitviz sae train (see --help)"),
}


def app_path() -> Path:
    """The dashboard's page, wherever the package is installed (it ships with vitviz)."""
    import vitviz_dashboard

    return Path(vitviz_dashboard.__file__).resolve().parent / "app.py"


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


def usage() -> str:
    lines = ["usage: vitviz <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "`vitviz <command> --help` shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"vitviz: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if command == "app":
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
    module = importlib.import_module(COMMANDS[command][0])
    result = module.main(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
