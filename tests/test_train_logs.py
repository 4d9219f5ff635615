"""What training writes as it goes: metrics files, TensorBoard scalars and the curves picture, across resumes."""

import io
import json
import math
import subprocess
import sys

import pytest
from PIL import Image
from training_harness import make_folder, train

import vitviz.training.train as train_module
from vitviz.render.curves import main as curves_main
from vitviz.render.curves import plot_curves, read_history


@pytest.fixture()
def folders(tmp_path):
    return make_folder(tmp_path / "train"), make_folder(tmp_path / "val", per_class=4)


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
