"""save_sae(format="saelens") writes SAELens 6's layout: vitviz's TopKSAEs (their input normalisation folded into the
weights) and every SAE vitviz reads that SAELens can compute; load_sae reads them back to the same codes and
reconstructions, and SAELens's own forward pass (the reference written from its code) on the written files agrees."""

from __future__ import annotations

import json

import pytest
import torch
from sae_format_files import CASES, D, N
from sae_references import saelens_forward
from safetensors.torch import load_file

from vitviz.sae import SAEConfig, SAEError, TopKSAE, load_sae, save_sae
from vitviz.sae.formats import ExternalSAE

pytestmark = pytest.mark.filterwarnings("ignore:.*sae.pt does not store:UserWarning")


def inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(6, D, generator=g) * 3 + 1, torch.randn(2, 5, D, generator=g) * 3 + 1]


def trained_like(activation: str, pre_encoder_bias: bool = True) -> TopKSAE:
    torch.manual_seed(0)
    sae = TopKSAE(SAEConfig(d_in=D, latents=N, k=5, activation=activation, pre_encoder_bias=pre_encoder_bias, block=3))
    with torch.no_grad():
        for tensor in sae.state_dict().values():
            tensor.normal_()
        sae.scale.fill_(2.5)
        sae.threshold.fill_(0.7)
    return sae.eval()


@pytest.mark.parametrize(
    ("activation", "bias", "architecture"),
    [("topk", True, "topk"), ("relu", False, "standard"), ("batchtopk", True, "jumprelu")],
)
def test_a_vitviz_sae_round_trips_through_saelens(tmp_path, activation, bias, architecture):
    sae = trained_like(activation, bias)
    save_sae(sae, tmp_path / "lens", model="default", format="saelens")
    cfg = json.loads((tmp_path / "lens" / "cfg.json").read_text())
    assert cfg["architecture"] == architecture and (cfg["d_in"], cfg["d_sae"]) == (D, N)
    assert cfg["metadata"]["hook_name"] == "blocks.3.hook_resid_post" and cfg["metadata"]["model_name"] == "default"
    assert cfg["metadata"]["sae_lens_version"].startswith("6.")
    state = load_file(tmp_path / "lens" / "sae_weights.safetensors")
    loaded = load_sae(tmp_path / "lens")
    assert (loaded.block, loaded.tokens, loaded.model) == (3, "patches", "default")
    for x in inputs():
        with torch.no_grad():
            codes, recon = sae.encode(x), sae(x)
            torch.testing.assert_close(loaded.encode(x), codes, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(loaded.reconstruct(x), recon, atol=1e-4, rtol=1e-4)
            # SAELens's own forward pass reads the same numbers from the files
            lens_codes, lens_recon = saelens_forward(cfg, state, x)
        torch.testing.assert_close(lens_codes, codes, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(lens_recon, recon, atol=1e-4, rtol=1e-4)
        assert (codes != 0).any()


EXPORTABLE = [
    name
    for name in sorted(CASES)
    if not name.startswith(
        ("saev-1", "saev-3", "saev-5-topk", "sparsify-groupmax", "prisma-patches-tanh", "prisma-gated")
    )
]


@pytest.mark.parametrize("case", EXPORTABLE)
def test_a_loaded_sae_round_trips_exactly(tmp_path, case):
    path, _ = CASES[case](tmp_path / "source")
    sae = load_sae(path)
    save_sae(sae, tmp_path / "lens", format="saelens")
    again = load_sae(tmp_path / "lens")
    assert isinstance(again, ExternalSAE)
    for name, tensor in sae.state_dict().items():
        if name != "b_enc" or not sae.config.gated:
            assert torch.equal(again.state_dict()[name], tensor), name
    same = ("d_in", "latents", "activation", "k", "gated", "pre_encoder_bias", "input_norm", "block", "block_from_end")
    assert all(getattr(again.config, f) == getattr(sae.config, f) for f in same)
    assert (again.tokens, again.model, again.scaling_missing) == (sae.tokens, sae.model, sae.scaling_missing)
    for x in inputs():
        with torch.no_grad():
            assert torch.equal(again.encode(x), sae.encode(x))
            assert torch.equal(again.reconstruct(x), sae.reconstruct(x))


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("saev-5-topk", "topk_signed"),
        ("sparsify-groupmax-skip", "skip connection"),
        ("prisma-patches-tanh", "tanh_relu"),
        ("prisma-gated-cls", "gated encoder with another activation"),
    ],
)
def test_what_saelens_cannot_compute_is_refused_in_one_line(tmp_path, case, why):
    sae = load_sae(CASES[case](tmp_path)[0])
    with pytest.raises(SAEError, match=why) as error:
        save_sae(sae, tmp_path / "lens", format="saelens")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "lens").exists()


def test_other_formats_and_classes_are_refused(tmp_path):
    with pytest.raises(SAEError, match="format must be one of"):
        save_sae(trained_like("topk"), tmp_path / "x", format="onnx")
    with pytest.raises(SAEError, match="write this SAE with format='saelens'"):
        save_sae(load_sae(CASES["saelens-gated"](tmp_path)[0]), tmp_path / "y")
