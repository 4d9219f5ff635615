"""with_sae and replace_with on SAEs read from other libraries' files: the edit is decode(edited, x) - decode(codes, x)
with each token's own normalisation (an SAE that standardises each token scales the change by that token's std), and
the replacement is reconstruct(x)."""

from __future__ import annotations

import pytest
import torch
from sae_format_files import prisma_case, prisma_cfg, saelens_case, saelens_cfg, sparsify_case

from tests.tiny_models import build_tiny_vit
from vitviz.sae import load_sae, replace_with, with_sae

D = 32  # the tiny ViT's width


def by_hand(model, images, block, edit):
    x, grid = model.embed(images)
    arguments = model.block_arguments(grid, x.shape[0])
    for index, layer in enumerate(model.blocks):
        x = layer(x, arguments[index]).hidden
        if index == block:
            x = torch.cat([x[:, :1], edit(x[:, 1:])], dim=1)
    return model.forward_head(x, grid).logits


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
