"""Training curves: loss and top-1 per epoch from a run's metrics.jsonl.

    python -m vitviz.render.curves runs/cifar10/metrics.jsonl              # writes runs/cifar10/curves.png
    python -m vitviz.render.curves runs/cifar10/metrics.jsonl -o curves.png

Training (`python -m vitviz train`) redraws curves.png in its --out folder after every epoch;
this redraws it from an existing metrics.jsonl, e.g. of a run trained before curves existed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

# the metrics each epoch record of metrics.jsonl must hold for the curves, besides "epoch"
PLOTTED = ("train_loss", "val_loss", "train_top1", "val_top1")


def read_history(path: Path) -> list[dict]:
    """The epoch records of a metrics.jsonl, in epoch order, one per epoch.

    train.py appends one line per epoch. A line whose epoch is not after the previous line's (a run
    resumed from an earlier last.pt than its last line, or a new run into the same folder) replaces
    the records from that epoch on, so the history is that of the latest run.
    Raises OSError when the file cannot be read, ValueError (naming the line) when a line is not an
    epoch record.
    """
    history: list[dict] = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not JSON ({error})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: not an epoch record (a JSON object)")
        missing = [key for key in ("epoch", *PLOTTED) if not _is_number(record.get(key))]
        if missing:
            raise ValueError(f"{path}, line {number}: not an epoch record (no number for {', '.join(missing)})")
        history = [earlier for earlier in history if earlier["epoch"] < record["epoch"]] + [record]
    return history


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot_curves(history: Sequence[Mapping[str, float]], path: Path) -> None:
    """Draw loss and top-1 per epoch, training and validation, as a PNG at path.

    history holds epoch records as metrics.jsonl does (epoch, train_loss, val_loss, train_top1,
    val_top1). The file is written atomically (to a temporary name, then replaced), so a reader never
    sees half an image. Uses matplotlib's Agg canvas directly: no pyplot, no global backend change.
    """
    if not history:
        raise ValueError("no epochs to plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    epochs = [record["epoch"] for record in history]
    marker = "o" if len(epochs) <= 30 else None  # a single epoch still shows as a point
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, top1_axes = figure.subplots(1, 2)
    for axes, metric, label in ((loss_axes, "loss", "loss"), (top1_axes, "top1", "top-1 accuracy")):
        for split, name in (("train", "training"), ("val", "validation")):
            axes.plot(
                epochs, [record[f"{split}_{metric}"] for record in history], marker=marker, markersize=3, label=name
            )
        axes.set(xlabel="epoch", ylabel=label, title=f"{label} per epoch")
        axes.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)  # whole epochs, even for a single one
        axes.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        axes.grid(alpha=0.3)
        axes.legend()
    top1_axes.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    figure.savefig(tmp, format="png", dpi=100)
    tmp.replace(path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vitviz.render.curves", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("metrics", type=Path, help="a training run's metrics.jsonl")
    p.add_argument("-o", "--out", type=Path, help="PNG to write (default: curves.png next to the metrics file)")
    return p


def main(argv: list[str] | None = None) -> Path:
    args = build_parser().parse_args(argv)
    if not args.metrics.is_file():
        raise SystemExit(f"error: {args.metrics} is not a file (expected a training run's metrics.jsonl)")
    try:
        history = read_history(args.metrics)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    if not history:
        raise SystemExit(f"error: {args.metrics} has no epoch records")
    out = args.out or args.metrics.with_name("curves.png")
    try:
        plot_curves(history, out)
    except OSError as error:
        raise SystemExit(f"error: could not write {out}: {error}") from None
    print(f"wrote {out} ({len(history)} epochs)")
    return out


if __name__ == "__main__":
    main()
