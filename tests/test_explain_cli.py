"""`vitviz explain`: overlays, maps and predictions written for a folder of images, for every method."""

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from explain_cli_inputs import NAMES, explain, photo_folder
from PIL import Image
from tiny_models import tiny_checkpoint

from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint
from vitviz.commands.explain import main
from vitviz.model import precision as precision_module


@pytest.fixture()
def checkpoint(tmp_path):
    return tiny_checkpoint(tmp_path / "model.pt", names=NAMES)  # 2 blocks, a 4 x 4 grid, 6 classes


@pytest.fixture()
def images(tmp_path):
    return photo_folder(tmp_path / "photos")


def test_cli_writes_overlays_maps_and_predictions(checkpoint, images, tmp_path, capsys):
    out = tmp_path / "out"
    status = explain(images, checkpoint, out, "--methods", "rollout", "cls", "relevance", "grad-rollout")
    assert status == 1  # broken.png was skipped and reported
    assert "skipped" in capsys.readouterr().err
    # inputs in sorted path order: nested/wide.bmp is "wide", then wide.png becomes "wide-2", not overwriting it
    assert Image.open(out / "wide_cls.png").size == (20, 20)
    assert Image.open(out / "wide-2_rollout.png").size == (64, 48)  # the photo's own resolution
    assert Image.open(out / "tall_relevance.png").size == (40, 70)
    maps = np.load(out / "tall.npz")
    assert set(maps.files) == {"probabilities", "rollout", "cls", "relevance", "grad-rollout", "target"}
    assert maps["rollout"].shape == (4, 4) and maps["probabilities"].shape == (6,)
    assert int(maps["target"]) == int(maps["probabilities"].argmax())
    rows = list(csv.reader(open(out / "predictions.csv")))
    assert len(rows) == 4 and len(rows[0]) == 11
    for row in rows[1:]:
        probabilities = [float(v) for v in row[2::2]]
        assert probabilities == sorted(probabilities, reverse=True) and row[1] in NAMES


def test_cli_target_and_bad_arguments(checkpoint, images, tmp_path):
    out = tmp_path / "out"
    assert explain(images / "wide.png", checkpoint, out, "--target", "4", "--methods", "relevance") == 0
    assert int(np.load(out / "wide.npz")["target"]) == 4
    with pytest.raises(SystemExit, match="does not exist"):
        explain(tmp_path / "nothing", checkpoint, out)
    with pytest.raises(SystemExit, match="not found"):
        explain(images, tmp_path / "missing.pt", out)
    with pytest.raises(SystemExit) as exit_info:
        explain(images, checkpoint, out, "--target", "99")
    assert exit_info.value.code == 2


def test_module_entry_point_runs(checkpoint, images, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitviz",
            "explain",
            str(images / "wide.png"),
            "--model",
            str(checkpoint),
            "--out",
            str(tmp_path / "out"),
            "--methods",
            "rollout",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "wide_rollout.png").exists()


def test_cli_on_a_mean_pooled_model_without_cls(images, tmp_path):
    tiny_checkpoint(tmp_path / "mean.pt", names=NAMES, class_token=False, pooling="mean")
    out = tmp_path / "out"
    assert (
        explain(images / "wide.png", tmp_path / "mean.pt", out, "--methods", "rollout", "relevance", "grad-rollout")
        == 0
    )
    assert np.load(out / "wide.npz")["relevance"].shape == (4, 4)
    with pytest.raises(SystemExit) as exit_info:
        explain(images / "wide.png", tmp_path / "mean.pt", out, "--methods", "cls")
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        explain(images / "wide.png", tmp_path / "mean.pt", out, "--discard-ratio", "1")
    assert exit_info.value.code == 2


def test_cli_writes_the_new_methods_maps(checkpoint, images, tmp_path):
    out = tmp_path / "out"
    methods = ["legrad", "tam", "gradcam", "lens"]
    assert (
        main(
            [
                str(images / "wide.png"),
                "--model",
                str(checkpoint),
                "--out",
                str(out),
                "--target",
                "2",
                "--methods",
                *methods,
            ]
        )
        == 0
    )
    maps = np.load(out / "wide.npz")
    assert set(maps.files) == {"probabilities", "target", *methods, "lens_layers", "lens_votes"}
    for method in methods:
        assert maps[method].shape == (4, 4) and np.isfinite(maps[method]).all(), method
        assert Image.open(out / f"wide_{method}.png").size == (64, 48)
    assert maps["lens_layers"].shape == maps["lens_votes"].shape == (2, 4, 4)  # one map per block
    np.testing.assert_array_equal(maps["lens"], maps["lens_layers"][-1])
    assert ((0 <= maps["lens_votes"]) & (maps["lens_votes"] < 6)).all()


def test_cli_start_layer_reaches_legrad_and_tam_and_names_the_valid_range(checkpoint, images, tmp_path, capsys):
    runs = {}
    for start in (0, 1):
        out = tmp_path / f"start{start}"
        assert (
            explain(
                images / "wide.png",
                checkpoint,
                out,
                "--target",
                "1",
                "--methods",
                "legrad",
                "tam",
                "--start-layer",
                str(start),
            )
            == 0
        )
        runs[start] = np.load(out / "wide.npz")
    for method in ("legrad", "tam"):
        assert not np.allclose(runs[0][method], runs[1][method]), method
    with pytest.raises(SystemExit) as exit_info:
        explain(images / "wide.png", checkpoint, tmp_path / "x", "--start-layer", "2")
    assert exit_info.value.code == 2
    assert "--start-layer must be in [0, 1]: the model has 2 blocks, counted from 0; got 2" in capsys.readouterr().err


def test_cli_new_methods_on_a_mean_pooled_model_with_registers(images, tmp_path):
    torch.manual_seed(0)
    model = ViT(
        ViTConfig(
            image_size=(32, 48),
            patch_size=8,
            hidden_size=32,
            num_layers=2,
            num_heads=4,
            mlp_size=64,
            num_classes=6,
            class_token=False,
            pooling="mean",
            num_register_tokens=2,
        )
    )
    with torch.no_grad():
        model.head.weight.normal_()
    save_checkpoint(tmp_path / "mean.pt", model, NAMES, Preprocessing(resize=(32, 48)))
    out = tmp_path / "out"
    assert explain(images / "wide.png", tmp_path / "mean.pt", out, "--methods", "legrad", "tam", "gradcam", "lens") == 0
    maps = np.load(out / "wide.npz")
    assert all(maps[method].shape == (4, 6) for method in ("legrad", "tam", "gradcam", "lens"))


@pytest.mark.parametrize("bf16_ms, chosen", [(5.0, "bf16"), (20.0, "fp32")])  # against fp32's 10 ms
def test_cli_precision_auto_times_the_model_and_says_what_it_chose(
    checkpoint, images, tmp_path, capsys, monkeypatch, bf16_ms, chosen
):
    # the timings are stubbed (whatever this CPU's bf16 support and load), so each run has one right answer
    monkeypatch.setattr(precision_module, "bf16_unavailable", lambda device: None)
    seconds = {"fp32": 0.010, "bf16": bf16_ms / 1000}
    monkeypatch.setattr(precision_module, "forward_timer", lambda model, timer=None, blocks=None: seconds.get)
    run = [str(images / "wide.png"), "--model", str(checkpoint), "--precision"]
    main([*run, "auto", "--out", str(tmp_path / "auto")])
    assert f"auto chose {chosen}: " in capsys.readouterr().err
    main([*run, chosen, "--out", str(tmp_path / "chosen")])  # the maps are those of the precision it chose
    auto, given = np.load(tmp_path / "auto" / "wide.npz"), np.load(tmp_path / "chosen" / "wide.npz")
    assert auto["rollout"].shape == (4, 4)
    for method in auto.files:
        np.testing.assert_array_equal(auto[method], given[method], err_msg=method)
