"""What `vitviz index` costs: throughput against a plain forward pass, torchrun scale, search, and disk.

Runs on the real CIFAR-10 test set (unzip ../shared/data/cifar10/cifar10_test.zip to /tmp/cifar10; the search part
also takes training images from cifar10_train.zip) with the shipped default model, side by side in one run:

1. indexing: images per second of `build_index` (read, decode, preprocess, the pass, Parquet and .npy shards,
   the FAISS indexes at the end) against the plain forward pass over the same images (read, decode, preprocess,
   `model(x)`), same model, batch and precision; interleaved repeats, medians;
2. scale: `torchrun --nproc-per-node 2` (one thread each) against one process with one thread: the pass (as each
   process prints it) and the whole command;
3. search: the patch index over 1,000,000 real patch vectors (the default model's block-0 patch tokens of 15,625
   CIFAR-10 images, test then train: one block per image, since running 16,000 images through the whole pass did
   not fit on the busy 2-core machine; the search code is the same), per query, and recall@10 against exact search
   on 200 queries;
4. disk: bytes per image with and without patch features, measured here and for ViT-B/16 at 224 (random weights,
   a few images, and computed from the shapes).

    python bench/bench_index.py --out bench/results/index.json
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # bench/common.py
import numpy as np
import torch

import vitviz
from vitviz.dataset.build import build_index
from vitviz.dataset.indexing import IndexOptions
from vitviz.dataset.search import exact_neighbours, normalised, recall_at
from vitviz.dataset.sources import open_source
from vitviz.preprocessing import load_image

ROOT = Path(__file__).resolve().parents[1]


def plain_forward(model, source, limit: int, batch: int) -> float:
    """Seconds to read, decode, preprocess and classify ``limit`` images, ``batch`` at a time."""
    entries = [e for _, e in zip(range(limit), source)]
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(entries), batch):
            pixels = torch.stack([model.transform(load_image(e.read())) for e in entries[i : i + batch]])
            model(pixels)
    return time.perf_counter() - start


def indexing(model, source, limit: int, batch: int, features: bool, folder: Path) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    build_index(model, source, folder, IndexOptions(features=features, limit=limit), "default", batch)
    return time.perf_counter() - start


def throughput(images: Path, limit: int, batch: int, repeats: int, work: Path, model_name: str = "default") -> dict:
    model = vitviz.load_model("default") if model_name == "default" else vitviz.load_model(vit_b16_checkpoint(work))
    source = open_source(images)
    times = {"plain forward": [], "index (default set)": [], "index without patch features": []}
    for _ in range(repeats):  # interleaved, so machine noise hits each alike
        times["plain forward"].append(plain_forward(model, source, limit, batch))
        times["index (default set)"].append(indexing(model, source, limit, batch, True, work / "t1"))
        times["index without patch features"].append(indexing(model, source, limit, batch, False, work / "t2"))
    rates = {name: limit / statistics.median(t) for name, t in times.items()}
    return {
        "model": model_name,
        "images": limit,
        "batch": batch,
        "precision": "fp32",
        "threads": torch.get_num_threads(),
        "images_per_s": rates,
        "seconds": times,
        "ratio_index_to_forward": rates["index (default set)"] / rates["plain forward"],
        "ratio_no_features_to_forward": rates["index without patch features"] / rates["plain forward"],
    }


PASS_LINE = re.compile(r"^indexing(?: \(process \d+ of \d+\))?: (\d+) images in ([0-9.]+) s", re.MULTILINE)


def command(images: Path, out: Path, limit: int, processes: int, shard_size: int) -> tuple[float, float]:
    """Seconds of the whole command, and of the pass: the longest of the processes' own passes, as each prints it
    (from its first image to its last, without start-up and without the search indexes built at the end)."""
    shutil.rmtree(out, ignore_errors=True)
    runner = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"] if processes > 1 else []
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, *runner, "-m", "vitviz", "index", str(images), "--model", "default", "--out", str(out)]
        + ["--limit", str(limit), "--shard-size", str(shard_size)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    whole = time.perf_counter() - start
    passes = [(int(n), float(t)) for n, t in PASS_LINE.findall(finished.stderr)]
    if len(passes) != processes or sum(n for n, _ in passes) != limit:
        raise RuntimeError(f"expected {processes} pass lines covering {limit} images; got {passes}")
    return whole, max(t for _, t in passes)


def scale(images: Path, limit: int, repeats: int, work: Path, shard_size: int = 250) -> dict:
    """One process against two (one thread each), whole commands and their passes, interleaved. The whole command
    adds what every command pays once (Python and torch imports, loading the model, torchrun's launcher) and the
    first process's search indexes after the pass."""
    runs: dict[str, list[tuple[float, float]]] = {"one": [], "two": []}
    for _ in range(repeats):
        runs["one"].append(command(images, work / "one", limit, 1, shard_size))
        runs["two"].append(command(images, work / "two", limit, 2, shard_size))
    whole = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
    passes = {name: statistics.median(p for _, p in r) for name, r in runs.items()}
    return {
        "images": limit,
        "shard_size": shard_size,
        "whole_command_s": {name: [w for w, _ in r] for name, r in runs.items()},
        "pass_s": {name: [p for _, p in r] for name, r in runs.items()},
        "speedup_pass": passes["one"] / passes["two"],
        "speedup_whole_command": whole["one"] / whole["two"],
    }


def cifar_patch_vectors(folders: list[Path], count: int, block: int, batch: int = 256) -> np.ndarray:
    """Real patch vectors: the default model's block-``block`` patch tokens (explain.patch_features) of CIFAR images,
    in file order, until ``count`` vectors; fp16 as the index stores them."""
    from vitviz.explain import patch_features

    model = vitviz.load_model("default")
    files = [p for folder in folders for p in sorted(folder.rglob("*.jpg"))]
    per_image = (model.transform.output_size[0] // model.config.patch_size) ** 2
    files = files[: -(-count // per_image)]
    parts = []
    for i in range(0, len(files), batch):
        pixels = torch.stack([model.transform(load_image(f.read_bytes())) for f in files[i : i + batch]])
        parts.append(patch_features(model, pixels, block).reshape(-1, model.config.hidden_size).half().numpy())
    return np.concatenate(parts)[:count]


def search_million(vectors: np.ndarray, queries: int = 200) -> dict:
    """build_vector_index over the vectors (above the exact threshold: IVF with nprobe chosen for recall), then
    per-query latency and recall@10 against exact search on fresh queries."""
    from vitviz.dataset import search as vector_search

    count, dimension = vectors.shape

    def chunks():
        for start in range(0, count, 100_000):
            yield np.arange(start, min(start + 100_000, count)), vectors[start : start + 100_000]

    start = time.perf_counter()
    index, info = vector_search.build_vector_index(chunks, count, dimension)
    built = time.perf_counter() - start
    picks = np.random.default_rng(1).choice(count, queries, replace=False)
    latencies, found = [], []
    for i in picks:
        t = time.perf_counter()
        _, ids = vector_search.search(index, vectors[i].astype(np.float32), 10)
        latencies.append(time.perf_counter() - t)
        found.append(ids)
    exact = exact_neighbours(normalised(vectors[picks]), chunks, 10)
    return {
        "vectors": count,
        "dimension": dimension,
        "index": info,
        "build_s": built,
        "query_ms_median": 1000 * statistics.median(latencies),
        "query_ms_p95": 1000 * float(np.percentile(latencies, 95)),
        "recall_at_10_fresh_queries": recall_at(np.stack(found), exact),
        "queries": queries,
    }


def disk(folder: Path) -> dict:
    manifest = vitviz.open_index(folder).manifest
    count = manifest["count"]
    by_item: dict[str, int] = {}
    for shard in manifest["shards"]:
        for name, info in shard["files"].items():
            by_item[name] = by_item.get(name, 0) + info["bytes"]
    search_bytes = {p.name: p.stat().st_size for p in (folder / "search").glob("*.faiss")}
    per_image = {name: size / count for name, size in by_item.items()}
    shards = sum(by_item.values()) / count
    return {
        "images": count,
        "bytes_per_image_by_file": per_image,
        "bytes_per_image": shards,
        "bytes_per_image_without_features": shards - per_image.get("features.npy", 0),
        "search_bytes_per_image": {n: s / count for n, s in search_bytes.items()},
    }


def vit_b16_checkpoint(work: Path) -> Path:
    """A ViT-B/16 at 224 with random weights (seed 0) and 1,000 classes, saved as a vitviz checkpoint."""
    from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

    path = work / "vit_b16.pt"
    if not path.is_file():
        torch.manual_seed(0)
        model = ViT(ViTConfig(num_classes=1000)).eval()
        save_checkpoint(path, model, [f"class {i}" for i in range(1000)], Preprocessing(resize=256, crop=224))
    return path


def vit_b16(images: Path, work: Path, count: int = 32) -> dict:
    """ViT-B/16 at 224 with random weights on ``count`` CIFAR images (upsampled): measured bytes, and shapes."""
    path = vit_b16_checkpoint(work)
    out = work / "vit_b16"
    shutil.rmtree(out, ignore_errors=True)
    build_index(vitviz.load_model(path), open_source(images), out, IndexOptions(limit=count), str(path), 16)
    measured = disk(out)
    grid, heads, dim = 14 * 14, 12, 768
    shapes = {
        "rollout.npy (14x14 fp16)": grid * 2,
        "readout.npy (12x14x14 fp16)": heads * grid * 2,
        "embedding.npy (768 fp32)": dim * 4,
        "features.npy (14x14x768 fp16)": grid * dim * 2,
        "patch search (fp16 codes + ids)": grid * (dim * 2 + 8),
    }
    return {"measured": measured, "array_bytes_from_shapes": shapes}


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--images", type=Path, default=Path("/tmp/cifar10/test"))
    parser.add_argument("--limit", type=int, default=2000, help="images for the throughput comparison")
    parser.add_argument(
        "--scale-limit",
        type=int,
        default=3000,
        help="images for the torchrun comparison (below the exact-search limit)",
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--model",
        choices=["default", "vit_b16"],
        default="default",
        help="the throughput part's model: the shipped default, or ViT-B/16 at 224 with random weights",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--search-vectors", type=int, default=1_000_000)
    parser.add_argument(
        "--search-block",
        type=int,
        default=0,
        help="block whose patch tokens are searched (block 0: the cheapest real vectors, one block per image)",
    )
    parser.add_argument("--train", type=Path, default=Path("/tmp/cifar10/train"), help="more images for the search")
    parser.add_argument("--parts", nargs="+", default=["throughput", "scale", "search", "disk"])
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for the throughput part (default: "
        "torch's own, the core count); 1 shows the pass's own cost without thread-sync waits",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    results = {"machine": f"{os.cpu_count()} cores, torch {torch.__version__}", "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        if "throughput" in args.parts:
            results["throughput"] = throughput(args.images, args.limit, args.batch, args.repeats, work, args.model)
            results[f"disk_{args.model}_model"] = disk(work / "t1")
            print(results["throughput"], results[f"disk_{args.model}_model"], flush=True)
        if "scale" in args.parts:
            results["scale"] = scale(args.images, args.scale_limit, args.repeats, work)
            print(results["scale"], flush=True)
        if "search" in args.parts:
            vectors = cifar_patch_vectors([args.images, args.train], args.search_vectors, args.search_block)
            results["search"] = search_million(vectors) | {
                "vectors_from": f"CIFAR-10 test then train, block {args.search_block} patch tokens of the default model"
            }
            print(results["search"], flush=True)
        if "disk" in args.parts:
            results["disk_vit_b16"] = vit_b16(args.images, work)
            print(results["disk_vit_b16"], flush=True)
    common.save(results, args.out)


if __name__ == "__main__":
    main()
