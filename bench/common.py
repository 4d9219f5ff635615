"""What every benchmark script shares: its --out, timing (alone or interleaved), and writing the results."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser showing the script's docstring, with --out already added."""
    result = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--out", type=Path, help="write the results here as JSON")
    return result


def save(results: dict, out: Path | None) -> None:
    """Write the results as indented JSON to `out` (its folder created), when one was given."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))


def median_seconds(work, repeats: int) -> float:
    """The median wall time of ``work()`` over ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The median wall time of each contender, in seconds: each called once to warm up (allocator, kernels), then
    ``repeats`` rounds calling each in turn, so a change in the machine's load falls on all of them alike."""
    for work in contenders.values():
        work()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, work in contenders.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def batch_timings(batch: int, repeats: int, medians: dict[str, float]) -> dict:
    """The record of interleaved timings of one batch size, with the torch version and threads they were run with."""
    return {
        "batch": batch,
        "repeats": repeats,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "median_s": medians,
    }
