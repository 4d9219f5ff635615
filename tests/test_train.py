"""Training and evaluation CLIs on a tiny generated image folder: loss, checkpoints, resume, recipes, arguments."""

import json

import pytest
import torch
from PIL import Image
from training_harness import CLASSES, make_folder, train

import vitviz.training.train as train_module
from vitviz import load_model
from vitviz.commands import train as train_command
from vitviz.commands.evaluate import main as evaluate_main
from vitviz.commands.train import main as train_main
from vitviz.training.metrics import classification_metrics, confusion_matrix


def short(epochs: int, steps: int) -> list[str]:
    """The options of a short run: ``epochs`` epochs of at most ``steps`` steps each."""
    return ["--epochs", str(epochs), "--max-steps-per-epoch", str(steps)]


@pytest.fixture()
def folders(tmp_path):
    return make_folder(tmp_path / "train"), make_folder(tmp_path / "val", per_class=4)


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
    first = train(folders, tmp_path / "run", *short(3, 2))
    assert first["history"][-1]["step"] == 6
    # pretend the run stopped after epoch 2: rewrite last.pt from an interrupted run
    interrupted = train(folders, tmp_path / "cut", *short(3, 2), "--lr", "1e-3")
    last = str(tmp_path / "cut" / "last.pt")
    resumed = train(folders, tmp_path / "cut", *short(5, 2), "--lr", "1e-3", "--resume", last)
    assert "resumed from" in capsys.readouterr().out
    assert [r["epoch"] for r in resumed["history"]] == [4, 5]
    assert [r["step"] for r in resumed["history"]] == [8, 10]
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4, 5] and interrupted["history"][-1]["epoch"] == 3


def test_resume_refuses_a_different_model(folders, tmp_path):
    train(folders, tmp_path / "run", *short(1, 1))
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
    first = train(folders, tmp_path / "run", *short(1, 1))
    resumed = train(
        folders,
        tmp_path / "run",
        *short(2, 1),
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
    flags = (*short(3, 2), "--augment", "basic", *data)
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
    source = str(tmp_path / "first" / "last.pt")
    second = train(folders, tmp_path / "second", *short(1, 1), "--lr", "1e-12", "--init-from", source)
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
    train(folders, tmp_path / "first", *short(1, 1))
    old = torch.load(tmp_path / "first" / "last.pt", weights_only=True)
    for field in ("layer_scale", "activation", "fc_norm", "norm_pre"):  # fields added after the shipped default
        old["config"].pop(field)
    torch.save(old, tmp_path / "old.pt")
    train(
        folders,
        tmp_path / "second",
        *short(1, 1),
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
    for choice in ("auto", "sdpa", "eager"):  # auto on the CPU: eager
        train(folders, tmp_path / choice, *short(1, 1), "--attention", choice)
    assert seen == ["eager", "sdpa", "eager"]
