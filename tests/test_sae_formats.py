"""load_sae on tiny files in every layout saev, SAELens, ViT-Prisma and sparsify publish: codes and reconstructions
within 1e-4 of references written from each library's code (tests/sae_references.py), for 2-D and 3-D inputs; the
block, tokens and model each file names; ``hf:`` specs read from a pre-filled Hub cache with the network away."""

from __future__ import annotations

import json

import pytest
import torch
from hub_cache import cached_snapshot, offline_cache
from sae_format_files import CASES, D, N, prisma_cfg, saelens_case, saelens_cfg, saev_case, sparsify_case

from vitviz.sae import SAEError, load_sae
from vitviz.sae.formats import ExternalSAE

pytestmark = pytest.mark.filterwarnings("ignore:.*sae.pt does not store:UserWarning")


def inputs(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, D, generator=g) * 2 + 0.5, torch.randn(2, 7, D, generator=g) * 2 + 0.5]


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_layout_reads_exactly(tmp_path, case):
    path, reference = CASES[case](tmp_path)
    sae = load_sae(path)
    assert isinstance(sae, ExternalSAE)
    for x in inputs():
        codes, recon = reference(x)
        assert (codes != 0).any(), "a case whose codes are all zero would test nothing"
        with torch.no_grad():
            got_codes, got_recon = sae.encode(x), sae.reconstruct(x)
        assert got_codes.shape == (*x.shape[:-1], codes.shape[-1]) and got_recon.shape == x.shape
        torch.testing.assert_close(got_codes, codes.float(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got_recon, recon.float(), atol=1e-4, rtol=1e-4)


def test_the_b_dec_step_is_where_each_saev_schema_trained_with_it(tmp_path):
    """Legacy and schema-1 files subtract b_dec before the encoder; schema 2 and later do not: the same weights give
    other codes, so reading one schema as another would be caught."""
    params = {"cls": "Relu", "params": {}}
    one = load_sae(saev_case({"schema": 1, "cls": "Relu", "cfg": {"d_vit": D, "exp_factor": 4}})(tmp_path / "a")[0])
    two = load_sae(
        saev_case({"schema": 2, "cfg": {"d_vit": D, "exp_factor": 4, "activation": params}})(tmp_path / "b")[0]
    )
    assert one.config.pre_encoder_bias and not two.config.pre_encoder_bias
    x = inputs()[0]
    assert not torch.allclose(one.encode(x), two.encode(x))


def test_saev_topk_keeps_negative_values_and_batchtopk_uses_its_threshold(tmp_path):
    header = {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "TopK", "params": {"top_k": 60}}}}
    sae = load_sae(saev_case(header)(tmp_path / "topk")[0])
    assert (sae.encode(inputs()[0]) < 0).any()  # 60 of 64 kept: some are negative, and saev keeps them
    header["cfg"]["activation"] = {"cls": "BatchTopK", "params": {"top_k": 4}}
    low = load_sae(saev_case(header, threshold=0.0)(tmp_path / "t0")[0]).encode(inputs()[0])
    high = load_sae(saev_case(header, threshold=1.0)(tmp_path / "t1")[0]).encode(inputs()[0])
    assert (low > 0).sum() > (high > 0).sum() > 0 and high[high > 0].min() > 1.0


@pytest.mark.parametrize(
    ("case", "block", "from_end", "tokens", "model"),
    [
        ("saev-legacy", None, -2, "patches", None),
        ("saev-1-topk", None, -2, "patches", None),
        ("saev-5-topk", None, None, "patches", None),
        ("saev-5-batchtopk-dinov3", 11, None, "patches", None),
        ("saelens-topk", 7, None, "all", "vit-b"),
        ("saelens-5-relu", 2, None, "all", "gpt2-small"),  # blocks.3.hook_resid_pre is block 2's output
        ("saelens-5-topk", 4, None, "all", None),
        ("saelens-6-unversioned-gated", 2, None, "all", None),
        ("prisma-default-layer-norm", 10, None, "all", prisma_cfg()["model_name"]),
        ("prisma-gated-cls", 10, None, "cls", prisma_cfg()["model_name"]),
        ("prisma-patches-tanh", 10, None, "patches", prisma_cfg()["model_name"]),
        ("sparsify-bf16", 5, None, "all", "facebook/dinov2-small"),
        ("sparsify-fp32-latents", 0, None, "all", "facebook/dinov2-small"),
    ],
)
def test_block_tokens_and_model(tmp_path, case, block, from_end, tokens, model):
    sae = load_sae(CASES[case](tmp_path)[0])
    assert (sae.block, sae.config.block_from_end, sae.tokens, sae.model) == (block, from_end, tokens, model)
    assert sae.block_for(12) == (block if block is not None else None if from_end is None else 12 + from_end)


def test_saev_layer_minus_two_is_block_ten_of_twelve_and_scaling_is_flagged(tmp_path):
    path, _ = CASES["saev-legacy"](tmp_path)
    with pytest.warns(UserWarning, match="sae.pt does not store"):
        sae = load_sae(path)
    assert sae.block_for(12) == 10 and sae.block_for(24) == 22
    assert "sae.pt does not store" in sae.scaling_missing
    with pytest.raises(SAEError, match="does not have"):
        sae.block_for(1)
    assert load_sae(CASES["saelens-topk"](tmp_path / "lens")[0]).scaling_missing is None


def test_dinov3_manifest_names_the_layer(tmp_path):
    """osunlp/SAE_DINOv3_*: layer_N/<run>/sae.pt, and manifest.jsonl at the root whose entry gives the layer."""
    header = {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "Relu", "params": {}}}}
    for layer, run in ((6, "3zih0tpa"), (9, "qt0fmmxm")):
        saev_case(header, where=f"layer_{layer}/{run}/sae.pt")(tmp_path)
    lines = [
        {"run_id": r, "layer": n, "l0": 20.0, "mse": 0.1, "path": f"layer_{n}/{r}/sae.pt"}
        for n, r in ((6, "3zih0tpa"), (9, "qt0fmmxm"))
    ]
    (tmp_path / "manifest.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert load_sae(tmp_path / "layer_9" / "qt0fmmxm").block == 9
    assert load_sae(tmp_path / "layer_6" / "3zih0tpa" / "sae.pt").block == 6
    with pytest.raises(SAEError, match=r"several saev SAEs.*layer_6/3zih0tpa, layer_9/qt0fmmxm"):
        load_sae(tmp_path)


def test_decode_needs_the_tokens_only_where_the_normalisation_is_per_token(tmp_path):
    x = inputs()[1]
    plain = load_sae(CASES["saelens-jumprelu"](tmp_path / "a")[0])
    torch.testing.assert_close(plain.decode(plain.encode(x)), plain.reconstruct(x))
    per_token = load_sae(CASES["saelens-layer-norm"](tmp_path / "b")[0])
    torch.testing.assert_close(per_token.decode(per_token.encode(x), x=x), per_token.reconstruct(x))
    with pytest.raises(SAEError, match="decoder needs the input tokens"):
        per_token.decode(per_token.encode(x))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    return offline_cache(tmp_path / "hub", monkeypatch)


def test_hf_specs_read_from_the_cache_offline(offline_hub):
    snapshot = cached_snapshot(offline_hub, "osunlp/SAE_DINOv3_ViT-S-16_IN1K")
    header = {"schema": 5, "cfg": {"d_model": D, "d_sae": N, "activation": {"cls": "Relu", "params": {}}}}
    _, reference = saev_case(header, where="layer_8/p0z7t1ci/sae.pt")(snapshot)
    sae = load_sae("hf:osunlp/SAE_DINOv3_ViT-S-16_IN1K/layer_8/p0z7t1ci")
    x = inputs()[1]
    torch.testing.assert_close(sae.reconstruct(x), reference(x)[1], atol=1e-4, rtol=1e-4)
    assert sae.block == 8
    lens = cached_snapshot(offline_hub, "someone/vit-saes")
    _, reference = saelens_case(saelens_cfg("topk", k=3))(lens / "blocks.7.hook_resid_post")
    sae = load_sae("hf:someone/vit-saes/blocks.7.hook_resid_post")
    torch.testing.assert_close(sae.encode(x), reference(x)[0], atol=1e-4, rtol=1e-4)
    clip = cached_snapshot(offline_hub, "osunlp/SAE_CLIP_24K_ViT-B-16_IN1K")  # one sae.pt at the root
    _, reference = CASES["saev-legacy"](clip)
    (clip / "clip" / "sae.pt").rename(clip / "sae.pt")
    sae = load_sae("hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K")
    torch.testing.assert_close(sae.encode(x), reference(x)[0], atol=1e-4, rtol=1e-4)
    assert sae.block_for(12) == 10
    sparse = cached_snapshot(offline_hub, "EleutherAI/sae-dino")
    sparsify_case({"num_latents": N, "k": 4})(sparse)
    sae = load_sae("hf:EleutherAI/sae-dino/layers.5")
    assert (sae.block, sae.model) == (5, "facebook/dinov2-small")
    for hookpoint, block in (("encoder.layer.3", 3), ("layers.3.mlp", None)):
        sparsify_case({"num_latents": N, "k": 4}, hookpoint=hookpoint)(sparse)
        assert load_sae(f"hf:EleutherAI/sae-dino/{hookpoint}").block == block


def test_hf_specs_that_are_not_there_say_so_in_one_line(offline_hub):
    with pytest.raises(SAEError, match="not in the cache") as error:
        load_sae("hf:nobody/absent-sae")
    assert "\n" not in str(error.value)
    cached_snapshot(offline_hub, "someone/empty")
    with pytest.raises(SAEError, match="has no layer_3"):
        load_sae("hf:someone/empty/layer_3")
    for bad in ("hf:just-a-name", "hf:a/b/../c"):
        with pytest.raises(SAEError, match="is not an SAE on the Hub"):
            load_sae(bad)
