"""Training and evaluation CLIs on a tiny generated image folder."""

import io
import json
import math
import subprocess
import sys

import pytest
import torch
from PIL import Image

import vitviz.training.train as train_module
from vitviz import load_model
from vitviz.commands import train as train_command
from vitviz.commands.evaluate import main as evaluate_main
from vitviz.commands.train import main as train_main
from vitviz.render.curves import main as curves_main
from vitviz.render.curves import plot_curves, read_history
from vitviz.training.metrics import classification_metrics, confusion_matrix

CLASSES = {"blue": (20, 40, 230), "green": (30, 200, 40), "red": (230, 30, 30)}
SMALL_MODEL = [
    "--image-size",
    "16",
    "--patch-size",
    "4",
    "--hidden-size",
    "32",
    "--num-layers",
    "2",
    "--num-heads",
    "2",
    "--mlp-size",
    "64",
    "--workers",
    "0",
    "--precision",
    "fp32",
    "--batch-size",
    "8",
    "--augment",
    "none",
    "--lr",
    "3e-3",
    "--warmup-epochs",
    "0",
    "--drop-path",
    "0",
]


def make_folder(root, per_class=8, classes=CLASSES):
    generator = torch.Generator().manual_seed(len(str(root)))
    for name, color in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            noise = torch.randint(-40, 40, (16, 16, 3), generator=generator)
            pixels = (torch.tensor(color) + noise).clamp(0, 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture()
def folders(tmp_path):
    return make_folder(tmp_path / "train"), make_folder(tmp_path / "val", per_class=4)


def train(folders, out, *extra):
    train_dir, val_dir = folders
    argv = ["--dataset", "imagefolder", "--train-dir", str(train_dir), "--val-dir", str(val_dir), "--out", str(out)]
    return train_main(argv + SMALL_MODEL + list(extra))


def test_training_lowers_the_loss_and_writes_metrics(folders, tmp_path):
    result = train(folders, tmp_path / "run", "--epochs", "4")
    losses = [record["train_loss"] for record in result["history"]]
    assert losses[-1] < losses[0] * 0.9
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2, 3, 4]
    for key in ("train_loss", "val_loss", "val_top1", "val_macro_precision", "val_macro_recall", "val_macro_f1"):
        assert all(0 <= line[key] < 10 for line in lines)
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"best.pt", "last.pt", "metrics.jsonl", "curves.png"}


def test_trained_checkpoint_loads_and_predicts(folders, tmp_path):
    result = train(folders, tmp_path / "run", "--epochs", "6", "--lr", "5e-3")
    model = load_model(tmp_path / "run" / "best.pt")
    assert model.class_names == sorted(CLASSES)
    assert model.training_info["epoch"] >= 1 and model.training_info["args"]["dataset"] == "imagefolder"
    pixels = model.transform(Image.new("RGB", (40, 40), CLASSES["red"]))
    with torch.no_grad():
        probabilities = model(pixels[None]).logits.softmax(-1)[0]
    assert probabilities.shape == (3,)
    assert result["best_top1"] == max(r["val_top1"] for r in result["history"])


def test_resume_continues_from_the_saved_epoch_and_step(folders, tmp_path, capsys):
    first = train(folders, tmp_path / "run", "--epochs", "3", "--max-steps-per-epoch", "2")
    assert first["history"][-1]["step"] == 6
    # pretend the run stopped after epoch 2: rewrite last.pt from an interrupted run
    interrupted = train(folders, tmp_path / "cut", "--epochs", "3", "--max-steps-per-epoch", "2", "--lr", "1e-3")
    resumed = train(
        folders,
        tmp_path / "cut",
        "--epochs",
        "5",
        "--max-steps-per-epoch",
        "2",
        "--lr",
        "1e-3",
        "--resume",
        str(tmp_path / "cut" / "last.pt"),
    )
    assert "resumed from" in capsys.readouterr().out
    assert [r["epoch"] for r in resumed["history"]] == [4, 5]
    assert [r["step"] for r in resumed["history"]] == [8, 10]
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4, 5] and interrupted["history"][-1]["epoch"] == 3


def test_resume_refuses_a_different_model(folders, tmp_path):
    train(folders, tmp_path / "run", "--epochs", "1", "--max-steps-per-epoch", "1")
    with pytest.raises(SystemExit, match="trained with config"):
        train(
            folders,
            tmp_path / "run",
            "--epochs",
            "2",
            "--num-layers",
            "3",
            "--resume",
            str(tmp_path / "run" / "last.pt"),
        )


def test_evaluate_writes_accuracy_and_confusion_matrix(folders, tmp_path, capsys):
    train(folders, tmp_path / "run", "--epochs", "2")
    scores = evaluate_main(
        [
            str(tmp_path / "run" / "best.pt"),
            "--val-dir",
            str(folders[1]),
            "--out",
            str(tmp_path / "eval"),
            "--workers",
            "0",
        ]
    )
    printed = capsys.readouterr().out
    assert "top-1 accuracy" in printed and "confusion matrix" in printed
    matrix = scores["confusion_matrix"]
    assert sum(map(sum, matrix)) == 12 and [sum(row) for row in matrix] == [4, 4, 4]
    csv_rows = (tmp_path / "eval" / "confusion_matrix.csv").read_text().splitlines()
    assert csv_rows[0].split(",")[1:] == sorted(CLASSES) and len(csv_rows) == 4
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["accuracy"] == pytest.approx(sum(matrix[i][i] for i in range(3)) / 12)


def test_bad_arguments_exit_with_a_message(folders, tmp_path, capsys):
    train_dir, val_dir = folders
    (tmp_path / "empty").mkdir()
    make_folder(tmp_path / "one", classes={"only": (1, 2, 3)})
    cases = [
        (["--dataset", "imagefolder", "--val-dir", str(val_dir)], "needs --train-dir"),
        (
            ["--dataset", "imagefolder", "--train-dir", str(tmp_path / "nope"), "--val-dir", str(val_dir)],
            "is not a folder",
        ),
        (
            ["--dataset", "imagefolder", "--train-dir", str(tmp_path / "empty"), "--val-dir", str(val_dir)],
            "Couldn't find any class folder",
        ),
        (
            ["--dataset", "imagefolder", "--train-dir", str(tmp_path / "one"), "--val-dir", str(val_dir)],
            "at least 2 are needed",
        ),
        (
            ["--dataset", "imagefolder", "--train-dir", str(train_dir), "--val-dir", str(val_dir), "--num-heads", "5"],
            "not divisible by num_heads",
        ),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit, match=message):
            train_main(argv + ["--workers", "0"])
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--epochs", "0"])
    assert exit_info.value.code == 2 and "--epochs must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not found"):
        evaluate_main([str(tmp_path / "missing.pt"), "--val-dir", str(val_dir)])


def test_data_on_device_lowers_the_loss_with_every_augmentation_on(folders, tmp_path):
    # the whole data set as one uint8 tensor on --device (the CPU here), shuffled and augmented there
    result = train(
        folders,
        tmp_path / "run",
        "--epochs",
        "4",
        "--data-on-device",
        "--augment",
        "trivialaugment",
        "--random-erasing",
        "0.25",
        "--mixup",
        "0.8",
        "--cutmix",
        "1.0",
    )
    losses = [record["train_loss"] for record in result["history"]]
    assert losses[-1] < losses[0] * 0.9
    assert [record["step"] for record in result["history"]] == [3, 6, 9, 12]  # 24 images, batches of 8
    model = load_model(tmp_path / "run" / "best.pt")
    assert model.training_info["args"]["data_on_device"] is True


def test_recipe_sets_defaults_and_explicit_flags_still_win():
    args = train_command.parse_args(["--recipe", "cifar10-gpu"])
    assert (args.preset, args.patch_size, args.image_size) == ("cifar", 2, 32)
    assert args.data_on_device and args.compile and args.half_checkpoints and args.precision == "bf16"
    assert (args.augment, args.mixup, args.cutmix, args.random_erasing) == ("trivialaugment", 0.8, 1.0, 0.25)
    config = train_module.build_config(args, 10)
    assert config.grid_size == (16, 16) and config.hidden_size == 384  # 256 patches
    overridden = train_command.parse_args(
        ["--recipe", "cifar10-gpu", "--patch-size", "4", "--no-compile", "--epochs", "3"]
    )
    assert (overridden.patch_size, overridden.compile, overridden.epochs, overridden.lr) == (4, False, 3, 1e-3)
    assert train_command.parse_args([]).data_on_device is False  # no recipe: the plain defaults


def test_recipe_trains_and_stores_half_precision_weights(folders, tmp_path):
    # the GPU recipe's data path and augmentation with a model the CPU trains in seconds (SMALL_MODEL sets the
    # model's size and the optimiser; --augment puts the recipe's TrivialAugment back)
    train(
        folders,
        tmp_path / "run",
        "--recipe",
        "cifar10-gpu",
        "--no-compile",
        "--device",
        "cpu",
        "--epochs",
        "2",
        "--image-size",
        "16",
        "--patch-size",
        "4",
        "--warmup-epochs",
        "0",
        "--precision",
        "fp32",
        "--augment",
        "trivialaugment",
    )
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    assert {tensor.dtype for tensor in best["state_dict"].values() if tensor.is_floating_point()} == {torch.float16}
    saved = best["training"]["args"]
    assert saved["recipe"] == "cifar10-gpu" and saved["mixup"] == 0.8 and saved["data_on_device"] is True
    assert saved["augment"] == "trivialaugment" and saved["random_erasing"] == 0.25 and saved["mix_prob"] == 0.5
    assert load_model(tmp_path / "run" / "best.pt").config.grid_size == (4, 4)


def test_bad_augmentation_and_device_values_exit_with_a_message(capsys):
    cases = [
        (["--random-erasing", "1.5"], "--random-erasing and --mix-prob must be in [0, 1]"),
        (["--mixup", "-1"], "--mixup and --cutmix >= 0"),
        (["--mix-prob", "2"], "--mix-prob must be in [0, 1]"),
        (["--cutmix", "nan"], "--cutmix must be a finite number"),
        (["--lr", "inf"], "--lr must be a finite number"),
        (["--data-on-device", "--no-preload"], "cannot go with --no-preload"),
        (["--device", "nonsense"], "--device nonsense"),
    ]
    if not torch.cuda.is_available():  # before any image is decoded, not after
        cases.append((["--device", "cuda"], "no cuda device torch can use; try --device cpu"))
    for flags, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            train_command.parse_args(flags)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, flags


@pytest.mark.parametrize(("mix_prob", "expected"), [("0", 0), ("1", 12), ("0.5", None)])
def test_mix_prob_is_the_share_of_batches_that_get_mixed(folders, tmp_path, monkeypatch, mix_prob, expected):
    mixed = []

    class Counting(train_module.v2.RandomChoice):
        def forward(self, *inputs):
            mixed.append(1)
            return super().forward(*inputs)

    monkeypatch.setattr(train_module.v2, "RandomChoice", Counting)
    train(folders, tmp_path / "run", "--epochs", "4", "--mixup", "0.8", "--cutmix", "1.0", "--mix-prob", mix_prob)
    if expected is None:  # 12 steps (3 a epoch), each mixed with probability one half
        assert 2 <= len(mixed) <= 10
    else:
        assert len(mixed) == expected


def test_metrics_known_answer():
    targets = torch.tensor([0, 0, 1, 1, 2, 2])
    predictions = torch.tensor([0, 1, 1, 1, 2, 0])
    assert confusion_matrix(predictions, targets, 3).tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    scores = classification_metrics(predictions, targets, 3)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["per_class_accuracy"] == pytest.approx([0.5, 1.0, 0.5])
    # precision: class 0 1/2, class 1 2/3, class 2 1/1
    assert scores["macro_precision"] == pytest.approx((0.5 + 2 / 3 + 1) / 3)
    f1 = [2 * p * r / (p + r) for p, r in [(0.5, 0.5), (2 / 3, 1.0), (1.0, 0.5)]]
    assert scores["macro_f1"] == pytest.approx(sum(f1) / 3)


def test_elapsed_time_accumulates_across_resumes(folders, tmp_path):
    first = train(folders, tmp_path / "run", "--epochs", "1", "--max-steps-per-epoch", "1")
    resumed = train(
        folders,
        tmp_path / "run",
        "--epochs",
        "2",
        "--max-steps-per-epoch",
        "1",
        "--resume",
        str(tmp_path / "run" / "last.pt"),
    )
    assert resumed["history"][0]["elapsed_s"] > first["history"][0]["elapsed_s"]


@pytest.mark.parametrize(
    "data",
    [(), ("--data-on-device", "--augment", "trivialaugment", "--random-erasing", "0.5")],
    ids=["dataloader", "data-on-device"],
)
def test_an_interrupted_run_resumed_ends_exactly_where_an_uninterrupted_one_does(folders, tmp_path, monkeypatch, data):
    # augmentation and shuffling draw random numbers every epoch: resuming must restore them
    flags = ("--epochs", "3", "--max-steps-per-epoch", "2", "--augment", "basic", *data)
    train(folders, tmp_path / "straight", *flags)

    import vitviz.training.train as train_module

    save_last = train_module._save_last

    def save_then_stop(path, model, classes, preprocessing, training, *rest):
        save_last(path, model, classes, preprocessing, training, *rest)
        if training["epoch"] == 2:
            raise KeyboardInterrupt  # as if the session ended after epoch 2

    monkeypatch.setattr(train_module, "_save_last", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(folders, tmp_path / "cut", *flags)
    monkeypatch.setattr(train_module, "_save_last", save_last)
    torch.manual_seed(12345)  # whatever the global generator holds now must not matter
    train(folders, tmp_path / "cut", *flags, "--resume", str(tmp_path / "cut" / "last.pt"))

    straight = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)["state_dict"]
    resumed = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["state_dict"]
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name


def test_init_from_starts_from_the_saved_weights_with_a_fresh_schedule(folders, tmp_path, capsys):
    first = train(folders, tmp_path / "first", "--epochs", "4")
    # a learning rate too small to move the weights: the first epoch scores what the source scored
    second = train(
        folders,
        tmp_path / "second",
        "--epochs",
        "1",
        "--max-steps-per-epoch",
        "1",
        "--lr",
        "1e-12",
        "--init-from",
        str(tmp_path / "first" / "last.pt"),
    )
    assert "initialised from" in capsys.readouterr().out
    assert second["history"][0]["val_loss"] == pytest.approx(first["history"][-1]["val_loss"], rel=1e-4)
    assert second["history"][0]["step"] == 1  # the schedule starts again
    with pytest.raises(SystemExit, match="pass the same model flags"):
        train(
            folders,
            tmp_path / "third",
            "--epochs",
            "1",
            "--hidden-size",
            "16",
            "--init-from",
            str(tmp_path / "first" / "last.pt"),
        )
    with pytest.raises(SystemExit) as exit_info:
        train(
            folders,
            tmp_path / "third",
            "--epochs",
            "1",
            "--init-from",
            str(tmp_path / "first" / "last.pt"),
            "--resume",
            str(tmp_path / "first" / "last.pt"),
        )
    assert exit_info.value.code == 2 and "exclude each other" in capsys.readouterr().err


def test_init_from_accepts_a_checkpoint_saved_before_newer_config_fields(folders, tmp_path, capsys):
    train(folders, tmp_path / "first", "--epochs", "1", "--max-steps-per-epoch", "1")
    old = torch.load(tmp_path / "first" / "last.pt", weights_only=True)
    for field in ("layer_scale", "activation", "fc_norm", "norm_pre"):  # fields added after the shipped default
        old["config"].pop(field)
    torch.save(old, tmp_path / "old.pt")
    train(
        folders,
        tmp_path / "second",
        "--epochs",
        "1",
        "--max-steps-per-epoch",
        "1",
        "--init-from",
        str(tmp_path / "old.pt"),
    )
    assert "initialised from" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="hidden_size=.* there, 16 here.*pass the same model flags"):
        train(
            folders, tmp_path / "third", "--epochs", "1", "--hidden-size", "16", "--init-from", str(tmp_path / "old.pt")
        )


def test_attention_flag_picks_the_kernel(folders, tmp_path, monkeypatch):
    import vitviz.training.train as train_module

    seen = []
    build = train_module.build_optimizer
    monkeypatch.setattr(
        train_module, "build_optimizer", lambda model, *a: seen.append(model.attn_implementation) or build(model, *a)
    )
    for choice, expected in [("auto", "eager"), ("sdpa", "sdpa"), ("eager", "eager")]:  # auto on the CPU: eager
        train(folders, tmp_path / choice, "--epochs", "1", "--max-steps-per-epoch", "1", "--attention", choice)
    assert seen == ["eager", "sdpa", "eager"]


def read_metrics(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def tensorboard_scalars(path):
    """{tag: [(step, value), ...]} of the event files in a folder (or of one event file), as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path))
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_logs_every_epoch_metric_and_the_learning_rate_of_every_step(folders, tmp_path):
    train(
        folders,
        tmp_path / "run",
        "--epochs",
        "2",
        "--max-steps-per-epoch",
        "3",
        "--warmup-epochs",
        "1",
        "--tensorboard",
        str(tmp_path / "tb"),
    )
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    scalars = tensorboard_scalars(tmp_path / "tb")
    metrics = [key for key in records[0] if key not in ("epoch", "step")]
    assert set(scalars) == {f"epoch/{key}" for key in metrics} | {"step/lr"}
    assert {"train_loss", "val_loss", "train_top1", "val_top1", "epoch_s", "elapsed_s"} <= set(metrics)
    for key in metrics:
        assert scalars[f"epoch/{key}"] == [(r["epoch"], pytest.approx(r[key], rel=1e-6)) for r in records], key
    # 3 warm-up steps up to the peak 3e-3, then a cosine over the other 3
    schedule = [(i + 1) / 3 if i < 3 else 0.5 * (1 + math.cos(math.pi * (i - 3) / 3)) for i in range(6)]
    assert scalars["step/lr"] == [(i + 1, pytest.approx(3e-3 * f, rel=1e-6)) for i, f in enumerate(schedule)]


def test_tensorboard_and_curves_continue_where_an_interrupted_run_stopped(folders, tmp_path, monkeypatch):
    flags = ("--epochs", "3", "--max-steps-per-epoch", "2", "--tensorboard", str(tmp_path / "tb"))
    evaluate = train_module.evaluate_loader
    calls = []

    def stop_in_epoch_2(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after epoch 2's steps, before its record and checkpoint
        return evaluate(*args)

    closed = []

    class Writer(train_module._summary_writer_class()):
        def close(self):
            closed.append(self.log_dir)
            super().close()

    monkeypatch.setattr(train_module, "_summary_writer_class", lambda: Writer)
    monkeypatch.setattr(train_module, "evaluate_loader", stop_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train(folders, tmp_path / "run", *flags)
    assert closed == [str(tmp_path / "tb")]  # also when training stops early
    (events_file,) = (tmp_path / "tb").iterdir()
    interrupted = tensorboard_scalars(events_file)
    assert [step for step, _ in interrupted["step/lr"]] == [1, 2, 3, 4]
    assert [step for step, _ in interrupted["epoch/val_loss"]] == [1]

    monkeypatch.setattr(train_module, "evaluate_loader", evaluate)
    plotted = []
    monkeypatch.setattr(train_module, "plot_curves", lambda history, _: plotted.append([r["epoch"] for r in history]))
    train(folders, tmp_path / "run", *flags, "--resume", str(tmp_path / "run" / "last.pt"))
    assert plotted == [[1, 2], [1, 2, 3]]  # the curves start at epoch 1, not at the resumed epoch
    assert len(closed) == 2
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3]
    scalars = tensorboard_scalars(tmp_path / "tb")
    # the interrupted run's steps 3 and 4 are replaced by the resumed run's, not shown twice
    schedule = [0.5 * (1 + math.cos(math.pi * i / 6)) for i in range(6)]
    assert scalars["step/lr"] == [(i + 1, pytest.approx(3e-3 * f, rel=1e-6)) for i, f in enumerate(schedule)]
    for key in ("train_loss", "val_top1", "lr"):
        assert scalars[f"epoch/{key}"] == [(r["epoch"], pytest.approx(r[key], rel=1e-6)) for r in records], key


def test_tensorboard_flag_without_the_package_fails_at_start_with_the_install_command(folders, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed: importing it raises ImportError
    for name in [name for name in sys.modules if name.startswith("torch.utils.tensorboard")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(SystemExit) as exit_info:
        train(folders, tmp_path / "run", "--epochs", "1", "--tensorboard", str(tmp_path / "tb"))
    message = str(exit_info.value.code)
    assert message.startswith("error: --tensorboard needs the tensorboard package") and "\n" not in message
    assert "pip install tensorboard" in message
    assert not (tmp_path / "run").exists() and not (tmp_path / "tb").exists()  # nothing loaded or trained


def test_curves_png_is_rewritten_after_every_epoch(folders, tmp_path, monkeypatch):
    save_last = train_module._save_last
    snapshots = []

    def snapshot_then_save(path, *rest):  # last.pt is saved after curves.png is drawn
        snapshots.append((path.parent / "curves.png").read_bytes())
        save_last(path, *rest)

    monkeypatch.setattr(train_module, "_save_last", snapshot_then_save)
    train(folders, tmp_path / "run", "--epochs", "2", "--max-steps-per-epoch", "1")
    assert len(snapshots) == 2 and snapshots[0] != snapshots[1]
    for data in snapshots:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG" and image.size == (1000, 400)
            image.verify()
    assert (tmp_path / "run" / "curves.png").read_bytes() == snapshots[1]
    assert not list((tmp_path / "run").glob("*.tmp"))


def epoch_records(*rows):
    return [dict(epoch=epoch, train_loss=a, val_loss=b, train_top1=c, val_top1=d) for epoch, a, b, c, d in rows]


def test_plot_curves_draws_training_and_validation_lines(tmp_path):
    first = epoch_records((1, 2.0, 2.1, 0.3, 0.25), (2, 1.5, 1.7, 0.5, 0.45), (3, 1.2, 1.5, 0.6, 0.5))
    second = first[:2] + epoch_records((3, 1.0, 1.9, 0.7, 0.4))
    plot_curves(first, tmp_path / "first.png")
    plot_curves(second, tmp_path / "second.png")
    plot_curves(first[:1], tmp_path / "one.png")  # a single epoch is drawn too
    with Image.open(tmp_path / "first.png") as image:
        colors = {color for _, color in image.convert("RGB").getcolors(1 << 20)}
    assert {(31, 119, 180), (255, 127, 14)} <= colors  # matplotlib's first two line colours: training, validation
    assert (tmp_path / "first.png").read_bytes() != (tmp_path / "second.png").read_bytes()
    assert (tmp_path / "one.png").read_bytes() != (tmp_path / "first.png").read_bytes()
    with pytest.raises(ValueError, match="no epochs"):
        plot_curves([], tmp_path / "none.png")


def test_read_history_keeps_the_latest_record_of_each_epoch(tmp_path):
    path = tmp_path / "metrics.jsonl"
    # epoch 2 ran again after a resume from epoch 1's last.pt, then a new run started in the same folder
    rows = epoch_records(
        (1, 2.0, 2.0, 0.1, 0.1), (2, 1.0, 1.0, 0.2, 0.2), (2, 0.9, 0.9, 0.3, 0.3), (3, 0.8, 0.8, 0.4, 0.4)
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_history(path) == [rows[0], rows[2], rows[3]]
    restarted = rows + epoch_records((1, 5.0, 5.0, 0.0, 0.0))
    path.write_text("".join(json.dumps(row) + "\n" for row in restarted))
    assert read_history(path) == restarted[-1:]


def test_curves_cli_redraws_from_a_metrics_file_and_explains_bad_ones(tmp_path, capsys):
    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.parent.mkdir()
    rows = epoch_records((1, 2.0, 2.1, 0.3, 0.25), (2, 1.5, 1.7, 0.5, 0.45))
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert curves_main([str(metrics)]) == tmp_path / "run" / "curves.png"
    assert "wrote" in capsys.readouterr().out
    curves_main([str(metrics), "-o", str(tmp_path / "other.png")])
    for path in (tmp_path / "run" / "curves.png", tmp_path / "other.png"):
        with Image.open(path) as image:
            assert image.format == "PNG"

    good = json.dumps(rows[0])
    cases = [
        ("", "has no epoch records"),
        (good + "\n{not json\n", "metrics.jsonl, line 2: not JSON"),
        (good + "\n[1, 2]\n", "line 2: not an epoch record"),
        (json.dumps({**rows[0], "val_top1": None}) + "\n", "line 1: not an epoch record .no number for val_top1"),
    ]
    for text, message in cases:
        metrics.write_text(text)
        with pytest.raises(SystemExit, match=message):
            curves_main([str(metrics)])
    with pytest.raises(SystemExit, match="missing.jsonl is not a file"):
        curves_main([str(tmp_path / "missing.jsonl")])
    # as a command: one line on stderr, no traceback
    done = subprocess.run(
        [sys.executable, "-m", "vitviz.render.curves", str(tmp_path / "missing.jsonl")], capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
