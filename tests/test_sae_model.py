"""The TopK SAE against a reference written from Gao et al. (2024), Section 2: shapes, L0, the AuxK loss."""

import math

import pytest
import torch

from vitviz.sae import SAEConfig, SAEError, TopKSAE
from vitviz.sae.training import auxk_loss


def random_sae(d=12, latents=40, k=5, **config) -> TopKSAE:
    """An SAE whose every tensor, normalisation included, is random: nothing cancels by accident."""
    torch.manual_seed(0)
    sae = TopKSAE(SAEConfig(d_in=d, latents=latents, k=k, **config))
    with torch.no_grad():
        for tensor in sae.state_dict().values():
            tensor.copy_(torch.randn_like(tensor))
        sae.scale.fill_(2.5)
        sae.normalise_decoder_()
    return sae


def reference_encode(sae: TopKSAE, x: torch.Tensor) -> torch.Tensor:
    """Gao et al.: z = TopK(W_enc (x - b_pre) + b_enc), ReLU after, on normalised x; written out loop by loop."""
    normalised = (x - sae.mean) / sae.scale
    pre = (normalised - sae.b_dec) @ sae.W_enc + sae.b_enc
    codes = torch.zeros_like(pre)
    for row in range(len(pre)):
        order = sorted(range(pre.shape[1]), key=lambda j: -float(pre[row, j]))[: sae.config.k]
        for j in order:
            codes[row, j] = max(0.0, float(pre[row, j]))
    return codes


def reference_decode(sae: TopKSAE, codes: torch.Tensor) -> torch.Tensor:
    return (codes @ sae.W_dec + sae.b_dec) * sae.scale + sae.mean


def reference_auxk(sae, pre, residual, dead):
    """L_aux = |e - ê|², ê the residual's reconstruction by the top k_aux dead latents (normalised by Var e)."""
    candidates = [j for j in range(pre.shape[1]) if dead[j]]
    count = min(sae.config.aux_k, len(candidates))
    estimate = torch.zeros_like(residual)
    for row in range(len(pre)):
        for j in sorted(candidates, key=lambda j: -float(pre[row, j]))[:count]:
            estimate[row] += max(0.0, float(pre[row, j])) * sae.W_dec[j]
    return ((residual - estimate) ** 2).sum(1).mean() / ((residual - residual.mean(0)) ** 2).sum(1).mean()


def test_encode_decode_match_the_reference():
    sae = random_sae()
    x = torch.randn(7, 12) * 3
    with torch.no_grad():
        codes = sae.encode(x)
        torch.testing.assert_close(codes, reference_encode(sae, x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae.decode(codes), reference_decode(sae, codes), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae(x), reference_decode(sae, reference_encode(sae, x)), atol=1e-4, rtol=1e-4)


def test_shapes_and_l0():
    sae = random_sae(k=3)
    x = torch.randn(2, 9, 12)  # (B, patches, d)
    with torch.no_grad():
        codes = sae.encode(x)
        assert codes.shape == (2, 9, 40)
        assert sae.decode(codes).shape == (2, 9, 12)
        assert int((codes != 0).sum(-1).max()) <= 3


def test_sparse_decode_equals_dense_decode():
    sae = random_sae()
    z = torch.randn(6, 12)
    with torch.no_grad():
        values, indices = sae.top_k(sae.pre_activations(z))
        dense = torch.zeros(6, 40).scatter(-1, indices, values)
        torch.testing.assert_close(sae.decode_sparse(values, indices), dense @ sae.W_dec + sae.b_dec)


def test_auxk_matches_the_reference():
    sae = random_sae(aux_k=4)
    pre = torch.randn(5, 40)
    residual = torch.randn(5, 12)
    dead = torch.rand(40) < 0.5
    torch.testing.assert_close(auxk_loss(sae, pre, residual, dead), reference_auxk(sae, pre, residual, dead))
    assert float(auxk_loss(sae, pre, residual, torch.zeros(40, dtype=torch.bool))) == 0.0


def test_parallel_gradient_removed_and_rows_unit_norm():
    sae = random_sae()
    sae.W_dec.grad = torch.randn_like(sae.W_dec)
    sae.remove_parallel_gradient_()
    assert float((sae.W_dec.grad * sae.W_dec.detach()).sum(-1).abs().max()) < 1e-5
    assert torch.allclose(sae.W_dec.norm(dim=-1), torch.ones(40), atol=1e-5)


def test_batchtopk_keeps_k_per_token_on_average_when_training():
    sae = random_sae(activation="batchtopk", k=4).train()
    codes = sae.activate(torch.randn(8, 40) + 3)  # all positive: exactly k x tokens kept
    assert int((codes != 0).sum()) == 32
    assert float(sae.threshold) > 0


@pytest.mark.parametrize(
    "config, message",
    [
        ({"d_in": 4, "latents": 8, "k": 9}, "k must be between 1 and latents"),
        ({"d_in": 0, "latents": 8}, "at least 1"),
        ({"d_in": 4, "latents": 8, "activation": "jumprelu"}, "activation must be one of"),
    ],
)
def test_bad_configs(config, message):
    with pytest.raises(SAEError, match=message):
        SAEConfig(**config)


def test_width_mismatch():
    sae = random_sae()
    with pytest.raises(SAEError, match="activations are 13 wide; this SAE reads 12-wide"):
        sae.encode(torch.randn(2, 13))
    with pytest.raises(SAEError, match="codes have 41 latents"):
        sae.decode(torch.randn(2, 41))
    assert math.isfinite(float(sae.encode(torch.randn(2, 12)).sum()))


def test_sparse_decode_gradients_equal_the_dense_product():
    sae = random_sae()
    values = torch.rand(6, 5, requires_grad=True)
    indices = torch.randint(0, 40, (6, 5))
    grad = torch.randn(6, 12)
    (sae.decode_sparse(values, indices) * grad).sum().backward()
    sparse_values, sparse_weight = values.grad.clone(), sae.W_dec.grad.clone()
    values.grad, sae.W_dec.grad = None, None
    dense = torch.zeros(6, 40).index_put((torch.arange(6)[:, None].expand(6, 5), indices), values, accumulate=True)
    ((dense @ sae.W_dec + sae.b_dec) * grad).sum().backward()
    torch.testing.assert_close(sparse_values, values.grad)
    torch.testing.assert_close(sparse_weight, sae.W_dec.grad)
