"""The `vitviz` command: one entry point for the dashboard and the command-line tools.

    vitviz app [streamlit options]     start the dashboard (`streamlit run` on the installed page)
    vitviz explain IMAGES... [options] batch explanations
    vitviz ask IMAGES... [options]     ask a vision-language model, and where its answer looks
    vitviz train [options]             train a ViT
    vitviz evaluate MODEL [options]    accuracy, per-class accuracy, confusion matrix
    vitviz benchmark [options]         faithfulness of the explanation methods over a data set
    vitviz index SOURCE --out DIR      index a whole dataset once (docs/dataset-index.md)
    vitviz sae train [options]         train a sparse autoencoder on one block's activations
    vitviz sae evaluate INDEX SAE...   one table of SAE metrics on an index's held-out images

`vitviz <command> --help` shows each command's options. `python -m vitviz` is the same command. Each command is a
module with a ``main(argv)``: vitviz/commands/<command>.py.
"""

from __future__ import annotations

import importlib
import sys

# command -> (module whose main(argv) runs it, one-line summary)
COMMANDS = {
    "app": ("vitviz.commands.app", "start the dashboard in the browser (extra options go to `streamlit run`)"),
    "explain": ("vitviz.commands.explain", "explanation maps, overlays and predictions for a folder of images"),
    "ask": ("vitviz.commands.ask", "ask a vision-language model about photos: its answer's attention over each photo"),
    "train": ("vitviz.commands.train", "train a ViT on CIFAR-10, MNIST or an image folder"),
    "evaluate": ("vitviz.commands.evaluate", "top-1, per-class accuracy and confusion matrix on a labelled folder"),
    "benchmark": ("vitviz.commands.benchmark", "faithfulness of the explanation methods over a labelled image folder"),
    "index": ("vitviz.commands.index", "index a dataset once (Parquet, arrays, FAISS), then query it: open_index"),
    "sae": ("vitviz.commands.sae", "sparse autoencoders on a block's activations: train, evaluate, latents, ablate"),
}


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
    module = importlib.import_module(COMMANDS[command][0])
    result = module.main(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
