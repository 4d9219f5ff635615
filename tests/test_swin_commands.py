"""`vitviz explain`, `vitviz benchmark` and `vitviz index` on a Swin model: a tiny transformers Swin saved with
``save_pretrained`` (tests/tiny_swins.py; its preprocessing resizes to 32 x 32, a 16 x 16 first-stage grid). The
methods that read windows and stages run, and their maps equal the library's; every other method is skipped with
one line; the index refuses in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_swins import swin_folder

import vitviz
from vitviz.commands import benchmark, explain, index
from vitviz.explain import METHODS, method_maps
from vitviz.preprocessing import load_image

RUN = ["rollout", "relevance", "grad-rollout", "gradcam"]  # what explains a Swin
REFUSED = sorted(set(METHODS) - set(RUN))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return swin_folder(tmp_path_factory.mktemp("swin"))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Six photos in two class folders, one not square."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for i in range(6):
        folder = root / ("LABEL_0" if i % 2 else "LABEL_1")
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32 + 8 * i, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    return root


def skipped_lines(err: str) -> dict[str, str]:
    return {line.split("'")[1]: line for line in err.splitlines() if line.startswith("skipping '")}


def test_explain_writes_the_windowed_maps_and_skips_the_rest_in_one_line_each(model_folder, photos, tmp_path, capsys):
    out = tmp_path / "maps"
    photo = photos / "LABEL_0" / "p1.png"
    status = explain.main([str(photo), "--model", str(model_folder), "--methods", *METHODS, "--out", str(out)])
    assert status == 0
    err = capsys.readouterr().err
    assert set(skipped_lines(err)) == set(REFUSED)
    arrays = np.load(out / "p1.npz")
    assert set(arrays.files) == {"probabilities", "target", *RUN}
    model = vitviz.load_model(str(model_folder))
    pixels = model.transform(load_image(photo.read_bytes()))[None]
    expected = method_maps(model, pixels, RUN)
    for name in RUN:
        assert arrays[name].shape == (16, 16)
        np.testing.assert_allclose(arrays[name], expected.maps[name].numpy(), rtol=1e-5, atol=1e-7)
        assert Image.open(out / f"p1_{name}.png").size == Image.open(photo).size
    # the default methods (rollout, cls, relevance): cls is skipped, the others written
    assert explain.main([str(photo), "--model", str(model_folder), "--out", str(tmp_path / "default")]) == 0
    assert set(skipped_lines(capsys.readouterr().err)) == {"cls"}
    assert set(np.load(tmp_path / "default" / "p1.npz").files) == {"probabilities", "target", "rollout", "relevance"}


def test_explain_refuses_what_cannot_run_on_swin(model_folder, photos, tmp_path):
    photo = str(photos / "LABEL_0" / "p1.png")
    with pytest.raises(SystemExit, match="none of the --methods can explain this model"):
        explain.main([photo, "--model", str(model_folder), "--methods", "tam", "lens", "--out", str(tmp_path / "a")])
    with pytest.raises(SystemExit, match="--features pca: patch features .* Swin"):
        explain.main([photo, "--model", str(model_folder), "--features", "pca", "--out", str(tmp_path / "b")])


def test_benchmark_runs_the_methods_that_apply(model_folder, photos, tmp_path, capsys):
    out = tmp_path / "bench"
    status = benchmark.main([str(photos), "--model", str(model_folder), "--out", str(out), "--steps", "4"])
    assert status == 0
    assert set(skipped_lines(capsys.readouterr().err)) == set(REFUSED)
    rows = (out / "results.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == [*[m for m in METHODS if m in RUN], "random"]
    records = [json.loads(line) for line in (out / "images.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(set(r["methods"]) == {*RUN, "random"} for r in records)
    for record in records:
        curves = record["methods"]["relevance"]
        assert len(curves["deletion"]) == 5 and all(0 <= p <= 1 for p in curves["deletion"] + curves["insertion"])


def test_benchmark_sanity_check_randomises_swin_blocks(model_folder, photos, tmp_path):
    out = tmp_path / "sanity"
    args = [str(photos), "--model", str(model_folder), "--out", str(out), "--methods", "rollout", "--limit", "1"]
    assert benchmark.main([*args, "--steps", "2", "--sanity", "1"]) == 0
    depths = (out / "sanity.csv").read_text().splitlines()[0].split(",")[1:]
    assert len(depths) == 7  # k = 0 and each of the 6 blocks


def test_index_refuses_swin_in_one_line(model_folder, photos, tmp_path):
    with pytest.raises(SystemExit) as refused:
        index.main([str(photos), "--model", str(model_folder), "--out", str(tmp_path / "index"), "--device", "cpu"])
    message = str(refused.value)
    assert message.startswith("error: ") and "\n" not in message and "Swin attends in windows" in message
    assert not (tmp_path / "index").exists()


def test_the_folder_is_a_swin_whose_grid_the_maps_use(model_folder):
    model = vitviz.load_model(str(model_folder))
    with torch.no_grad():
        out = model(torch.zeros(1, 3, 32, 32), output_attentions=True)
    assert out.stage_grids == ((16, 16), (8, 8), (4, 4))
