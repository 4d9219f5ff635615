"""`vitviz benchmark`: its areas are the mean of vitviz.explain.faithfulness over the images, per method."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from tiny_models import tiny_checkpoint
from vitviz import explain, load_model
from vitviz.benchmark import main, spread
from vitviz.explain_cli import explain_image


@pytest.fixture()
def folder(tmp_path):
    """Two class folders of generated images, and one unreadable file."""
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / "data" / label).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (32 + 8 * i, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "data" / label / f"{i}.png")
    return tmp_path / "data"


def test_areas_are_the_mean_over_images_of_the_perturbation_test(folder, tmp_path, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    status = main([str(folder), "--model", str(checkpoint), "--methods", "rollout", "relevance", "--steps", "4",
                   "--out", str(tmp_path / "out")])  # fmt: skip
    assert status == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["images"] == 6 and list(results["methods"]) == ["rollout", "relevance", "random"]

    # the reference: the same maps and tests, image by image, averaged here
    model = load_model(checkpoint)
    args = type("Args", (), dict(methods=["rollout", "relevance"], precision="fp32", target=None,
                                 head_fusion="mean", discard_ratio=0.0, start_layer=0))  # fmt: skip
    expected = {"rollout": [], "relevance": []}
    for path in sorted(folder.rglob("*.png")):
        pixels = model.transform(Image.open(path).convert("RGB"))[None]
        _, maps = explain_image(model, pixels, args)
        for name in expected:
            result = explain.faithfulness(model, pixels, torch.from_numpy(maps[name]), int(maps["target"]), steps=4)
            expected[name].append([result["auc_most_first"], result["auc_least_first"]])
    for name, areas in expected.items():
        areas = np.array(areas)
        got = results["methods"][name]
        assert got["auc_most_first"] == pytest.approx(areas[:, 0].mean(), rel=1e-5)
        assert got["auc_least_first"] == pytest.approx(areas[:, 1].mean(), rel=1e-5)
        assert got["auc_most_first_sem"] == pytest.approx(areas[:, 0].std(ddof=1) / np.sqrt(6), rel=1e-5)
        assert len(got["curve_most_first"]) == 5 and got["curve_most_first"][0] == pytest.approx(
            got["curve_least_first"][0])  # step 0 is the intact image either way
    rows = (tmp_path / "out" / "areas.csv").read_text().splitlines()
    assert len(rows) == 1 + 6 * 3
    assert "| relevance |" in capsys.readouterr().out


def test_random_baseline_is_seeded(folder, tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    runs = []
    for seed in (0, 0, 1):
        main([str(folder), "--model", str(checkpoint), "--methods", "cls", "--seed", str(seed), "--out", str(tmp_path / "o")])
        runs.append(json.loads((tmp_path / "o" / "results.json").read_text())["methods"]["random"]["auc_most_first"])
    assert runs[0] == runs[1] != runs[2]


def test_limit_spreads_over_the_sorted_list():
    assert spread(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert spread(list(range(3)), 5) == [0, 1, 2]
    assert spread(list(range(7)), None) == list(range(7))


def test_bad_input_gets_a_clear_error(folder, tmp_path, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    with pytest.raises(SystemExit, match="does not exist"):
        main([str(tmp_path / "nowhere"), "--model", str(checkpoint)])
    with pytest.raises(SystemExit, match="no classification head"):
        main([str(folder), "--model", str(tiny_checkpoint(tmp_path / "backbone.pt", names=()))])
    with pytest.raises(SystemExit, match="not found"):
        main([str(folder), "--model", str(tmp_path / "missing.pt")])
    for bad in (["--limit", "0"], ["--steps", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main([str(folder), "--model", str(checkpoint), *bad])
        assert exit_info.value.code == 2
    (folder / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    assert main([str(folder), "--model", str(checkpoint), "--methods", "cls"]) == 1
    assert "skipped" in capsys.readouterr().err
