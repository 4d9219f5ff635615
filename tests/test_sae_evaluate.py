"""`vitviz sae evaluate INDEX SAE...`: one table for a vitviz SAE and a SAELens one on the same held-out images, each
number against a direct computation (saev's NMSE, dead and dense at saev's thresholds, ViT-Prisma's CE recovered),
the split warning, and one line for each bad input."""

import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dataset_harness import QUICK, tiny_index
from sae_format_files import saelens_case, saelens_cfg
from tiny_models import one_torch_thread

import vitviz
from vitviz.commands.sae import main as sae_main
from vitviz.loading.specs import load_model
from vitviz.preprocessing import load_image
from vitviz.sae import SAEConfig, TopKSAE, evaluate, save_sae
from vitviz.sae.indexed import held_out, readable_images


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and far faster than two on a busy machine."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A 3-block tiny model's index storing blocks 0 and 1; a vitviz SAE trained on block 0 (holdout 0.3, seed 0),
    and a SAELens folder (layer_norm inputs) reading blocks.1.hook_resid_post, every token."""
    root = tmp_path_factory.mktemp("sae-evaluate")
    model, index = tiny_index(root, stored=["--shard-size", "8", "--batch-size", "5", "--activations", "1", "0"])
    images = root / "images"
    assert sae_main(["train", str(index), "--block", "0", *QUICK, "--out", str(root / "ours")])
    metadata = {"sae_lens_version": "6.5.1", "hook_name": "blocks.1.hook_resid_post", "model_name": "tiny"}
    cfg = saelens_cfg("standard", norm="layer_norm", d_in=32, d_sae=48, metadata=metadata)
    folder, reference = saelens_case(cfg, d=32, n=48)(root / "saelens")
    return model, images, index, root / "ours", folder, reference


def held_images(index_folder, holdout=0.3, seed=0):
    index = vitviz.open_index(index_folder)
    readable = readable_images(index)
    return index, readable[held_out(readable, holdout, seed)]


def test_one_table_for_a_vitviz_and_a_saelens_sae(built, capsys, tmp_path):
    model_path, images, index_folder, ours, saelens, reference = built
    argv = [
        "evaluate",
        str(index_folder),
        str(ours),
        str(saelens),
        "--holdout",
        "0.3",
        "--out",
        str(tmp_path / "t.json"),
    ]
    rows = sae_main(argv)
    printed = capsys.readouterr().out
    header = printed.splitlines()[0].split()
    assert header == ["SAE", "block", "tokens", "images", "L0", "EV", "NMSE", "dead", "dense", "CE", "rec", "top-1"]
    assert (
        str(ours) in printed
        and str(saelens) in printed
        and "dense: fires on more than 1% of the tokens" in " ".join(printed.split())
    )
    written = json.loads((tmp_path / "t.json").read_text())
    assert [row["sae"] for row in written] == [str(ours), str(saelens)] and written[1]["l0"] == rows[1]["l0"]
    mine, theirs = rows
    assert (mine["block"], mine["token_kind"], theirs["block"], theirs["token_kind"]) == (0, "patches", 1, "all")

    # the vitviz SAE: the numbers its training wrote on the same held-out images
    trained = json.loads((ours / "metrics.json").read_text())
    for key in ("explained_variance", "normalised_mse", "l0", "dead_fraction", "top1_agreement", "ce_loss_recovered"):
        assert mine[key] == pytest.approx(trained[key], abs=1e-6), key

    # the SAELens SAE, directly: its reference forward pass on the held-out images' stored tokens (all 17 of each)
    index, held = held_images(index_folder)
    x = torch.from_numpy(index.activations(held, 1).reshape(-1, 32).astype(np.float32))
    codes, estimate = reference(x)
    sse, baseline = (x - estimate).double().square().sum(), (x - x.mean(0)).double().square().sum()
    frequency = (codes != 0).double().mean(0)
    assert theirs["tokens"] == len(x) == len(held) * 17 and theirs["images"] == len(held)
    assert theirs["normalised_mse"] == pytest.approx(float(sse / baseline), rel=1e-4)
    assert theirs["explained_variance"] == pytest.approx(1 - float(sse / baseline), rel=1e-4)
    assert theirs["l0"] == pytest.approx(float((codes != 0).sum(-1).double().mean()), rel=1e-5)
    assert theirs["dead_fraction"] == pytest.approx(float((frequency == 0).double().mean()))
    assert theirs["dense_fraction"] == pytest.approx(float((frequency > 0.01).double().mean()))

    # CE recovered as ViT-Prisma computes it: the clean model's cross-entropy against the labels, from a plain pass
    model = load_model(model_path).eval()
    paths = index.query("SELECT image_id, path, label FROM images ORDER BY image_id").set_index("image_id")
    pixels = torch.stack([model.transform(load_image((images / paths.loc[i, "path"]).read_bytes())) for i in held])
    labels = torch.tensor([model.class_names.index(paths.loc[i, "label"]) for i in held])
    with torch.no_grad():
        clean = F.cross_entropy(model(pixels).logits, labels)
    assert theirs["ce_clean"] == pytest.approx(float(clean), rel=1e-4)
    recovered = (theirs["ce_zero_ablation"] - theirs["ce_sae"]) / (theirs["ce_zero_ablation"] - theirs["ce_clean"])
    assert theirs["ce_loss_recovered"] == pytest.approx(recovered)


def test_normalised_mse_and_dense_latents_as_saev_defines_them():
    """Latent 0 fires on 5 % of the tokens (dense at saev's 1 %), latent 1 on 0.5 %, latent 2 never."""
    sae = TopKSAE(SAEConfig(d_in=3, latents=3, activation="relu", pre_encoder_bias=False))
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(3))
        sae.W_dec.copy_(torch.eye(3))
    x = -torch.ones(1000, 3)
    x[:50, 0], x[:5, 1] = 1.0, 1.0
    metrics = evaluate(sae, [x])
    estimate = x.relu()
    nmse = float((x - estimate).square().sum() / (x - x.mean(0)).square().sum())
    assert metrics["normalised_mse"] == pytest.approx(nmse) and metrics["explained_variance"] == pytest.approx(1 - nmse)
    assert metrics["dense_fraction"] == pytest.approx(1 / 3) and metrics["dead_fraction"] == pytest.approx(1 / 3)


def test_another_split_gets_a_warning(built, capsys):
    _, _, index_folder, ours, _, _ = built
    sae_main(["evaluate", str(index_folder), str(ours), "--holdout", "0.3", "--seed", "1"])
    assert "warning: " in capsys.readouterr().err


def test_bad_input_gets_one_line(built, tmp_path, capsys):
    _, _, index_folder, ours, _, _ = built
    narrow = save_sae(TopKSAE(SAEConfig(d_in=16, latents=8, k=2, block=0)), tmp_path / "narrow")
    unplaced = save_sae(TopKSAE(SAEConfig(d_in=32, latents=8, k=2)), tmp_path / "unplaced")
    cases = [
        ([str(ours), "--holdout", "0"], r"--holdout must be in \(0, 1\)"),
        ([str(narrow)], "reads 16-wide activations, not 32"),
        ([str(unplaced)], "does not say which block it reads: give --block"),
        ([str(unplaced), "--block", "2"], "stores no activations of block 2"),
        ([str(tmp_path / "missing")], "does not exist"),
    ]
    for arguments, message in cases:
        with pytest.raises(SystemExit) as exited:
            sae_main(["evaluate", str(index_folder), *arguments])
        error = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and "\n" not in error and "Traceback" not in error, error
        assert re.search(message, error), error
