"""The sampling, perturbation and flow methods on the command line: `vitviz explain` and `vitviz benchmark` pass
their options to method_maps, refuse a bad one in one line, and the benchmark reports SaCo beside the curves."""

import csv
import json
import re

import numpy as np
import pytest
from explain_cli_inputs import NAMES, explain
from PIL import Image
from tiny_models import tiny_checkpoint

from vitviz.commands import benchmark


@pytest.fixture()
def checkpoint(tmp_path):
    return tiny_checkpoint(tmp_path / "model.pt", names=NAMES)  # 2 blocks, a 4 x 4 grid, 6 classes


@pytest.fixture()
def photos(tmp_path):
    folder = tmp_path / "photos" / NAMES[0]
    folder.mkdir(parents=True)
    generator = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(generator.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder.parent


def test_explain_writes_the_new_methods_with_their_options(checkpoint, photos, tmp_path):
    out = tmp_path / "out"
    methods = ["attention-flow", "occlusion", "kernel-shap", "rise", "integrated-gradients"]
    status = explain(photos, checkpoint, out, "--methods", *methods, "--samples", "20", "--ig-steps", "4")
    assert status == 0
    maps = np.load(out / "0.npz")
    assert all(maps[m].shape == (4, 4) for m in methods)
    # the seed reaches the sampling methods: another seed, another RISE map
    explain(photos, checkpoint, tmp_path / "other", "--methods", "rise", "--samples", "20", "--method-seed", "1")
    assert not np.allclose(np.load(tmp_path / "other" / "0.npz")["rise"], maps["rise"])


@pytest.mark.parametrize(
    "options, message",
    [
        (["--samples", "0"], "--samples must be a whole number >= 1; got 0"),
        (["--rise-keep", "1.5"], r"--rise-keep must be a number in \(0, 1\]"),
        (["--flow-limit", "-1"], "--flow-limit must be a whole number >= 1"),
    ],
)
def test_a_bad_option_ends_the_command_in_one_line(checkpoint, photos, tmp_path, capsys, options, message):
    with pytest.raises(SystemExit):
        explain(photos, checkpoint, tmp_path / "out", "--methods", "rise", *options)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("vitviz explain: error: ")
    assert re.search(message, error)


def test_an_option_the_input_cannot_take_is_one_line(checkpoint, photos, tmp_path):
    with pytest.raises(SystemExit, match="occlusion window .* larger than the 32 x 32 input"):
        explain(photos, checkpoint, tmp_path / "out", "--methods", "occlusion", "--occlusion-window", "40")
    with pytest.raises(SystemExit, match="more than flow_limit=10"):
        benchmark.main([str(photos), "--model", str(checkpoint), "--out", str(tmp_path / "b"), "--flow-limit", "10"])


def test_the_benchmark_reports_saco_and_refuses_to_resume_with_other_options(checkpoint, photos, tmp_path):
    out = tmp_path / "bench"
    args = [str(photos), "--model", str(checkpoint), "--out", str(out), "--methods", "rollout", "rise"]
    assert benchmark.main([*args, "--samples", "20"]) == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [row["method"] for row in rows] == ["rollout", "rise", "random"]
    assert all(-1 <= float(row["saco"]) <= 1 for row in rows)
    assert "SaCo (higher)" in (out / "results.md").read_text()
    record = json.loads((out / "images.jsonl").read_text().splitlines()[0])
    assert record["method_options"] == {"samples": 20}
    with pytest.raises(SystemExit, match="with other method options"):
        benchmark.main([*args, "--samples", "30"])
