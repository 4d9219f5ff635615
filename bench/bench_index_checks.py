"""What the checks of an index folder cost when it is opened (`vitviz.open_index`, issue 36): open time before and
after them, on a synthetic 10,000-image index of ViT-B/16's layout.

The index is written in the format `vitviz index` writes (manifest, shards of images.parquet and heads.parquet,
rollout, readout, embedding and features arrays, both search files), but the arrays and search files are sparse:
their .npy headers and sizes are a real index's (features 10,000 x 14 x 14 x 768 fp16: 2.9 GB), their data zeros
that take no disk. Opening reads headers, footers and the manifest only, so its cost is a real index's.

"Before" is vitviz as it was before the checks (``--before``, a commit: its vitviz/ is exported with `git archive`
into a temporary folder and put first on PYTHONPATH); "after" is this checkout. Each round runs one process per
version, alternately, each timing --repeats opens after one warm-up (the files in the page cache, as on a server
that opens an index again): medians over every round's opens, of the wall-clock time and of the process's CPU time
(user and system: on a busy shared machine the wall clock also counts the time other processes held the cores).

    .venv/bin/python bench/bench_index_checks.py --out bench/results/index_checks.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

TIMER = """
import json, sys, time
import vitviz.dataset.index
from vitviz.dataset import open_index
folder, repeats = sys.argv[1], int(sys.argv[2])
open_index(folder)  # warm-up: imports, the page cache
times = []
for _ in range(repeats):
    started, cpu = time.perf_counter(), time.process_time()
    open_index(folder)
    times.append((time.perf_counter() - started, time.process_time() - cpu))
print(json.dumps({"times": times, "module": vitviz.dataset.index.__file__}))
"""


def sparse_array(path: Path, shape: tuple[int, ...], dtype: str) -> int:
    """A .npy file with a real header for ``shape`` and zeros for data (sparse: no disk). Returns its size."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
        size = f.tell() + int(np.prod(shape)) * np.dtype(dtype).itemsize
        f.truncate(size)
    return size


def synthetic_index(folder: Path, images: int, shard_size: int) -> Path:
    """A ViT-B/16 index of ``images`` images (224 px, 14 x 14 patches, 12 heads, 768 wide, features stored)."""
    from vitviz.dataset.indexing import IndexOptions
    from vitviz.model import ViTConfig

    config = ViTConfig(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, num_classes=10)
    rows = cols = 14
    shards = []
    for index, start in enumerate(range(0, images, shard_size)):
        count = min(shard_size, images - start)
        base = folder / "shards" / f"{index:06d}"
        base.mkdir(parents=True)
        ids = pa.array(np.arange(start, start + count, dtype=np.int64))
        pq.write_table(
            pa.table({"image_id": ids, "path": pa.array([f"{i}.png" for i in range(count)])}), base / "images.parquet"
        )
        pq.write_table(pa.table({"image_id": ids}), base / "heads.parquet")
        sizes = {name: (base / name).stat().st_size for name in ("images.parquet", "heads.parquet")}
        for name, shape, dtype in (
            ("rollout", (count, rows, cols), "<f2"),
            ("readout", (count, 12, rows, cols), "<f2"),
            ("embedding", (count, 768), "<f4"),
            ("features", (count, rows, cols, 768), "<f2"),
        ):
            sizes[f"{name}.npy"] = sparse_array(base / f"{name}.npy", shape, dtype)
        files = {name: {"sha256": "0" * 64, "bytes": size} for name, size in sorted(sizes.items())}
        shards.append({"name": base.name, "start": start, "count": count, "files": files})
    (folder / "search").mkdir()
    for kind in ("patches", "images"):
        with open(folder / "search" / f"{kind}.faiss", "wb") as f:
            f.truncate(1 << 20)
    options = IndexOptions(shard_size=shard_size).to_dict()
    manifest = {
        "format": "vitviz-index",
        "format_version": 1,
        "vitviz_version": "bench",
        "model": {"spec": "bench", "fingerprint": "0" * 64, "class_names": [str(i) for i in range(10)]}
        | {"config": json.loads(json.dumps(asdict(config)))},
        "options": options,
        "source": {"description": "synthetic"},
        "layout": {
            "grid": [rows, cols],
            "input_size": [224, 224],
            "patch_size": 16,
            "layers": 12,
            "heads": 12,
            "prefix_tokens": ["cls"],
            "shard_size": shard_size,
        },
        "grid": [rows, cols],
        "complete": True,
        "shards": shards,
        "count": images,
        "search": {
            "patches": {"kind": "exact", "vectors": images * rows * cols, "file": "search/patches.faiss"}
            | {"dimension": 768},
            "images": {"kind": "exact", "vectors": images, "file": "search/images.faiss", "dimension": 768},
        },
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return folder


def export(commit: str, into: Path) -> Path:
    """vitviz/ as it was at ``commit``, in ``into``."""
    archive = subprocess.run(["git", "archive", commit, "vitviz"], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def opens(tree: Path, folder: Path, repeats: int) -> list[float]:
    env = os.environ | {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", TIMER, str(folder), str(repeats)], env=env, cwd=tree, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"opening with {tree} failed:\n{result.stderr[-2000:]}")
    answer = json.loads(result.stdout)
    if not answer["module"].startswith(str(tree)):  # the version asked for, not the installed one
        raise SystemExit(f"{tree} was not imported: {answer['module']}")
    return answer["times"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--shard-sizes", type=int, nargs="+", default=[1024, 64], help="one index per shard size")
    parser.add_argument("--before", default="3fa0770^", help="the commit before the checks (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="opens per round and version")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as temporary:
        before = export(args.before, Path(temporary) / "before")
        for shard_size in args.shard_sizes:
            folder = synthetic_index(Path(temporary) / f"index-{shard_size}", args.images, shard_size)
            times: dict[str, list[list[float]]] = {"before": [], "after": []}
            for _ in range(args.rounds):
                times["before"] += opens(before, folder, args.repeats)
                times["after"] += opens(ROOT, folder, args.repeats)
            shards = -(-args.images // shard_size)
            row = {
                "images": args.images,
                "shard_size": shard_size,
                "shards": shards,
                "manifest_bytes": (folder / "manifest.json").stat().st_size,
                "opens": len(times["after"]),
            }
            for clock, column in (("wall", 0), ("cpu", 1)):
                for name, values in times.items():
                    row[f"{name}_{clock}_ms"] = 1000 * statistics.median(value[column] for value in values)
                row[f"added_{clock}_ms"] = row[f"after_{clock}_ms"] - row[f"before_{clock}_ms"]
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
