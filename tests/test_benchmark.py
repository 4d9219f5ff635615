"""The faithfulness protocols on toy models with known answers, and `vitviz benchmark` on a generated folder:
its areas, resuming, and one process against `torchrun --nproc_per_node 2` (identical numbers)."""

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_models import tiny_checkpoint

from vitviz.commands import benchmark
from vitviz.explain.faithfulness import CHEFER_FRACTIONS, chefer_auc, chefer_perturbation, deletion_insertion
from vitviz.model.precision import PrecisionChoice

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
BLACK = -2.0  # (0 - 0.5) / 0.25: a pixel set to 0 before normalisation


class CornerModel(torch.nn.Module):
    """Predicts class 0 while the top-left pixel is not black, else class 1."""

    def forward(self, x):
        alive = (x[:, :, 0, 0] != BLACK).any(dim=1).float()
        return SimpleNamespace(logits=torch.stack([alive, torch.full_like(alive, 0.5)], dim=1))


class BrightnessModel(torch.nn.Module):
    """Class 0's logit is the sum of the image's pixels above black, weighted by ``weights`` (H, W)."""

    def __init__(self, weights):
        super().__init__()
        self.weights = weights

    def forward(self, x):
        score = ((x - BLACK).sum(dim=1) * self.weights).sum(dim=(1, 2))
        return SimpleNamespace(logits=torch.stack([score, torch.zeros_like(score)], dim=1))


class ConstantModel(torch.nn.Module):
    """Predicts class 0 whatever it is shown."""

    def forward(self, x):
        return SimpleNamespace(logits=torch.tensor([[1.0, 0.0]]).expand(len(x), 2))


def test_chefer_fractions_are_the_authors_x_axis():
    assert CHEFER_FRACTIONS == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])


def test_chefer_a_model_that_stays_right_scores_90_on_both_tests():
    torch.manual_seed(2)
    image, relevance, labels = torch.randn(3, 3, 16, 16), torch.rand(3, 4, 4), torch.tensor([0, 0, 0])
    for negative in (False, True):
        hits = chefer_perturbation(ConstantModel(), image, relevance, labels, MEAN, STD, negative=negative)
        assert hits.shape == (10, 3) and hits.all()
        assert chefer_auc(hits.float().mean(dim=1)) == pytest.approx(90.0)


def test_chefer_a_perfect_map_on_a_model_that_reads_one_pixel_scores_5_and_90():
    image = torch.ones(1, 3, 16, 16)  # normalised value 1 everywhere: not black
    toward_corner = torch.zeros(1, 4, 4)
    toward_corner[0, 0, 0] = 1.0  # the map names the corner patch
    labels = torch.tensor([0])
    positive = chefer_perturbation(CornerModel(), image, toward_corner, labels, MEAN, STD)
    negative = chefer_perturbation(CornerModel(), image, toward_corner, labels, MEAN, STD, negative=True)
    # 0 % removed is the intact image: right; the corner goes first: wrong from 10 % on
    assert positive.shape == (10, 1) and positive[:, 0].tolist() == [True] + [False] * 9
    assert negative.all()  # the corner goes last: still there at 90 %
    # positive: the trapezoid 0.5 * (1 + 0) * 0.1 * 100 = 5; negative: 100 % over 0-90 %, 90
    assert chefer_auc(positive[:, 0].float()) == pytest.approx(5.0)
    assert chefer_auc(negative[:, 0].float()) == pytest.approx(90.0)


def test_chefer_auc_is_the_authors_trapezoid():
    """Chefer et al.'s area, written as they did: np.trapz(y, x) * 100 over x = 0, 0.1, ..., 0.9 (np.trapz is
    np.trapezoid since NumPy 2.0)."""
    trapz = getattr(np, "trapezoid", None) or np.trapz
    x = np.arange(0, 1, 0.1)
    rng = np.random.default_rng(3)
    for _ in range(20):
        y = rng.random(10)
        assert chefer_auc(torch.tensor(y)) == pytest.approx(trapz(y, x) * 100, rel=1e-12)
    y = np.sort(rng.random(10))[::-1].copy()  # a falling curve, as positive tests give
    assert chefer_auc(torch.tensor(y)) == pytest.approx(trapz(y, x) * 100, rel=1e-12)
    with pytest.raises(ValueError, match="one value per fraction"):
        chefer_auc(torch.rand(9))  # a curve without the intact point


def test_chefer_removes_int_of_the_fraction_of_pixels_set_to_black():
    """Against a loop written from the released evaluation: top int(H*W*f) upsampled pixels set to 0."""
    torch.manual_seed(0)
    image, relevance = torch.randn(2, 3, 16, 24), torch.rand(2, 2, 3)
    removed = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            removed.append((x == BLACK).all(dim=1).flatten(1).sum(dim=1))
            return SimpleNamespace(logits=torch.zeros(len(x), 2))

    chefer_perturbation(Spy(), image, relevance, torch.tensor([0, 0]), MEAN, STD)
    expected = [int(16 * 24 * f) for f in CHEFER_FRACTIONS for _ in range(2)]
    assert removed[0].tolist() == expected
    # which pixels: the largest of the bilinear upsampling
    up = torch.nn.functional.interpolate(relevance[:, None], size=(16, 24), mode="bilinear")[:, 0]
    batch = []
    Spy.forward = lambda self, x: batch.append(x) or SimpleNamespace(logits=torch.zeros(len(x), 2))
    chefer_perturbation(Spy(), image, relevance, torch.tensor([0, 0]), MEAN, STD)
    half = batch[0][CHEFER_FRACTIONS.index(0.5) * 2 + 1]  # fraction 0.5, second image
    threshold = up[1].flatten().sort(descending=True).values[int(16 * 24 * 0.5) - 1]
    assert torch.equal((half == BLACK).all(dim=0), up[1] >= threshold)


def test_deletion_and_insertion_against_a_loop():
    torch.manual_seed(1)
    weights = torch.rand(8, 8)
    model = BrightnessModel(weights)
    image, relevance = torch.randn(1, 3, 8, 8), torch.rand(2, 2)
    result = deletion_insertion(model, image, relevance, 0, MEAN, STD, steps=4)
    up = torch.nn.functional.interpolate(relevance[None, None], size=(8, 8), mode="bilinear")[0, 0].flatten()
    order = sorted(range(64), key=lambda i: (-float(up[i]), i))
    from vitviz.explain.faithfulness import gaussian_blur

    blurred = gaussian_blur(image, 11, 5.0)
    for k in range(5):
        chosen = order[: round(64 * k / 4)]
        deleted, inserted = image.clone(), blurred.clone()
        for i in chosen:
            deleted[0, :, i // 8, i % 8] = BLACK
            inserted[0, :, i // 8, i % 8] = image[0, :, i // 8, i % 8]
        for kind, picture in (("deletion", deleted), ("insertion", inserted)):
            expected = model(picture).logits.softmax(dim=-1)[0, 0]
            assert result[kind][k] == pytest.approx(float(expected), rel=1e-5), (kind, k)
    assert result["deletion"][0] == pytest.approx(float(result["insertion"][-1]))  # both the intact image
    assert result["deletion_auc"] == pytest.approx(float(torch.trapezoid(result["deletion"], dx=0.25)))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Class sub-folders named after the tiny model's classes, with generated images, and the model."""
    root = tmp_path_factory.mktemp("bench")
    rng = np.random.default_rng(0)
    for label in ("cat", "dog", "bird"):
        (root / "data" / label).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (32, 32 + 8 * i, 3), dtype=np.uint8)).save(
                root / "data" / label / f"{i}.png"
            )
    return root / "data", tiny_checkpoint(root / "model.pt")


def run_benchmark(source, model, *options) -> int:
    """``vitviz benchmark SOURCE --model MODEL OPTIONS...`` in this process; returns its exit status."""
    return benchmark.main([str(source), "--model", str(model), *options])


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_benchmark_writes_every_output_and_its_areas_are_the_mean_curves(folder, tmp_path, capsys):
    data, checkpoint = folder
    assert (
        run_benchmark(
            data, checkpoint, "--methods", "rollout", "relevance", "--steps", "4", "--out", str(tmp_path / "out")
        )
        == 0
    )
    rows = read_csv(tmp_path / "out" / "results.csv")
    assert list(rows[0]) == benchmark.COLUMNS and [r["method"] for r in rows] == ["rollout", "relevance", "random"]
    assert all(r["n_images"] == "9" and r["protocol"] == "model" for r in rows)
    records = [json.loads(line) for line in (tmp_path / "out" / "images.jsonl").read_text().splitlines()]
    assert len(records) == 9 and all(r["label"] is not None for r in records)  # labels from the folders
    positive = torch.tensor([r["methods"]["relevance"]["positive"] for r in records], dtype=torch.float64).mean(0)
    assert float(rows[1]["positive_auc"]) == pytest.approx(chefer_auc(positive))
    deletion = torch.tensor([r["methods"]["rollout"]["deletion"] for r in records], dtype=torch.float64).mean(0)
    assert float(rows[0]["deletion_auc"]) == pytest.approx(float(torch.trapezoid(deletion, dx=0.25)))
    assert (tmp_path / "out" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "| relevance |" in (tmp_path / "out" / "results.md").read_text()
    assert not list((tmp_path / "out" / "partial").glob("*.jsonl"))


def test_chefer2021_protocol_resizes_the_whole_image_without_a_crop(tmp_path):
    """A 96 x 32 image (red, green and blue thirds) reaches the model squashed to its 32 x 32 input, whole; the
    model's own transform (shorter side to 32, centre crop) shows only the green third."""
    from torchvision.transforms import functional as TF

    from vitviz.loading import load_checkpoint

    model = load_checkpoint(tiny_checkpoint(tmp_path / "model.pt"))
    stripes = np.zeros((32, 96, 3), dtype=np.uint8)
    stripes[:, :32, 0] = stripes[:, 32:64, 1] = stripes[:, 64:, 2] = 255
    image = Image.fromarray(stripes)
    own, chefer = benchmark.protocol_transform(model, "model"), benchmark.protocol_transform(model, "chefer2021")
    assert own.crop is not None and chefer.crop is None and chefer.resize == (32, 32) and chefer.mean == own.mean
    cropped, squashed = own(image), chefer(image)
    assert cropped.shape == squashed.shape == (3, 32, 32)
    assert (cropped[1] > 0).all() and (cropped[[0, 2]] < 0).all()  # the middle third only (0.5 is the mean)
    assert (squashed[0, :, :9] > 0).all() and (squashed[1, :, 12:20] > 0).all() and (squashed[2, :, -9:] > 0).all()
    whole = TF.pil_to_tensor(image.resize((32, 32), Image.BILINEAR)).float() / 255  # as Resize((32, 32)) does
    assert torch.allclose(squashed, (whole - 0.5) / 0.25, atol=1e-5)
    assert chefer.crop_box(96, 32) == (0.0, 0.0, 96.0, 32.0)  # a map drawn on the image covers all of it
    with pytest.raises(ValueError, match="protocol"):
        benchmark.protocol_transform(model, "chefer")


def test_benchmark_with_chefer2021_feeds_whole_squashed_images_and_labels_its_results(folder, tmp_path, monkeypatch):
    data, checkpoint = folder  # images 32 x 32, 40 x 32 and 48 x 32: the model's own transform crops the wider ones
    seen = {}
    evaluate = benchmark.evaluate_image

    def spy(model, pixels, label, name, args):
        seen[name] = pixels.clone()
        return evaluate(model, pixels, label, name, args)

    monkeypatch.setattr(benchmark, "evaluate_image", spy)
    args = [str(data), "--model", str(checkpoint), "--methods", "rollout", "--steps", "2"]
    assert benchmark.main([*args, "--protocol", "chefer2021", "--out", str(tmp_path / "out")]) == 0
    assert len(seen) == 9
    for name, pixels in seen.items():
        image = Image.open(data / name).convert("RGB")
        expected = torch.tensor(np.asarray(image.resize((32, 32), Image.BILINEAR)), dtype=torch.float32)
        assert pixels.shape == (1, 3, 32, 32)
        assert torch.allclose(pixels[0], (expected.permute(2, 0, 1) / 255 - 0.5) / 0.25, atol=1e-5), name
    assert all(row["protocol"] == "chefer2021" for row in read_csv(tmp_path / "out" / "results.csv"))
    assert "protocol `chefer2021`" in (tmp_path / "out" / "results.md").read_text()
    records = [json.loads(line) for line in (tmp_path / "out" / "images.jsonl").read_text().splitlines()]
    assert all(r["protocol"] == "chefer2021" and len(r["methods"]["rollout"]["positive"]) == 10 for r in records)
    with pytest.raises(SystemExit, match="--protocol chefer2021"):  # resuming with the other protocol would mix them
        benchmark.main([*args, "--out", str(tmp_path / "out")])


def test_resuming_refuses_records_made_with_other_settings(folder, tmp_path):
    data, checkpoint = folder
    args = [str(data), "--model", str(checkpoint), "--methods", "cls", "--steps", "2", "--out", str(tmp_path / "out")]
    benchmark.main(args)
    lines = (tmp_path / "out" / "images.jsonl").read_text().splitlines()
    old = json.loads(lines[0])
    old.pop("protocol")
    for curves in old["methods"].values():  # as vitviz wrote them before the 0 % point: 10 %..90 % only
        curves["positive"], curves["negative"] = curves["positive"][1:], curves["negative"][1:]
    (tmp_path / "out" / "images.jsonl").write_text("\n".join([json.dumps(old), *lines[1:]]) + "\n")
    with pytest.raises(SystemExit, match="start at 10 %"):
        benchmark.main(args)
    (tmp_path / "out" / "images.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match="--steps 2"):
        benchmark.main([*args, "--steps", "4"])


def test_an_interrupted_benchmark_resumes_where_it_stopped(folder, tmp_path, monkeypatch):
    data, checkpoint = folder
    args = [str(data), "--model", str(checkpoint), "--methods", "cls", "--steps", "2"]
    benchmark.main([*args, "--out", str(tmp_path / "straight")])
    calls = []
    evaluate = benchmark.evaluate_image

    def interrupted(*a, **k):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(a[3])
        return evaluate(*a, **k)

    monkeypatch.setattr(benchmark, "evaluate_image", interrupted)
    with pytest.raises(KeyboardInterrupt):
        benchmark.main([*args, "--out", str(tmp_path / "resumed")])
    monkeypatch.setattr(benchmark, "evaluate_image", lambda *a, **k: calls.append(a[3]) or evaluate(*a, **k))
    benchmark.main([*args, "--out", str(tmp_path / "resumed")])
    assert len(calls) == 9 and len(set(calls)) == 9  # each image once: 4 before the interruption, 5 after
    straight, resumed = read_csv(tmp_path / "straight" / "results.csv"), read_csv(tmp_path / "resumed" / "results.csv")
    for a, b in zip(straight, resumed):
        assert {k: v for k, v in a.items() if k != "ms_per_image"} == {
            k: v for k, v in b.items() if k != "ms_per_image"
        }


@pytest.mark.slow
def test_torchrun_with_two_processes_gives_the_numbers_of_one(folder, tmp_path):
    data, checkpoint = folder
    args = [str(data), "--model", str(checkpoint), "--methods", "rollout", "relevance", "--steps", "2"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as torchrun gives each process: float sums depend on how many threads split them
    try:
        benchmark.main([*args, "--out", str(tmp_path / "one")])
    finally:
        torch.set_num_threads(threads)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")} | {
        "OMP_NUM_THREADS": "1"
    }
    # its own process group, so that a timeout ends torchrun's workers too (killing torchrun alone would leave them)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "vitviz.commands.benchmark",
            *args,
            "--out",
            str(tmp_path / "two"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("torchrun with two processes took over 300 s")
    assert process.returncode == 0, stderr[-3000:]
    one, two = read_csv(tmp_path / "one" / "results.csv"), read_csv(tmp_path / "two" / "results.csv")
    for a, b in zip(one, two, strict=True):
        assert {k: v for k, v in a.items() if k != "ms_per_image"} == {
            k: v for k, v in b.items() if k != "ms_per_image"
        }


def test_imagenet_classifiers_read_labels_from_wordnet_id_folders(tmp_path):
    """timm's ImageNet-1k classifiers name their classes by description ("tench, Tinca tinca"); ImageNet's
    validation folders are named by WordNet id: the ids are their aliases, so accuracy is against the labels."""
    from timm.data import ImageNetInfo

    names = [str(name) for name in ImageNetInfo("imagenet-1k").label_descriptions()]
    aliases = benchmark.class_aliases(SimpleNamespace(prompt_set=None), names)
    assert len(aliases) == 1000 and aliases[:2] == ["n01440764", "n01443537"]
    paths = [tmp_path / "n01443537" / "ILSVRC2012_val_00000001.JPEG", tmp_path / "n01440764" / "b.JPEG"]
    assert benchmark.folder_labels(tmp_path, paths, names, aliases) == {paths[0]: 1, paths[1]: 0}
    assert benchmark.class_aliases(SimpleNamespace(prompt_set=None), ["cat", "dog"]) is None
    assert benchmark.class_aliases(SimpleNamespace(prompt_set=None), [*names[:-1], "something else"]) is None


def test_random_baseline_does_not_depend_on_order_or_process():
    a = benchmark.random_map((4, 4), "cat/1.png", seed=0)
    assert torch.equal(a, benchmark.random_map((4, 4), "cat/1.png", seed=0))
    assert not torch.equal(a, benchmark.random_map((4, 4), "cat/2.png", seed=0))
    assert not torch.equal(a, benchmark.random_map((4, 4), "cat/1.png", seed=1))


def test_limit_spreads_over_the_sorted_list():
    assert benchmark.spread(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert benchmark.spread(list(range(3)), 5) == [0, 1, 2]


def test_bad_input_gets_a_clear_error(folder, tmp_path, capsys):
    data, checkpoint = folder
    for bad, message in [([str(tmp_path / "nowhere")], "is not a folder"), ([str(data), "--limit", "0"], "at least 1")]:
        with pytest.raises(SystemExit) as exit_info:
            benchmark.main([*bad, "--model", str(checkpoint), "--out", str(tmp_path / "o")])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no classification head"):
        run_benchmark(data, tiny_checkpoint(tmp_path / "b.pt", names=()), "--out", str(tmp_path / "o"))
    unlabelled = tmp_path / "flat"
    unlabelled.mkdir()
    Image.new("RGB", (32, 32), (9, 9, 9)).save(unlabelled / "a.png")
    (unlabelled / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(SystemExit, match="--target label needs class sub-folders"):
        run_benchmark(unlabelled, checkpoint, "--target", "label", "--out", str(tmp_path / "o"))
    assert run_benchmark(unlabelled, checkpoint, "--methods", "cls", "--out", str(tmp_path / "u")) == 1
    assert "skipped" in capsys.readouterr().err
    assert "prediction on the intact image" in (tmp_path / "u" / "results.md").read_text()


def test_sanity_check_flags_the_map_that_ignores_the_model(folder, tmp_path):
    data, checkpoint = folder
    run_benchmark(
        data, checkpoint, "--methods", "relevance", "--steps", "2", "--sanity", "2", "--out", str(tmp_path / "out")
    )
    rows = {row["method"]: row for row in read_csv(tmp_path / "out" / "sanity.csv")}
    assert list(rows) == ["relevance", "random"] and list(rows["random"]) == ["method", "depth_0", "depth_1", "depth_2"]
    assert all(float(row["depth_0"]) == 1.0 for row in rows.values())  # nothing randomised yet
    assert float(rows["random"]["depth_2"]) == 1.0  # the random map never changes with the model
    assert float(rows["relevance"]["depth_2"]) < 0.5
    report = (tmp_path / "out" / "results.md").read_text()
    assert "| random | 1.00 | 1.00 | 1.00 | no |" in report and "| relevance | 1.00 |" in report


def test_precision_auto_is_decided_once_and_stated(folder, tmp_path, monkeypatch, capsys):
    data, checkpoint = folder
    calls = []

    def stub(choice, model):
        calls.append(choice)
        return "bf16", PrecisionChoice("bf16", 2.0, 1.0, "bf16 took 0.50x the time of fp32", 3)

    monkeypatch.setattr(benchmark, "resolve_precision", stub)
    assert (
        run_benchmark(
            data,
            checkpoint,
            "--methods",
            "rollout",
            "--limit",
            "2",
            "--steps",
            "2",
            "--precision",
            "auto",
            "--out",
            str(tmp_path / "out"),
        )
        == 0
    )
    assert calls == ["auto"]
    assert "in bf16" in (tmp_path / "out" / "results.md").read_text()
    assert "auto chose bf16" in capsys.readouterr().err
