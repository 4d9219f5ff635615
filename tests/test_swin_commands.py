"""`vitviz explain`, `vitviz benchmark` and `vitviz index` on a Swin model: a tiny transformers Swin saved with
``save_pretrained`` (tests/tiny_swins.py; its preprocessing resizes to 32 x 32, a 16 x 16 first-stage grid). The
methods that read windows and stages run, and their maps equal the library's; every other method is skipped with
one line; the index stores its maps on the first stage's grid and refuses in one line what it cannot store."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from test_swin_maps import dense, merge_matrix, rollout_step
from tiny_swins import swin_folder

import vitviz
from vitviz.commands import benchmark, explain, index
from vitviz.dataset import views
from vitviz.explain import METHODS, method_maps
from vitviz.explain.statistics import window_head_statistics
from vitviz.preprocessing import load_image

# what explains a Swin: the methods that read its windows, and the LRP rules and model-agnostic baselines
BASELINES = ["input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion", "kernel-shap", "rise"]
RUN = ["rollout", "relevance", "grad-rollout", "gradcam", "lens", "attnlrp", "cp-lrp", *BASELINES]
CHEAP = ["--samples", "16", "--ig-steps", "4"]  # the sampling methods at a few passes each
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
    status = explain.main([str(photo), "--model", str(model_folder), "--methods", *METHODS, *CHEAP, "--out", str(out)])
    assert status == 0
    err = capsys.readouterr().err
    assert set(skipped_lines(err)) == set(REFUSED)
    arrays = np.load(out / "p1.npz")
    assert set(arrays.files) == {"probabilities", "target", *RUN, "lens_layers", "lens_votes"}
    assert arrays["lens_layers"].shape == (2, 16, 16)  # the last stage's two blocks, on the first stage's grid
    model = vitviz.load_model(str(model_folder))
    pixels = model.transform(load_image(photo.read_bytes()))[None]
    expected = method_maps(model, pixels, RUN, samples=16, steps=4)
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
        explain.main([photo, "--model", str(model_folder), "--methods", "tam", "legrad", "--out", str(tmp_path / "a")])
    with pytest.raises(SystemExit, match="--features pca: patch features .* Swin"):
        explain.main([photo, "--model", str(model_folder), "--features", "pca", "--out", str(tmp_path / "b")])


def test_benchmark_runs_the_methods_that_apply(model_folder, photos, tmp_path, capsys):
    out = tmp_path / "bench"
    status = benchmark.main([str(photos), "--model", str(model_folder), "--out", str(out), "--steps", "4", *CHEAP])
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


def test_index_refuses_what_swin_cannot_store_in_one_line(model_folder, photos, tmp_path):
    for extra, words in (([], "give --no-features"), (["--no-features", "--activations", "2"], "--activations")):
        with pytest.raises(SystemExit) as refused:
            index.main([str(photos), "--model", str(model_folder), "--out", str(tmp_path / "index"), *extra])
        message = str(refused.value)
        assert message.startswith("error: ") and "\n" not in message and words in message
        assert not (tmp_path / "index").exists()


def test_index_stores_swins_maps_on_the_first_stages_grid(model_folder, photos, tmp_path):
    """Against dense implementations written here: the rollout (the dense product of test_swin_maps), the last
    block's heads read out by the mean (each head's dense matrix, carried back by the dense merge matrices), the head
    statistics inside windows (one heads-table row per head a block has), the pooled vector as the embedding."""
    out = tmp_path / "index"
    argv = [str(photos), "--model", str(model_folder), "--out", str(out), "--device", "cpu", "--no-features"]
    assert index.main([*argv, "--relevance", "--faithfulness", "--limit", "3", "--batch-size", "2"]) == 0
    opened = vitviz.open_index(out)
    assert opened.manifest["grid"] == [16, 16] and opened.manifest["layout"]["heads"] == 4
    model = vitviz.load_model(str(model_folder))
    rows = opened.query("SELECT image_id, path FROM images ORDER BY image_id")
    assert len(rows) == 3
    heads = opened.query("SELECT layer, count(*) AS n FROM heads WHERE image_id = 0 GROUP BY layer ORDER BY layer")
    assert heads["n"].tolist() == [2, 2, 2, 2, 4, 4]  # the heads of each stage's blocks
    per_image = views.per_image(opened, "entropy")  # what the Dataset page's intervals read: NaN past a block's heads
    assert per_image.shape == (3, 6, 4) and np.isnan(per_image[:, :4, 2:]).all() and np.isfinite(per_image[:, 4]).all()
    layouts = model(torch.zeros(1, 3, 32, 32)).layouts  # every image's: one input size
    carry = torch.eye(len(layouts[-1]), dtype=torch.float64)  # the last stage's tokens back to the first's
    merges = {}
    for index_, (later, earlier) in enumerate(zip(layouts[:0:-1], layouts[-2::-1], strict=True)):
        if len(later) != len(earlier):
            merges[len(layouts) - 1 - index_] = merge_matrix(later, earlier)
            carry = carry @ merges[len(layouts) - 1 - index_]
    for image_id, path in zip(rows["image_id"], rows["path"], strict=True):
        pixels = model.transform(load_image((photos / path).read_bytes()))[None]
        with torch.no_grad():
            result = model(pixels, output_attentions=True)
        product = torch.eye(len(layouts[0]), dtype=torch.float64)  # the rollout: the dense product, merges between
        for block, (attention, layout) in enumerate(zip(result.attentions, layouts, strict=True)):
            product = rollout_step(dense(attention.mean(1), layout)) @ (
                merges[block] @ product if block in merges else product
            )
        expected = product.mean(dim=0).reshape(16, 16)
        rollout = torch.from_numpy(opened.maps([image_id], "rollout")[0].astype(np.float64))
        torch.testing.assert_close(rollout, expected, rtol=0, atol=2e-3 * float(expected.abs().max()))
        readout = opened.maps([image_id], "readout:3")[0].astype(np.float64)
        head = dense(result.attentions[-1][:, 3], layouts[-1])
        expected = (head.mean(dim=0) @ carry).reshape(16, 16)
        torch.testing.assert_close(torch.from_numpy(readout), expected, rtol=0, atol=2e-3 * float(expected.max()))
        table = opened.query(f"SELECT layer, head, entropy FROM heads WHERE image_id = {image_id} AND layer = 5")
        mine = window_head_statistics(result.attentions, layouts).entropy[0, 5]
        np.testing.assert_allclose(table["entropy"], mine.numpy(), rtol=1e-4)
        np.testing.assert_allclose(per_image[image_id, 5], mine.numpy(), rtol=1e-4)
        np.testing.assert_allclose(opened.embeddings([image_id])[0], result.pooled[0].numpy(), rtol=1e-4, atol=1e-5)
        if image_id == 0:  # one image's relevance for the top class, as vitviz explain computes it
            relevance = method_maps(model, pixels, ["relevance"], int(result.logits.argmax())).maps["relevance"]
            np.testing.assert_allclose(opened.maps([image_id], "relevance")[0], relevance, rtol=2e-3, atol=1e-3)
            target = int(result.logits.argmax())
            curves = vitviz.explain.faithfulness(model, pixels, torch.from_numpy(relevance.numpy()), target)
            areas = "SELECT faithfulness_most_first AS m, faithfulness_least_first AS l FROM images ORDER BY image_id"
            stored = opened.query(areas)
            assert stored["m"][0] == pytest.approx(curves["auc_most_first"], abs=1e-3)
            assert stored["l"][0] == pytest.approx(curves["auc_least_first"], abs=1e-3)


def test_the_folder_is_a_swin_whose_grid_the_maps_use(model_folder):
    model = vitviz.load_model(str(model_folder))
    with torch.no_grad():
        out = model(torch.zeros(1, 3, 32, 32), output_attentions=True)
    assert out.stage_grids == ((16, 16), (8, 8), (4, 4))
