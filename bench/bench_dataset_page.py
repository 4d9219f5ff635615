"""The Dataset page on a 10,000-image index: server time to open it and show the table, and the memory it adds.

Builds (or reuses, with --index) an index of generated 32x32 images in ten class folders with the shipped default
model (`vitviz.load_model("default")`, the command's code: `build_index`), then, in a fresh Python process, runs the
app under Streamlit's AppTest (the page's script in this process, as the server runs it; AppTest's own protobuf
handling is included in the times):

1. the Photo page, then the Dataset page with no folder typed: the baseline (the app's imports, the default model);
2. the index's folder typed in: the first run (opening the index cold: manifest, Parquet tables, DuckDB views, the
   table's queries) timed on its own, with the process's resident memory (VmRSS, VmHWM from /proc/self/status)
   before and after;
3. --repeats cold opens (the cached index dropped before each: st.cache_resource and st.cache_data cleared) and
   --repeats warm reruns of the table (the index cached, as in a session's later clicks): medians.

    python bench/bench_dataset_page.py --out bench/results/dataset_page.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # bench/common.py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def memory_kb() -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in KiB, from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def make_images(folder: Path, count: int) -> None:
    """``count`` 32x32 PNGs in ten class folders: noise around a colour per class, so predictions vary."""
    from PIL import Image

    rng = np.random.default_rng(0)
    tints = rng.integers(40, 216, (len(CLASSES), 3))
    for i in range(count):
        label = CLASSES[i % len(CLASSES)]
        (folder / label).mkdir(parents=True, exist_ok=True)
        pixels = np.clip(tints[i % len(CLASSES)] + rng.normal(0, 40, (32, 32, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / label / f"{i:05d}.png")


def build(workdir: Path, count: int, batch: int) -> tuple[Path, float]:
    """The index of ``count`` generated images under ``workdir`` and the seconds its pass took."""
    import vitviz
    from vitviz.dataset.build import build_index
    from vitviz.dataset.indexing import IndexOptions
    from vitviz.dataset.sources import open_source

    images, out = workdir / "images", workdir / "index"
    if not images.is_dir():
        make_images(images, count)
    start = time.perf_counter()
    build_index(vitviz.load_model("default"), open_source(images), out, IndexOptions(), "default", batch)
    return out, time.perf_counter() - start


def measure(index: Path, repeats: int) -> dict:
    """Run in a fresh process: the page's timings and memory (see the module's docstring)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from vitviz_dashboard.state import DATASET_FOLDER

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()  # the Photo page: imports the app and loads the default model
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "dataset")
    at.run()
    at.run()
    before = memory_kb()

    def shown() -> None:
        assert not at.exception, at.exception
        captions = [c.value for c in at.caption]
        assert any(c.startswith(f"**{count:,} images**") for c in captions), captions
        assert at.dataframe, "no table"

    from vitviz.dataset import open_index

    count = open_index(index).count
    at.sidebar.text_input(key=str(DATASET_FOLDER)).set_value(str(index))
    start = time.perf_counter()
    at.run()
    first = time.perf_counter() - start
    shown()
    after = memory_kb()
    cold, warm = [], []
    for _ in range(repeats):
        st.cache_resource.clear()
        st.cache_data.clear()
        start = time.perf_counter()
        at.run()
        cold.append(time.perf_counter() - start)
        shown()
    for _ in range(repeats):
        start = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - start)
        shown()
    end = memory_kb()
    return {
        "images": count,
        "first_open_s": first,
        "cold_open_s": cold,
        "cold_open_median_s": statistics.median(cold),
        "warm_rerun_s": warm,
        "warm_rerun_median_s": statistics.median(warm),
        "rss_before_mb": before["VmRSS"] / 1024,
        "rss_after_first_open_mb": after["VmRSS"] / 1024,
        "rss_added_by_first_open_mb": (after["VmRSS"] - before["VmRSS"]) / 1024,
        "peak_added_by_first_open_mb": (after["VmHWM"] - before["VmRSS"]) / 1024,
        "rss_added_after_all_runs_mb": (end["VmRSS"] - before["VmRSS"]) / 1024,
        "peak_before_mb": before["VmHWM"] / 1024,
        "peak_after_all_runs_mb": end["VmHWM"] / 1024,
    }


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--index", type=Path, help="an index to reuse (else one is built under --workdir)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "vitviz-bench-dataset-page")
    parser.add_argument("--images", type=int, default=10_000, help="images to generate and index (default: 10,000)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="cold opens and warm reruns, each (default: 5)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the fresh process: print the figures for the parent
        print(json.dumps(measure(args.measure, args.repeats)))
        return
    results: dict = {"load_average_start": os.getloadavg()}
    index = args.index
    if index is None:
        index = args.workdir / "index"
        if not (index / "manifest.json").is_file():
            args.workdir.mkdir(parents=True, exist_ok=True)
            index, seconds = build(args.workdir, args.images, args.batch_size)
            results["build_s"] = seconds
    index = index.resolve()
    env = os.environ | {
        "VITVIZ_MODEL_DIRS": str(index.parent),
        "VITVIZ_SAMPLES": "",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(index), "--repeats", str(args.repeats)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if child.returncode:
        raise SystemExit(f"the measuring process failed:\n{child.stderr[-4000:]}")
    results |= json.loads(child.stdout.strip().splitlines()[-1])
    results["index"] = str(index)
    results["load_average_end"] = os.getloadavg()
    print(json.dumps(results, indent=1))
    common.save(results, args.out)


if __name__ == "__main__":
    main()
