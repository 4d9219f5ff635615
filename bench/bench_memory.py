"""Big models on a small server: the page's memory and its time to the first map and per recomputed view.

Part 1, one session (AppTest, the page run in this process): a ViT with random weights saved as a vitviz
checkpoint and loaded by path, six different photos chosen in turn. After each photo the process's resident
memory (VmRSS) and its peak (VmHWM) are read; then a rollout setting the first pass did not compute (discard
ratio 0.5) and a clicked patch are timed, as is the first photo's time to its first map.

    python bench/bench_memory.py single --model vit_l_16 --size 512 --out bench/results/memory_vit_l.json
    python bench/bench_memory.py single --model vit_l_16 --size 512 --repo /tmp/before  # another checkout

Part 2, concurrent sessions (a real `streamlit run app.py` and headless Chromium, tests/browser_harness.py):
each session uploads its images one after another, under the default memory budget; the server's peak
resident memory, the store's bytes and any page error are reported.

    python bench/bench_memory.py sessions --model vit_h_14 --size 518 --sessions 2 --images 4

Every part runs in a child process of its own, so the figures of one do not include another's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # bench/common.py

ROOT = Path(__file__).resolve().parent.parent
PHOTOS = ROOT.parent / "shared" / "data" / "photos"
SIZES = {  # torchvision's sizes: hidden, layers, heads, MLP, patch
    "vit_b_16": (768, 12, 12, 3072, 16),
    "vit_l_16": (1024, 24, 16, 4096, 16),
    "vit_h_14": (1280, 32, 16, 5120, 14),
}


def checkpoint(folder: Path, model: str, size: int) -> Path:
    """A random-weight model of torchvision's sizes at ``size`` x ``size``, saved as a vitviz checkpoint."""
    import torch

    from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

    hidden, layers, heads, mlp, patch = SIZES[model]
    torch.manual_seed(0)
    vit = ViT(
        ViTConfig(
            image_size=size,
            patch_size=patch,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            mlp_size=mlp,
            num_classes=1000,
        )
    )
    path = folder / f"{model}_{size}.pt"
    save_checkpoint(path, vit, [f"class {i}" for i in range(1000)], Preprocessing(resize=size, crop=size))
    return path


def photos(count: int) -> list[tuple[str, bytes]]:
    """Real photos when ../shared/data/photos is there, else generated ones."""
    files = sorted(p for p in PHOTOS.glob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))[:count]
    if len(files) == count:
        return [(p.name, p.read_bytes()) for p in files]
    import io

    import numpy as np
    from PIL import Image

    result = []
    for i in range(count):
        pixels = np.random.default_rng(i).integers(0, 256, (600, 800, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG")
        result.append((f"generated{i}.jpg", buffer.getvalue()))
    return result


def memory_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process, in MB."""
    status = Path("/proc/self/status").read_text()
    return tuple(int(re.search(rf"{k}:\s+(\d+) kB", status).group(1)) / 1024 for k in ("VmRSS", "VmHWM"))


def single(args) -> dict:
    """Part 1, in this (child) process."""
    from streamlit.testing.v1 import AppTest

    folder = Path(args.folder)
    path = checkpoint(folder, args.model, args.size)
    os.environ["VITVIZ_MODEL_DIRS"] = str(folder)
    os.environ["VITVIZ_SAMPLES"] = ""
    app = str(Path(args.repo) / "app.py")
    at = AppTest.from_file(app, default_timeout=1800)
    at.run()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    if "fp32" in at.sidebar.radio[0].options:
        at.sidebar.radio[0].set_value("fp32").run()  # the same precision in either checkout
    start = time.perf_counter()
    at.sidebar.text_input[0].set_value(str(path)).run()
    load_s = time.perf_counter() - start
    baseline = memory_mb()
    rows, views = [], {}
    for index, (name, data) in enumerate(photos(args.photos)):
        start = time.perf_counter()
        at.file_uploader[0].set_value((name, data, "image/jpeg")).run()
        seconds = time.perf_counter() - start
        problems = [str(e.value) for e in at.exception] + [e.value for e in at.error]
        rss, peak = memory_mb()
        rows.append(
            {
                "photo": name,
                "seconds": round(seconds, 2),
                "rss_mb": round(rss),
                "peak_mb": round(peak),
                "problems": problems,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        if index == 0:  # the recomputed views, on the first photo
            views = {}
            start = time.perf_counter()
            next(s for s in at.slider if s.label == "Discard ratio").set_value(0.5).run()
            views["rollout, discard 0.5"] = round(time.perf_counter() - start, 2)
            next(s for s in at.slider if s.label == "Discard ratio").set_value(0.0).run()
            at.session_state["tab"] = "Click a patch"
            at.run()
            start = time.perf_counter()
            next(n for n in at.number_input if n.label == "Row").set_value(0).run()
            views["clicked patch, last block"] = round(time.perf_counter() - start, 2)
            at.session_state["tab"] = "Heads & layers"
            start = time.perf_counter()
            at.run()
            views["Heads & layers tab"] = round(time.perf_counter() - start, 2)
            at.session_state["tab"] = "Overview"
            at.run()
            print(json.dumps(views), flush=True)
    store = {}
    try:
        from vitviz_dashboard.cache.budget import STORE

        store = STORE.stats()
    except ImportError:  # a checkout from before the memory budget
        pass
    return {
        "model": args.model,
        "size": args.size,
        "repo": args.repo,
        "load_s": round(load_s, 1),
        "rss_before_first_photo_mb": round(baseline[0]),
        "photos": rows,
        "views_s": views,
        "peak_growth_after_first_mb": rows[-1]["peak_mb"] - rows[0]["peak_mb"],
        "time_to_first_map_s": rows[0]["seconds"],
        "store": store,
    }


def sessions(args) -> dict:
    """Part 2: a real server and browser sessions."""
    sys.path.insert(0, str(ROOT / "tests"))
    from browser_harness import run_sessions, streamlit_server

    folder = Path(args.folder)
    path = checkpoint(folder, args.model, args.size)
    env = {"VITVIZ_DEFAULT_CHECKPOINT": str(path), "VITVIZ_SAMPLES": ""}
    with streamlit_server(folder, env, start_timeout=300) as server:
        start = time.perf_counter()
        report = run_sessions(server.url, folder, args.sessions, 0, args.images, timeout_ms=1_800_000)
        return {
            "model": args.model,
            "size": args.size,
            "sessions": args.sessions,
            "images_per_session": args.images,
            "seconds": round(time.perf_counter() - start),
            "uploads": report.uploads,
            "problems": report.problems,
            **server.counts(),
            "store": server.store(),
            "server_peak_rss_mb": round(server.peak_memory_mb()),
        }


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("part", choices=["single", "sessions"])
    parser.add_argument("--model", choices=sorted(SIZES), default="vit_l_16")
    parser.add_argument("--size", type=int, default=512, help="input side, pixels")
    parser.add_argument("--photos", type=int, default=6, help="single: photos chosen in turn")
    parser.add_argument("--sessions", type=int, default=2, help="sessions: concurrent browser sessions")
    parser.add_argument("--images", type=int, default=4, help="sessions: images each session uploads")
    parser.add_argument("--repo", default=str(ROOT), help="single: the checkout whose app.py is run")
    parser.add_argument("--child", action="store_true", help=argparse_hidden())
    parser.add_argument("--folder", help=argparse_hidden())
    args = parser.parse_args(argv)
    if args.photos < 1 or args.images < 1 or args.sessions < 1:
        parser.error("--photos, --images and --sessions must be at least 1")
    if not args.child:  # run the part in a fresh process, so its memory figures are its own
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, __file__, *(argv or sys.argv[1:]), "--child", "--folder", folder]
            env = os.environ | {"PYTHONPATH": args.repo}
            subprocess.run(command, check=True, cwd=args.repo, env=env)
            results = json.loads((Path(folder) / "results.json").read_text())
        print(json.dumps(results, indent=1))
        common.save(results, args.out)
        return results
    results = single(args) if args.part == "single" else sessions(args)
    (Path(args.folder) / "results.json").write_text(json.dumps(results))
    return results


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
