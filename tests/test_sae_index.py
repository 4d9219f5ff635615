"""SAEs over a dataset index: `vitviz index --activations` against the model's hidden states, resume and torchrun,
`vitviz sae train INDEX` (determinism, the held-out split, metrics.json against the saved weights), `vitviz sae
ablate`, and the bad input each gets its one-line message."""

import json
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from dataset_harness import INDEX, QUICK, make_images, run_index
from safetensors.torch import load_file
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.commands.sae import main as sae_main
from vitviz.dataset.storage import sha256_file
from vitviz.loading.specs import load_model
from vitviz.preprocessing import load_image
from vitviz.sae import SAEConfig, TopKSAE, evaluate, load_sae, save_sae
from vitviz.sae.indexed import held_out, index_data


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sae-index")
    model = tiny_checkpoint(root / "model.pt", num_layers=3)
    images = make_images(root / "images")
    out = root / "index"
    assert index_main([str(images), "--model", str(model), "--out", str(out), *INDEX]) == 0
    return model, images, out


def test_stored_activations_are_the_hidden_states(built):
    model_path, images, out = built
    model = load_model(model_path)
    index = vitviz.open_index(out)
    assert index.activation_blocks == [0, 2]
    info = index.manifest["activations"]
    assert (info["tokens"], info["prefix_tokens"], info["width"]) == (17, 1, 32)
    assert info["bytes_per_image_and_block"] == 17 * 32 * 2
    table = index.query("SELECT image_id, path, error FROM images ORDER BY image_id")
    for row in table.itertuples():
        stored = index.activations(row.image_id, 2)[0]  # (17, 32)
        if isinstance(row.error, str):
            assert not stored.any()  # an unreadable image's rows are zeros
            continue
        pixels = model.transform(load_image((images / row.path).read_bytes()))[None]
        with torch.no_grad():
            hidden = model(pixels, output_hidden_states=True).hidden_states
        for block in (0, 2):
            np.testing.assert_allclose(
                index.activations(row.image_id, block)[0], hidden[block][0], rtol=2e-3, atol=2e-3
            )
    for shard in index.shards:  # one file per block, named by its content, its checksum in the manifest
        assert sorted(shard["activations"]) == ["0", "2"]
        for name in shard["activations"].values():
            digest = sha256_file(out / "shards" / shard["name"] / name)
            assert name.endswith(f".{digest[:16]}.npy") and shard["files"][name]["sha256"] == digest
            assert np.load(out / "shards" / shard["name"] / name, mmap_mode="r").dtype == np.float16


def test_resume_redoes_a_lost_shard_without_duplicates(built, tmp_path):
    model, images, out = built
    copy = tmp_path / "index"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    shutil.rmtree(copy / "shards" / "000001")  # a shard the killed run never finished...
    (copy / "shards" / ".000001.tmp-99").mkdir()  # ...and its half-written temporary folder
    (copy / "shards" / ".000001.tmp-99" / "activations-block00.npy").write_bytes(b"half")
    (copy / "manifest.json").write_text(json.dumps(manifest | {"complete": False, "shards": []}))
    assert index_main([str(images), "--model", str(model), "--out", str(copy), *INDEX, "--resume"]) == 0
    resumed = json.loads((copy / "manifest.json").read_text())
    assert [s["activations"] for s in resumed["shards"]] == [s["activations"] for s in manifest["shards"]]
    assert sorted(p.name for p in (copy / "shards").iterdir()) == ["000000", "000001", "000002", "000003"]
    for shard in resumed["shards"]:
        assert len(list((copy / "shards" / shard["name"]).glob("activations-*"))) == 2
    every = list(range(resumed["count"]))
    first, second = vitviz.open_index(out), vitviz.open_index(copy)
    np.testing.assert_array_equal(first.activations(every, 0), second.activations(every, 0))


@pytest.mark.slow
def test_torchrun_processes_write_the_same_activations(built, tmp_path):
    model, images, out = built
    process = run_index(images, "--model", model, "--out", tmp_path / "two", *INDEX, torchrun=2)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    one, two = vitviz.open_index(out), vitviz.open_index(tmp_path / "two")
    every = list(range(one.count))
    for block in (0, 2):
        np.testing.assert_allclose(one.activations(every, block), two.activations(every, block), rtol=2e-3, atol=2e-3)
    assert [sorted(s["activations"]) for s in two.shards] == [["0", "2"]] * 4


@pytest.fixture(scope="module")
def trained(built, tmp_path_factory):
    _, _, out = built
    root = tmp_path_factory.mktemp("sae")
    for name in ("a", "b"):
        assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "3", "--out", str(root / name)])
    return root / "a", root / "b"


def test_training_from_the_index_is_deterministic_and_never_sees_the_held_out_images(built, trained):
    _, _, out = built
    first, second = trained
    a, b = load_file(first / "sae.safetensors"), load_file(second / "sae.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    record = json.loads((first / "config.json").read_text())["training"]["data"]
    assert record["block"] == 0 and record["tokens"] == "patches" and record["split_seed"] == 3
    index = vitviz.open_index(out)
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL")["image_id"].to_numpy()
    held = held_out(readable, 0.3, 3)
    assert record["held_out_images"] == held.sum() > 0 and record["train_images"] == (~held).sum() > 0
    assert held_out(readable, 0.3, 4).tolist() != held.tolist()  # the seed moves the split
    assert held_out(readable[5:], 0.3, 3).tolist() == held[5:].tolist()  # each id's side depends on the id alone
    data = index_data(out, 0, 0.3, 3)
    assert not set(data.train_images) & set(data.held_images)
    assert sorted([*data.train_images, *data.held_images]) == sorted(readable)
    streamed = np.concatenate(list(data.train()))  # what training reads: the training images' patch tokens only
    np.testing.assert_array_equal(streamed, index.activations(data.train_images, 0)[:, 1:].reshape(-1, 32))
    # the held-out images' patch tokens give metrics.json's numbers; the training images' give others
    sae = load_sae(first)
    metrics = json.loads((first / "metrics.json").read_text())
    tokens = index.activations(readable[held], 0)[:, 1:].reshape(-1, 32)
    again = evaluate(sae, [tokens])
    assert again["tokens"] == metrics["tokens"] == held.sum() * 16
    assert again["explained_variance"] == pytest.approx(metrics["explained_variance"], abs=1e-6)
    trained_on = evaluate(sae, [index.activations(readable[~held], 0)[:, 1:].reshape(-1, 32)])
    assert trained_on["tokens"] == (~held).sum() * 16
    assert {"top1_agreement", "ce_loss_recovered", "l0", "dead_fraction"} <= set(metrics)
    assert metrics["images"] == held.sum() and 0 <= metrics["top1_agreement"] <= 1 and metrics["l0"] <= 4


def test_ablate_writes_per_class_accuracy(built, trained, tmp_path):
    _, _, out = built
    sae = trained[0]
    index = vitviz.open_index(out)
    path = sae_main(["ablate", str(out), str(sae), "--latent", "5", "--scale", "1", "--out", str(tmp_path)])
    table = pq.read_table(path).to_pandas()
    assert list(table.columns) == [
        "label",
        "images",
        "correct",
        "correct_edited",
        "accuracy",
        "accuracy_edited",
        "accuracy_change",
        "predictions_changed",
        "latent",
        "scale",
        "set_to",
        "block",
    ]
    assert table["scale"].tolist() == [1.0, 1.0] and table["set_to"].isna().all()
    expected = index.query(
        "SELECT label, count(*) AS images, avg(correct::INT) AS accuracy FROM images "
        "WHERE error IS NULL GROUP BY label ORDER BY label"
    )
    assert table["label"].tolist() == ["cat", "dog"] == expected["label"].tolist()  # the model's class order
    assert table["images"].tolist() == expected["images"].tolist()
    np.testing.assert_allclose(table["accuracy"], expected["accuracy"])  # the index's own predictions
    assert (table["accuracy_edited"] == table["accuracy"]).all() and (table["predictions_changed"] == 0).all()
    suppressed = pq.read_table(
        sae_main(["ablate", str(out), str(sae), "--latent", "5", "--limit", "6", "--out", str(tmp_path / "x.parquet")])
    )
    assert suppressed["label"].to_pylist() == ["cat"] and suppressed["images"].to_pylist() == [6]  # cat/ sorts first
    assert json.loads(suppressed.schema.metadata[b"vitviz"])["latent"] == 5


def test_ablate_sets_a_latent_to_a_value_or_to_a_multiple_of_its_largest(built, trained, tmp_path, capsys):
    """--set-to V puts V in every patch's code; --set-to-max M reads the latent's largest code from latents.parquet
    (saev's protocol is M = -2), and equals --set-to with that product."""
    _, _, out = built
    sae = tmp_path / "sae"
    shutil.copytree(trained[0], sae)
    common = [str(out), str(sae), "--latent", "3"]
    with pytest.raises(SystemExit):
        sae_main(["ablate", *common, "--set-to-max", "-2"])
    assert re.search("run `vitviz sae latents INDEX .*` first", capsys.readouterr().err)
    sae_main(["latents", str(out), str(sae)])
    largest = pq.read_table(sae / "latents.parquet").to_pandas().set_index("latent")["max_activation"][3]
    by_max = pq.read_table(sae_main(["ablate", *common, "--set-to-max", "-2"])).to_pandas()
    by_value = pq.read_table(
        sae_main(["ablate", *common, "--set-to", str(-2 * largest), "--out", str(tmp_path / "v.parquet")])
    ).to_pandas()
    assert by_max["set_to"].tolist() == pytest.approx([-2 * largest] * 2) and by_max["scale"].isna().all()
    assert by_max.drop(columns="set_to").equals(by_value.drop(columns="set_to"))
    with pytest.raises(SystemExit):  # one edit at a time
        sae_main(["ablate", *common, "--scale", "0", "--set-to", "1"])


def test_bad_input_gets_one_line(built, trained, tmp_path, capsys):
    _, _, out = built
    narrow = save_sae(TopKSAE(SAEConfig(d_in=16, latents=8, k=2, block=0)), tmp_path / "narrow")
    cases = [
        (
            ["train", str(out), "--block", "1", *QUICK],
            "stores no activations of block 1 .*only those of blocks \\[0, 2\\]",
        ),
        (["train", str(tmp_path), "--block", "0", *QUICK], "is not a vitviz index"),
        (["ablate", str(out), str(narrow), "--latent", "0"], "reads 16-wide tokens, but block 0 .* 32.wide"),
        (["ablate", str(out), str(trained[0]), "--latent", "32"], "latent 32 is out of range: .* 0 to 31"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            sae_main([*argv, "--out", str(tmp_path / "run")] if argv[0] == "train" else argv)
        error = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and "\n" not in error and "Traceback" not in error
        assert re.search(message, error), error
