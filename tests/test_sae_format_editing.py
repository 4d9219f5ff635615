"""with_sae and replace_with on SAEs read from other libraries' files: the edit is decode(edited, x) - decode(codes, x)
with each token's own normalisation (an SAE that standardises each token scales the change by that token's std), and
the replacement is reconstruct(x); the feature browser's block check resolves a block counted from the end and warns
when the file names another model."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from sae_format_files import CASES, prisma_case, prisma_cfg, saelens_case, saelens_cfg, sparsify_case

from tests.tiny_models import build_tiny_vit, by_hand
from vitviz.sae import SAEError, load_sae, replace_with, with_sae
from vitviz.sae.browse import check_block, warn_other_model

D = 32  # the tiny ViT's width


@pytest.mark.parametrize(
    "write",
    [
        saelens_case(saelens_cfg("topk", "layer_norm", k=6) | {"d_in": D, "d_sae": 96}, d=D, n=96),
        saelens_case(saelens_cfg("jumprelu", "constant_norm_rescale") | {"d_in": D, "d_sae": 96}, d=D, n=96),
        prisma_case(prisma_cfg(d_in=D, expansion_factor=3), d=D),
        sparsify_case({"num_latents": 96, "k": 8, "skip_connection": True}, skip=True, d=D),
    ],
    ids=["saelens-layer-norm", "saelens-constant-norm", "prisma", "sparsify-skip"],
)
def test_edits_and_replacements_match_the_definition_by_hand(tmp_path, write):
    torch.manual_seed(2)
    model, images = build_tiny_vit(), torch.randn(3, 3, 32, 32)
    sae = load_sae(write(tmp_path)[0])
    with torch.no_grad():
        hidden = model(images, output_hidden_states=True).hidden_states[1][:, 1:]
        firing = (sae.encode(hidden) != 0).sum(dim=(0, 1))
        latent = int(firing.argmax())
        assert firing[latent] > 0

        def edit(patches):
            codes = sae.encode(patches)
            edited = codes.clone()
            edited[..., latent] *= 3.0
            return patches + sae.decode(edited, x=patches) - sae.decode(codes, x=patches)

        expected = by_hand(model, images, 1, edit)
        got = with_sae(model, sae, 1, scale={latent: 3.0})(images).logits
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(got, model(images).logits, atol=1e-4)
        replaced = replace_with(model, sae, 1)(images).logits
        torch.testing.assert_close(replaced, by_hand(model, images, 1, sae.reconstruct), atol=1e-4, rtol=1e-4)


def test_an_index_resolves_saev_layer_minus_two_and_warns_of_another_model(tmp_path):
    """check_block (the feature browser's and `vitviz sae latents`'): saev's layer -2 of the index's 3-block model
    is block 1; a file naming another model than the index's gets a warning naming both, the same one does not."""
    index = SimpleNamespace(
        manifest={"model": {"spec": "default", "config": {"num_layers": 3}}, "activations": {"width": 16}},
        activation_blocks=[0, 1],
        folder=tmp_path / "index",
    )
    with pytest.warns(UserWarning, match="sae.pt does not store"):
        saev = load_sae(CASES["saev-legacy"](tmp_path / "a")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no model named in saev's file: no warning
        assert check_block(index, saev) == 1
    lens = load_sae(CASES["saelens-topk"](tmp_path / "b")[0])  # blocks.7 of "vit-b"
    with pytest.raises(SAEError, match="which a model of 3 blocks does not have"):
        check_block(index, lens)
    with pytest.warns(UserWarning, match="the SAE was trained on vit-b; this model is default"):
        assert check_block(index, lens, block=0) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_other_model("open-clip:laion/CLIP-ViT-B-32", "open_clip:laion/clip_vit_b_32")
