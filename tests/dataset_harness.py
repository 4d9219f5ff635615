"""Inputs for the dataset and SAE index tests: folders of generated images, `vitviz index` run as a process (alone or
under torchrun) from the repository root, quick index and SAE options, and the Dataset page under AppTest."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from app_harness import APP
from page_reading import fix_precision
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

from vitviz.commands.index import main as index_main
from vitviz_dashboard.cache import budget
from vitviz_dashboard.state import DATASET_FOLDER, DATASET_TAB

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


# a quick SAE (vitviz sae) and a small index of few shards (vitviz index), for the SAE tests
QUICK = ["--latents", "32", "--k", "4", "--epochs", "2", "--batch", "64", "--aux-k", "8", "--holdout", "0.3"]
INDEX = ["--shard-size", "8", "--batch-size", "5", "--activations", "2", "0"]


def tiny_index(root: Path, stored=INDEX, num_layers: int = 3) -> tuple[Path, Path]:
    """A tiny checkpoint of ``num_layers`` blocks at root/model.pt and its index of ``make_images(root / "images")``
    at root/index, built by ``vitviz index`` with the options ``stored`` (shard size, which blocks' activations it
    keeps); returns both paths."""
    model = tiny_checkpoint(root / "model.pt", num_layers=num_layers)
    out = root / "index"
    assert index_main([str(make_images(root / "images")), "--model", str(model), "--out", str(out), *stored]) == 0
    return model, out


def dataset_app(folder) -> AppTest:
    """The app on its Dataset page with ``folder`` typed in. AppTest switches only to file pages, so the page is
    chosen by the script hash st.navigation registered for its url path."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "dataset")
    checked(at.run())
    at.sidebar.text_input(key=str(DATASET_FOLDER)).set_value(str(folder))
    return checked(at.run())


def checked(at: AppTest) -> AppTest:
    assert not at.exception, at.exception
    return at


def open_tab(at: AppTest, name: str) -> AppTest:
    at.session_state[str(DATASET_TAB)] = name
    return checked(at.run())


def fresh_page(monkeypatch, models: Path) -> None:
    """The start of each Dataset page AppTest: empty caches, no sample images, ``models`` as the folder of models
    the page lists, and precision fixed to fp32."""
    st.cache_resource.clear()
    st.cache_data.clear()
    budget.STORE.clear()
    monkeypatch.setenv("VITVIZ_SAMPLES", "")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(models))
    fix_precision(monkeypatch)


def page_fixtures(name: str):
    """The two fixtures of a Dataset page test module, to assign there: ``built``, once per module, a folder (a
    temporary ``name``) holding a 2-block tiny model, 24 generated images (and a broken one) and their index in
    shards of 8; and ``page_settings``, ``fresh_page`` on that folder before each test.
    Use: ``built, page_settings = page_fixtures("dataset_page")``."""

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        root = tmp_path_factory.mktemp(name)
        tiny_index(root, stored=["--shard-size", "8"], num_layers=2)
        return root

    @pytest.fixture(autouse=True)
    def page_settings(monkeypatch, built):
        fresh_page(monkeypatch, built)

    return built, page_settings
