"""Training an SAE: unit-norm decoder rows, L0 <= k, determinism, resume, AuxK reviving dead latents, the data
stream and the memory check."""

import numpy as np
import pytest
import torch

from vitviz.sae import SAEConfig, SAEError, SAEMemoryError, TrainConfig, evaluate, train_sae, training
from vitviz.sae.data import npy_source, shuffled_batches, statistics

QUICK = TrainConfig(epochs=2, batch=128, buffer=512, sample=256, dead_after=500)


def random_chunks(seed=0, chunks=3, n=300, d=8):
    g = torch.Generator().manual_seed(seed)
    mixing = torch.randn(d, d, generator=g)
    return [torch.randn(n, d, generator=g) @ mixing + 2.0 for _ in range(chunks)]


def test_decoder_rows_stay_unit_norm_and_l0_at_most_k():
    sae, history = train_sae(random_chunks(), SAEConfig(d_in=8, latents=32, k=3), QUICK, progress=False)
    assert torch.allclose(sae.W_dec.detach().norm(dim=-1), torch.ones(32), atol=1e-5)
    with torch.no_grad():
        codes = sae.encode(torch.cat(random_chunks(seed=1)))
    assert int((codes != 0).sum(-1).max()) <= 3
    assert len(history) == 2 and history[-1]["mse"] < history[0]["mse"] * 1.5


def test_deterministic_for_a_seed():
    config = SAEConfig(d_in=8, latents=32, k=3)
    first, _ = train_sae(random_chunks(), config, QUICK, progress=False)
    second, _ = train_sae(random_chunks(), config, QUICK, progress=False)
    other, _ = train_sae(random_chunks(), config, TrainConfig(**{**QUICK.__dict__, "seed": 1}), progress=False)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    assert not torch.equal(first.W_dec, other.W_dec)


def test_resume_after_an_interrupted_epoch_gives_the_same_weights(tmp_path):
    config = SAEConfig(d_in=8, latents=32, k=3)
    whole, _ = train_sae(random_chunks(), config, QUICK, progress=False)
    calls = []

    def failing():  # pass 1: statistics; pass 2: epoch 1; pass 3: epoch 2 breaks half-way
        calls.append(1)
        for index, chunk in enumerate(random_chunks()):
            if len(calls) == 3 and index == 1:
                raise KeyboardInterrupt
            yield chunk

    with pytest.raises(KeyboardInterrupt):
        train_sae(failing, config, QUICK, checkpoint=tmp_path / "run.pt", progress=False)
    resumed, history = train_sae(random_chunks(), config, QUICK, checkpoint=tmp_path / "run.pt", progress=False)
    assert [h["epoch"] for h in history] == [1, 2]
    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, atol=1e-6, rtol=1e-6)
    with pytest.raises(SAEError, match="from another run"):
        train_sae(random_chunks(), SAEConfig(d_in=8, latents=16, k=3), QUICK, checkpoint=tmp_path / "run.pt")


def test_auxk_revives_dead_latents(monkeypatch):
    """4 live latents cover 4 of 16 directions and always win the top-k; 60 others start dead (small encoder rows,
    never chosen). Without AuxK nothing reaches them; with it they learn the residual and start firing."""
    basis = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(0)))[0]

    def data(seed):
        g = torch.Generator().manual_seed(seed)
        pick = torch.rand(2000, 16, generator=g).argsort(1)[:, :2]
        return (torch.rand(2000, 2, 1, generator=g) + 0.5).mul(basis[pick]).sum(1)

    @torch.no_grad()
    def start(sae, mean, scale, sample, train, generator):
        sae.W_dec.copy_(torch.randn(64, 16, generator=torch.Generator().manual_seed(1)))
        sae.W_dec[:4] = basis[:4]
        sae.normalise_decoder_()
        sae.W_enc.copy_(sae.W_dec.T * 0.01)
        sae.W_enc[:, :4] = basis[:4].T
        sae.b_enc[:4] = 1.0

    monkeypatch.setattr(training, "initialise", start)
    source = [data(0), data(1)]
    dead = {}
    for alpha in (0.0, 1 / 32):
        train = TrainConfig(epochs=4, batch=250, dead_after=500, aux_alpha=alpha, lr=3e-3, schedule="constant")
        sae, _ = train_sae(source, SAEConfig(d_in=16, latents=64, k=4, aux_k=16), train, progress=False)
        dead[alpha] = evaluate(sae, source)["dead_fraction"]
    assert dead[0.0] == 60 / 64
    assert dead[1 / 32] < dead[0.0] - 0.1


def test_stream_reads_every_token_once_from_fp16_memory_maps(tmp_path):
    arrays = [np.arange(i * 70, (i + 1) * 70, dtype=np.float16).reshape(35, 2) for i in range(3)]
    for index, array in enumerate(arrays):
        np.save(tmp_path / f"{index}.npy", array)
    source = npy_source(sorted(tmp_path.glob("*.npy")))
    assert isinstance(source[0], np.memmap)
    batches = list(shuffled_batches(source, 16, 40, torch.Generator().manual_seed(0)))
    assert all(len(b) == 16 for b in batches[:-1])
    seen = torch.cat(batches)[:, 0].sort().values
    torch.testing.assert_close(seen, torch.arange(0, 210, 2, dtype=torch.float32))
    stats = statistics(source, 1000, torch.Generator().manual_seed(0))
    assert stats.tokens == 105 and len(stats.sample) == 105
    torch.testing.assert_close(stats.mean, torch.tensor([104.0, 105.0]))


def test_memory_check_refuses_before_allocating():
    huge = SAEConfig(d_in=768, latents=2**31, k=32)  # 2 G latents: 6 TiB of weights, never allocated
    with pytest.raises(SAEMemoryError, match=r"2,147,483,648 latents x 768 wide .* need about .* GiB"):
        train_sae(random_chunks(), huge, QUICK, progress=False)
    assert isinstance(SAEMemoryError("x"), ValueError)


@pytest.mark.parametrize(
    "chunks, message",
    [
        ([torch.zeros(4, 8), torch.zeros(4, 9)], "differ in width"),
        ([torch.zeros(4)], r"must be \(tokens, width\)"),
        ([], "holds no tokens"),
    ],
)
def test_bad_sources(chunks, message):
    with pytest.raises(SAEError, match=message):
        train_sae(chunks, SAEConfig(d_in=8, latents=16, k=2), QUICK, progress=False)
