"""What every benchmark script shares: its command line's --out, and writing the results there."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


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
