"""with_sae checks the SAE against the block it edits: another block than its file's gives a warning naming both,
a block the model lacks too, the SAE's own block edits silently (the block given is always the one edited)."""

import warnings

import pytest
from tiny_models import build_tiny_vit

from vitviz.sae import SAEConfig, TopKSAE, with_sae


def test_with_sae_warns_for_another_block_or_one_the_model_lacks():
    model = build_tiny_vit()  # 3 blocks of width 32
    sae = TopKSAE(SAEConfig(d_in=32, latents=8, k=2, block=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_sae(model, sae, 1, scale={0: 0.0})  # its own block: no warning
    with pytest.warns(UserWarning, match="trained on block 1's output; editing block 2's instead"):
        with_sae(model, sae, -1, scale={0: 0.0})
    far = TopKSAE(SAEConfig(d_in=32, latents=8, k=2, block=7))
    with pytest.warns(UserWarning, match="reads block 7, which a model of 3 blocks does not have; editing block 1"):
        with_sae(model, far, 1, scale={0: 0.0})
