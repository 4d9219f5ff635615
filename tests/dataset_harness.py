"""Inputs for the dataset and SAE index tests: folders of generated images, and `vitviz index` run as a process
(alone or under torchrun) from the repository root."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def make_images(folder, count=24, seed=0):
    """``count`` random photos in class folders cat/ and dog/, a few not square, and one broken file."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        label = "cat" if i % 2 else "dog"
        (folder / label).mkdir(parents=True, exist_ok=True)
        size = (40, 32) if i % 5 == 0 else (32, 32)
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / label / f"{i:03d}.png")
    (folder / "cat" / "broken.png").write_bytes(b"not an image")
    return folder


def run_index(*argv, torchrun=0):
    prefix = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}", "-m"]
        if torchrun
        else [sys.executable, "-m"]
    )
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*prefix, "vitviz", "index", *map(str, argv)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
