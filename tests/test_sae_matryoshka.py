"""Matryoshka TopK SAEs (saev's objective): the loss against a direct computation, each prefix's reconstruction from
its own latents only, training that lowers every prefix's error on planted features (and orders them: the first
latents learn the frequent features, unlike plain TopK's), and `vitviz sae train --matryoshka` records its sizes."""

import json
import re

import numpy as np
import pytest
import torch
from tiny_models import one_torch_thread

from vitviz.commands.sae import main
from vitviz.sae import SAEConfig, SAEError, TopKSAE, TrainConfig, train_sae
from vitviz.sae.metrics import prefix_nmse
from vitviz.sae.training import losses, prefix_reconstructions


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one thread is fastest, and far faster than two on a busy machine."""
    with one_torch_thread():
        yield


def tiny_sae(activation="topk", seed=0, d=6, latents=12, k=3):
    torch.manual_seed(seed)
    sae = TopKSAE(SAEConfig(d_in=d, latents=latents, k=k, activation=activation))
    with torch.no_grad():
        for p in (sae.W_enc, sae.b_enc, sae.b_dec):
            p.normal_()
    return sae


@pytest.mark.parametrize("activation", ["topk", "relu"])
def test_the_loss_is_the_mean_of_each_prefix_s_own_error(activation):
    sae = tiny_sae(activation)
    z = torch.randn(20, 6, generator=torch.Generator().manual_seed(1))
    prefixes = (2, 5, 12)
    # direct: dense codes, chosen once over the whole dictionary; prefix m decodes with latents 0..m-1 and b_dec
    pre = (z - sae.b_dec) @ sae.W_enc + sae.b_enc
    if activation == "topk":
        kept = pre.topk(3, dim=-1)
        codes = torch.zeros_like(pre).scatter(-1, kept.indices, kept.values.relu())
    else:
        codes = pre.relu()
    errors = [((codes[:, :m] @ sae.W_dec[:m] + sae.b_dec - z) ** 2).sum(-1).mean() for m in prefixes]
    dead = torch.zeros(12, dtype=torch.bool)
    total, mse, aux, _ = losses(sae, z, dead, 0.0, prefixes)
    torch.testing.assert_close(total, torch.stack(errors).mean())
    torch.testing.assert_close(mse, total)
    plain, *_ = losses(sae, z, dead, 0.0)
    torch.testing.assert_close(plain, errors[-1])  # without prefixes: the whole dictionary's error alone
    assert not torch.isclose(plain, total)


def test_a_prefix_reconstructs_from_its_own_latents_only():
    sae = tiny_sae()
    z = torch.randn(30, 6, generator=torch.Generator().manual_seed(2))
    values, indices = sae.top_k(sae.pre_activations(z))
    assert bool((indices >= 4).any()) and bool((indices < 4).any())
    small, whole = prefix_reconstructions(sae, (values, indices), (4, 12))
    with torch.no_grad():
        sae.W_dec[4:] += 1.0  # the decoder rows outside the prefix
    small_again, whole_again = prefix_reconstructions(sae, (values, indices), (4, 12))
    torch.testing.assert_close(small_again, small)
    assert not torch.allclose(whole_again, whole)
    # no gradient reaches the latents outside the prefix from its error
    sae.zero_grad()
    (small_again - z).square().sum().backward()
    assert sae.W_dec.grad[4:].abs().max() == 0 and sae.W_dec.grad[:4].abs().max() > 0
    # the held-out metric zeroes the same codes
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(3))
    codes = sae.encode(x).detach()
    codes[:, 4:] = 0
    error = (x - sae.decode(codes)).double().square().sum() / (x - x.mean(0)).double().square().sum()
    assert prefix_nmse(sae, [x], (4,))[0] == pytest.approx(float(error), rel=1e-6)


def planted(seed, tokens=3000, d=16, features=24):
    """Sums of 3 of 24 fixed unit directions (feature i drawn with probability ~ 1 / (i + 1)), amplitudes in
    [0.5, 1.5]: a few frequent features and many rare ones."""
    directions = torch.nn.functional.normalize(
        torch.randn(features, d, generator=torch.Generator().manual_seed(9)), dim=-1
    )
    g = torch.Generator().manual_seed(seed)
    weights = 1 / torch.arange(1, features + 1).float()
    picked = torch.multinomial(weights.expand(tokens, -1), 3, generator=g)  # (tokens, 3), distinct per token
    amplitudes = torch.rand(tokens, 3, 1, generator=g) + 0.5
    return [(amplitudes * directions[picked]).sum(1)]


def test_training_lowers_every_prefix_s_error_and_orders_the_features():
    data, held = planted(0), planted(1, tokens=1000)
    config = SAEConfig(d_in=16, latents=32, k=3, aux_k=8)
    prefixes = (4, 12, 32)
    quick = dict(epochs=6, batch=200, buffer=1000, sample=500, dead_after=2000, lr=3e-3)
    untrained, _ = train_sae(data, config, TrainConfig(**quick | {"lr": 0.0}, matryoshka=prefixes), progress=False)
    matryoshka, history = train_sae(data, config, TrainConfig(**quick, matryoshka=prefixes), progress=False)
    plain, _ = train_sae(data, config, TrainConfig(**quick), progress=False)
    before = prefix_nmse(untrained, held, prefixes)
    after = prefix_nmse(matryoshka, held, prefixes)
    assert all(a < 0.8 * b for a, b in zip(after, before)), (before, after)
    assert history[-1]["mse"] < history[0]["mse"]
    # the first 4 latents of a Matryoshka SAE reconstruct far better than a plain TopK SAE's first 4
    assert after[0] < prefix_nmse(plain, held, prefixes)[0] - 0.1


def test_train_command_records_the_sizes(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for name, n in (("train", 600), ("held", 200)):
        np.save(tmp_path / f"{name}.npy", (rng.normal(size=(n, 8)) @ rng.normal(size=(8, 8))).astype(np.float16))
    common = [
        "train",
        "--activations",
        str(tmp_path / "train.npy"),
        "--holdout-activations",
        str(tmp_path / "held.npy"),
    ]
    common += ["--latents", "16", "--k", "2", "--epochs", "1", "--batch", "128", "--aux-k", "4"]
    metrics = main([*common, "--matryoshka", "4,8", "--out", str(tmp_path / "run")])
    header = json.loads((tmp_path / "run" / "config.json").read_text())
    assert header["training"]["train"]["matryoshka"] == [4, 8]
    assert list(metrics["prefix_nmse"]) == ["4", "8"]  # the whole dictionary is the plain normalised_mse
    assert metrics["prefix_nmse"]["4"] >= metrics["prefix_nmse"]["8"] - 1e-9
    for sizes, message in (("8,4", "must increase"), ("4,32", r"in \[1, latents = 16\]"), ("4,x", "separated by")):
        with pytest.raises(SystemExit):
            main([*common, "--matryoshka", sizes, "--out", str(tmp_path / "bad")])
        error = capsys.readouterr().err
        assert re.search(message, error) and error.count("\n") == 1, error
    with pytest.raises(SAEError, match="must increase"):
        TrainConfig(matryoshka=(3, 3)).prefixes(8)
