"""`vitviz sae train` from .npy activations and from images through a model; metrics.json agrees with the saved
weights; bad input gets a message, not a traceback."""

import json
import re

import numpy as np
import pytest
from PIL import Image

from tests.tiny_models import tiny_checkpoint
from vitviz.commands.sae import main
from vitviz.sae import evaluate, load_sae

QUICK = ["--latents", "32", "--k", "4", "--epochs", "1", "--batch", "256", "--aux-k", "8"]


def activations(path, seed, n=600, d=16):
    rng = np.random.default_rng(seed)
    np.save(path, (rng.normal(size=(n, d)) @ rng.normal(size=(d, d))).astype(np.float16))
    return path


def test_train_from_npy_and_metrics_match_the_saved_weights(tmp_path):
    train = activations(tmp_path / "train.npy", 0)
    held = activations(tmp_path / "held.npy", 1, n=200)
    metrics = main(
        [
            "train",
            "--activations",
            str(train),
            "--holdout-activations",
            str(held),
            *QUICK,
            "--out",
            str(tmp_path / "run"),
        ]
    )
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved == pytest.approx(metrics)
    assert {"explained_variance", "l0", "dead_fraction", "normalised_mse", "training_seconds"} <= set(saved)
    sae = load_sae(tmp_path / "run")
    again = evaluate(sae, [np.load(held)])
    assert again["explained_variance"] == pytest.approx(saved["explained_variance"], abs=1e-6)
    assert saved["l0"] <= 4
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_train_from_images_through_a_model(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "tiny.pt")
    rng = np.random.default_rng(0)
    for name in ("cat", "dog", "bird"):
        (tmp_path / "images" / name).mkdir(parents=True)
        for index in range(4):
            pixels = rng.integers(0, 255, size=(32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / name / f"{index}.png")
    metrics = main(
        [
            "train",
            "--images",
            str(tmp_path / "images"),
            "--model",
            str(checkpoint),
            "--block",
            "1",
            "--holdout",
            "0.25",
            *QUICK,
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert metrics["images"] == 3 and metrics["tokens"] == 3 * 16  # 3 held-out images of 4 x 4 patches
    assert 0 <= metrics["top1_agreement"] <= 1 and "ce_loss_recovered" in metrics
    header = json.loads((tmp_path / "run" / "config.json").read_text())
    assert header["config"]["block"] == 1 and header["config"]["d_in"] == 32


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--activations", "missing.npy"], "missing.npy is not a .npy file"),
        (["--activations", "train.npy", "--holdout-activations", "wide.npy"], "one width; got widths"),
        (["--activations", "train.npy", "--latents", "4000000000"], "need about .* GiB"),
        (["--activations", "train.npy", "--k", "64"], "k must be between 1 and latents = 32"),
        (["--images", "."], "--images needs --block"),
    ],
)
def test_bad_input_gets_a_message(tmp_path, monkeypatch, capsys, arguments, message):
    monkeypatch.chdir(tmp_path)
    activations(tmp_path / "train.npy", 0)
    activations(tmp_path / "wide.npy", 1, d=24)
    argv = ["train", *QUICK, *arguments, "--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    error = capsys.readouterr().err
    assert exited.value.code == 2 and re.search(message, error), error
