"""Indexing runs that stop, restart, split or get bad input: resume after SIGKILL, torchrun with two processes, the
lock, and every refusal with its message."""

import json
import os
import signal
import time
import zipfile

import numpy as np
import pandas as pd
import pytest
from dataset_harness import make_images, run_index
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main
from vitviz.dataset import IndexBusyError, IndexFormatError
from vitviz.dataset.storage import folder_lock


def index_run(source, model, *options) -> int:
    """``vitviz index SOURCE --model MODEL OPTIONS...`` in this process; returns its exit status."""
    return main([str(source), "--model", str(model), *options])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return tiny_checkpoint(root / "model.pt"), make_images(root / "images", count=20), root


def assert_same_index(a, b):
    """Two indexes hold the same rows (each once) and arrays, to fp16 precision."""
    first, second = vitviz.open_index(a), vitviz.open_index(b)
    sql = "SELECT * EXCLUDE (top5_probabilities, probability) FROM images ORDER BY image_id"
    pd.testing.assert_frame_equal(first.query(sql), second.query(sql))
    ids = first.query("SELECT image_id FROM images")["image_id"]
    assert ids.is_unique and len(ids) == first.count == second.count
    heads = "SELECT * FROM heads ORDER BY image_id, layer, head"
    pd.testing.assert_frame_equal(first.query(heads), second.query(heads), rtol=1e-4)
    everything = list(range(first.count))
    for kind in ("rollout", "readout"):
        np.testing.assert_allclose(first.maps(everything, kind), second.maps(everything, kind), rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(first.features(everything), second.features(everything), rtol=2e-3, atol=2e-3)
    assert [s["count"] for s in first.shards] == [s["count"] for s in second.shards]


def test_resume_after_sigkill_equals_a_clean_run(setup, tmp_path):
    model, images, _ = setup
    files = sorted(p.relative_to(images).as_posix() for p in images.rglob("*.png"))
    listed = tmp_path / "list"
    listed.mkdir()
    for name in files:
        (listed / name).parent.mkdir(exist_ok=True)
        (listed / name).write_bytes((images / name).read_bytes())
    blocker = listed / files[13]
    blocker.unlink()
    os.mkfifo(blocker)  # reading it blocks: the run stops there, after its first shards, until killed
    pd.DataFrame({"path": files}).to_csv(listed / "list.csv", index=False)
    out = tmp_path / "killed"
    process = run_index(listed / "list.csv", "--model", model, "--out", out, "--shard-size", "4", "--batch-size", "3")
    deadline = time.monotonic() + 120
    while len(list((out / "shards").glob("00000[0-2]"))) < 3 and time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not json.loads((out / "manifest.json").read_text())["complete"]
    with pytest.raises(IndexFormatError, match="unfinished"):
        vitviz.open_index(out)
    blocker.unlink()
    blocker.write_bytes((images / files[13]).read_bytes())
    assert (
        index_run(listed / "list.csv", model, "--out", str(out), "--shard-size", "4", "--batch-size", "3", "--resume")
        == 0
    )
    clean = tmp_path / "clean"
    assert index_run(listed / "list.csv", model, "--out", str(clean), "--shard-size", "4", "--batch-size", "3") == 0
    assert_same_index(out, clean)
    with pytest.raises(SystemExit, match="already holds an index"):
        index_run(listed / "list.csv", model, "--out", str(clean))
    with pytest.raises(SystemExit, match=r"options .*'shard_size': 4.*this run has .*'shard_size': 8"):
        index_run(listed / "list.csv", model, "--out", str(clean), "--shard-size", "8", "--resume")
    other = tiny_checkpoint(tmp_path / "other.pt", num_register_tokens=1)  # other weights
    with pytest.raises(SystemExit, match="made with model .*'fingerprint'.*this run has .*'fingerprint'"):
        index_run(listed / "list.csv", other, "--out", str(clean), "--shard-size", "4", "--resume")


@pytest.mark.slow
def test_torchrun_two_processes_equal_one(setup, tmp_path):
    model, images, _ = setup
    process = run_index(images, "--model", model, "--out", tmp_path / "two", "--shard-size", "3", torchrun=2)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    assert index_run(images, model, "--out", str(tmp_path / "one"), "--shard-size", "3") == 0
    assert_same_index(tmp_path / "two", tmp_path / "one")


def test_a_second_run_on_the_same_folder_is_refused(setup, tmp_path):
    model, images, _ = setup
    with folder_lock(tmp_path / "busy"), pytest.raises(SystemExit, match=rf"another run \(pid {os.getpid()}\)"):
        index_run(images, model, "--out", str(tmp_path / "busy"))
    with pytest.raises(IndexBusyError), folder_lock(tmp_path / "b"), folder_lock(tmp_path / "b"):
        pass


def test_sources_zip_table_and_datasets(setup, tmp_path, monkeypatch):
    model, images, _ = setup
    files = sorted(p for p in images.rglob("*.png"))
    archive = tmp_path / "photos.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in files:
            z.write(path, "test/" + path.relative_to(images).as_posix())  # one wrapping folder, then classes
    assert index_run(archive, model, "--out", str(tmp_path / "zip")) == 0
    assert_same_index(tmp_path / "zip", _folder_index(model, images, tmp_path / "folder"))
    table = pd.DataFrame(
        {"file": [p.relative_to(images).as_posix() for p in files], "species": [p.parent.name for p in files]}
    )
    table.to_parquet(tmp_path / "list.parquet")
    assert (
        index_run(
            tmp_path / "list.parquet",
            model,
            "--out",
            str(tmp_path / "pq"),
            "--path-column",
            "file",
            "--label-column",
            "species",
            "--limit",
            "5",
        )
        == 0
    )
    labels = vitviz.open_index(tmp_path / "pq").query("SELECT label FROM images ORDER BY image_id")["label"]
    assert labels.tolist() == [p.parent.name for p in files[:5]]

    import datasets

    readable = [p for p in files if p.name != "broken.png"]
    saved = datasets.Dataset.from_dict(
        {"image": [str(p) for p in readable], "label": [int(p.parent.name == "dog") for p in readable]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])}),
    )
    saved.save_to_disk(str(tmp_path / "saved"))
    assert index_run(tmp_path / "saved", model, "--out", str(tmp_path / "hf")) == 0
    index = vitviz.open_index(tmp_path / "hf")
    assert index.query("SELECT label FROM images ORDER BY image_id")["label"].tolist() == [
        p.parent.name for p in readable
    ]

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/photos' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)  # the network simulated away
    with pytest.raises(SystemExit, match="could not stream the Hugging Face dataset 'someone/photos'.*save_to_disk"):
        index_run("hf:someone/photos", model, "--out", str(tmp_path / "hub"))


def _folder_index(model, images, out):
    assert index_run(images, model, "--out", str(out)) == 0
    return out


def test_bad_input_gets_its_message(setup, tmp_path):
    model, images, _ = setup
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="is empty"):
        index_run(tmp_path / "empty", model, "--out", str(tmp_path / "x"))
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "notes.txt").write_text("hello")
    with pytest.raises(SystemExit, match="none is an image"):
        index_run(tmp_path / "text", model, "--out", str(tmp_path / "x"))
    with pytest.raises(SystemExit, match="does not exist"):
        index_run(tmp_path / "nowhere", model, "--out", str(tmp_path / "x"))
    pd.DataFrame({"file": ["a.png"]}).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(SystemExit, match="no 'path' column.*--path-column"):
        index_run(tmp_path / "t.csv", model, "--out", str(tmp_path / "x"))
    shorter = tiny_checkpoint(tmp_path / "short.pt")
    import torch

    checkpoint = torch.load(shorter, weights_only=False)
    checkpoint["preprocessing"] = checkpoint["preprocessing"] | {"resize": 32, "crop": None}
    torch.save(checkpoint, shorter)
    with pytest.raises(SystemExit, match="shorter side only"):
        index_run(images, shorter, "--out", str(tmp_path / "x"))

    out = _folder_index(model, images, tmp_path / "good")
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text('{"format": "vitviz-index", "format_version": 1, "model": ')
    with pytest.raises(IndexFormatError, match="not valid JSON.*edited by hand"):
        vitviz.open_index(out)
    (out / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "shards"}))
    with pytest.raises(IndexFormatError, match="'shards' is missing"):
        vitviz.open_index(out)
    (out / "manifest.json").write_text(json.dumps(manifest | {"format_version": 99, "vitviz_version": "9.0"}))
    with pytest.raises(IndexFormatError, match="vitviz 9.0 in index format 99.*upgrade vitviz"):
        vitviz.open_index(out)
    with pytest.raises(IndexFormatError, match="no manifest.json"):
        vitviz.open_index(tmp_path / "empty")
    assert isinstance(IndexFormatError("x"), ValueError)


def test_prompts_make_a_zero_shot_index(setup, tmp_path):
    from tiny_text import clip_folder

    _, images, _ = setup
    _, _, folder = clip_folder(tmp_path / "clip")
    out = tmp_path / "zero-shot"
    assert (
        index_run(
            images, folder, "--out", str(out), "--prompts", "a photo of a dog", "a photo of a cat", "--limit", "6"
        )
        == 0
    )
    index = vitviz.open_index(out)
    assert set(index.query("SELECT prediction FROM images")["prediction"]) <= {"a photo of a dog", "a photo of a cat"}
    assert index.manifest["model"]["prompts"] == ["a photo of a dog", "a photo of a cat"]
