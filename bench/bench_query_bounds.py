"""The issue's four hostile SQL queries on a 40-image index, with the default query limits (20 s, 1024 MB) or the
ones given: wall time, what stopped each, the calling process's peak resident memory and the query process's.

Builds (or reuses, with --index) an index of generated 32x32 images with the shipped default model (the same
`build` as bench_dataset_page.py), then runs each query in a fresh Python process of its own, as a server would
(`vitviz.open_index(DIR).query(sql)`): one warm-up query starts the query process, then the hostile one is timed, and
the process's VmHWM (from /proc/self/status) is read before and after it. Each query process's own peak is
vitviz.dataset.sandbox.peak_mb().

    python bench/bench_query_bounds.py --out bench/results/query_bounds.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [  # the corpus, with what it measured before the bounds (DatasetIndex.query, 2 cores, 23 GB)
    ("SELECT list(range) FROM range(3000000000)", "19.4 GB before DuckDB gave up"),
    ("SELECT repeat('x', 1500000000)", "10.5 GB"),
    ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t", "killed at 90 s"),
    ("SELECT count(*) FROM range(1000000000000)", "78 s, no way to stop it"),
]


def high_water_mb() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def one_case(index: str, sql: str, seconds: float | None, memory: int | None) -> dict:
    """In this (fresh) process: open the index, warm up, run ``sql``; what happened."""
    import vitviz
    from vitviz.dataset import QueryStopped, sandbox

    opened = vitviz.open_index(index, query_seconds=seconds, query_memory=memory)
    opened.query("SELECT count(*) AS n FROM images")
    before = high_water_mb()
    start = time.perf_counter()
    try:
        opened.query(sql)
        outcome = "finished"
    except QueryStopped as stopped:
        outcome = str(stopped)
    wall = time.perf_counter() - start
    return {
        "sql": sql,
        "seconds": wall,
        "outcome": outcome,
        "caller_peak_before_mb": before,
        "caller_peak_mb": high_water_mb(),
        "query_process_peak_mb": sandbox.peak_mb(),
        "limits": [opened.limits.seconds, opened.limits.memory_mb],
    }


def build_index(workdir: Path) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_dataset_page import build  # the same generated images and default model

    return build(workdir, 40, 8)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", help="an index folder to reuse (default: build a 40-image one in a temp folder)")
    parser.add_argument("--seconds", type=float, help="query time limit (default: the server setting, else 20)")
    parser.add_argument("--memory", type=int, help="query memory limit in MB (default: the setting, else 1024)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one query in this process
    args = parser.parse_args()
    if args.case:
        print(json.dumps(one_case(args.index, args.case, args.seconds, args.memory)))
        return
    with tempfile.TemporaryDirectory() as work:
        index = args.index or str(build_index(Path(work)))
        rows = []
        for sql, before in QUERIES:
            command = [sys.executable, __file__, "--index", index, "--case", sql]
            command += ["--seconds", str(args.seconds)] if args.seconds else []
            command += ["--memory", str(args.memory)] if args.memory else []
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]) | {"before_bounds": before})
    print("| query | before the bounds | wall s | stopped by | caller peak MB (before it) | query process peak MB |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    for row in rows:
        stopped = row["outcome"].split(";")[0].removeprefix("the query was stopped by the ")
        print(
            f"| `{row['sql']}` | {row['before_bounds']} | {row['seconds']:.1f} | {stopped} | "
            f"{row['caller_peak_mb']:.0f} ({row['caller_peak_before_mb']:.0f}) | {row['query_process_peak_mb']:.0f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
