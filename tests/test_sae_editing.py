"""Editing a model through an SAE (with_sae) and the metrics that replace a block's output (top1_agreement)."""

import pytest
import torch

from tests.tiny_models import build_tiny_vit, by_hand
from vitviz.model.layers import Block
from vitviz.sae import SAEConfig, SAEError, TopKSAE, top1_agreement, with_sae
from vitviz.sae.editing import EditedBlock

D = 32  # the tiny ViT's width


def sae_for(model, latents=64, k=8) -> TopKSAE:
    torch.manual_seed(1)
    sae = TopKSAE(SAEConfig(d_in=D, latents=latents, k=k, block=1))
    with torch.no_grad():
        sae.b_enc.normal_(std=0.1)
        sae.mean.normal_()
        sae.scale.fill_(3.0)
    return sae.eval()


def perfect_sae() -> TopKSAE:
    """An SAE that reconstructs exactly: latents ±e_i, k = d, so each token's d positive parts are all kept."""
    sae = TopKSAE(SAEConfig(d_in=D, latents=2 * D, k=D))
    with torch.no_grad():
        sae.W_dec.copy_(torch.cat([torch.eye(D), -torch.eye(D)]))
        sae.W_enc.copy_(sae.W_dec.T)
    return sae.eval()


@pytest.fixture
def model():
    return build_tiny_vit()


@pytest.fixture
def images():
    torch.manual_seed(2)
    return torch.randn(4, 3, 32, 32)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_no_change_leaves_the_logits(model, images, attention):
    model.attn_implementation = attention
    sae = sae_for(model)
    with torch.no_grad():
        expected = model(images).logits
        for edit in ({}, {"scale": {3: 1.0, 5: 1.0}}):
            torch.testing.assert_close(with_sae(model, sae, 1, **edit)(images).logits, expected, atol=1e-5, rtol=0)


def test_suppressing_a_firing_latent_matches_the_edit_by_hand(model, images):
    sae = sae_for(model)
    with torch.no_grad():
        hidden = model(images, output_hidden_states=True).hidden_states[1][:, 1:]  # block 1's patch tokens
        codes = sae.encode(hidden)
        latent = int((codes != 0).sum(dim=(0, 1)).argmax())  # the latent firing most often
        edited = with_sae(model, sae, 1, scale={latent: 0.0})(images).logits

        def suppress(patches):
            c = sae.encode(patches)
            e = c.clone()
            e[..., latent] = 0
            return patches + sae.decode(e) - sae.decode(c)

        torch.testing.assert_close(edited, by_hand(model, images, 1, suppress), atol=1e-4, rtol=1e-4)
        assert (edited - model(images).logits).abs().max() > 1e-3


def test_set_to_and_doubling(model, images):
    sae = sae_for(model)
    with torch.no_grad():

        def setting(patches):
            c = sae.encode(patches)
            e = c.clone()
            e[..., 7] = -2.0
            e[..., 9] *= 2
            return patches + sae.decode(e) - sae.decode(c)

        edited = with_sae(model, sae, 2, scale={9: 2.0}, set_to={7: -2.0})(images).logits
        torch.testing.assert_close(edited, by_hand(model, images, 2, setting), atol=1e-4, rtol=1e-4)


def test_shares_weights_and_leaves_the_model_alone(model, images):
    sae = sae_for(model)
    before = model(images).logits
    edited = with_sae(model, sae, 1, scale={0: 0.0})
    assert all(type(b) is Block for b in model.blocks)
    assert isinstance(edited.blocks[1], EditedBlock) and isinstance(edited.blocks[1], Block)
    assert edited.blocks[1].attn is model.blocks[1].attn and edited.head is model.head
    assert {id(p) for p in edited.parameters()} == {id(p) for p in model.parameters()}
    torch.testing.assert_close(model(images).logits, before)


def test_edit_survives_knock_outs_and_stacks(model, images):
    sae = sae_for(model)
    with torch.no_grad():
        edited = with_sae(model, sae, 1, set_to={4: 5.0})
        knocked = edited.knock_out(heads=[(0, 1)])
        expected = with_sae(model.knock_out(heads=[(0, 1)]), sae, 1, set_to={4: 5.0})(images).logits
        torch.testing.assert_close(knocked(images).logits, expected)
        twice = with_sae(edited, sae, 1, set_to={4: 5.0})
        assert len(twice.blocks[1].edits) == 2
        # the fused and explicit attention paths agree on the edited model
        fused = edited(images).logits
        explicit = edited(images, output_attentions=True)
        torch.testing.assert_close(explicit.logits, fused, atol=1e-5, rtol=1e-5)
        assert len(explicit.attentions) == 3


def test_bad_edits(model):
    sae = sae_for(model)
    with pytest.raises(SAEError, match="latent 64 is out of range: this SAE has latents 0 to 63"):
        with_sae(model, sae, 1, scale={64: 0.0})
    with pytest.raises(SAEError, match="latent -1 is out of range"):
        with_sae(model, sae, 1, set_to={-1: 0.0})
    with pytest.raises(SAEError, match="block must be in"):
        with_sae(model, sae, 3)
    wide = TopKSAE(SAEConfig(d_in=48, latents=96, k=4))
    with pytest.raises(SAEError, match="reads 48-wide tokens; this model's blocks output 32-wide"):
        with_sae(model, wide, 1)


def test_top1_agreement_known_answers(model, images):
    perfect = top1_agreement(model, perfect_sae(), 1, images)
    assert perfect["top1_agreement"] == 1.0
    assert perfect["ce_loss_recovered"] == pytest.approx(1.0, abs=1e-4)
    labels = torch.tensor([0, 1, 2, 3])
    noisy = top1_agreement(model, sae_for(model, k=1), 1, [images[:2], images[2:]], [labels[:2], labels[2:]])
    assert noisy["images"] == 4 and 0 <= noisy["top1_agreement"] <= 1
    with torch.no_grad():
        clean = float(torch.nn.functional.cross_entropy(model(images).logits, labels))
    assert noisy["ce_clean"] == pytest.approx(clean, rel=1e-5)


def test_explanations_that_run_the_blocks_themselves_see_the_edit(model, images):
    """Grad-CAM and head importance run the blocks one by one, not through model(x): the edit is in the block."""
    from vitviz.explain.gradcam import norm1_gradients
    from vitviz.explain.head_importance import head_importance

    sae = sae_for(model)
    edited = with_sae(model, sae, 0, set_to={2: 8.0})
    output, _, _ = norm1_gradients(edited, images, 0)
    with torch.no_grad():
        torch.testing.assert_close(output.logits, edited(images).logits, atol=1e-5, rtol=1e-5)
        assert (output.logits - model(images).logits).abs().max() > 1e-3
    plain, changed = head_importance(model, images[:1]), head_importance(edited, images[:1])
    assert not torch.allclose(plain.logit_change, changed.logit_change)


@pytest.mark.parametrize("family", ["cls", "mean-pooled"])
def test_direct_logit_attribution_counts_an_sae_edit_as_a_part_of_its_own(family, images):
    """The edit writes to the residual stream outside every head and MLP. What the head reads of it directly is a
    part of its own, so the parts still sum to the logit: nothing for a [CLS] head (the edit touches patch tokens
    only; its effect reaches the logit through the later heads), something for a head that reads the patches."""
    from vitviz.explain import direct_logit_attribution

    def total(parts):
        return parts.embeddings + parts.heads.sum((1, 2)) + parts.mlps.sum(1) + parts.biases + parts.edits

    model = build_tiny_vit(family)
    plain = direct_logit_attribution(model, images)
    assert torch.equal(plain.edits, torch.zeros_like(plain.edits))
    torch.testing.assert_close(total(plain), plain.logit, atol=1e-4, rtol=0)
    sae = sae_for(model)
    p = model.config.num_prefix_tokens
    firing = int(sae.encode(model(images, output_hidden_states=True).hidden_states[1][:, p:]).sum((0, 1)).argmax())
    edited = direct_logit_attribution(with_sae(model, sae, 1, scale={firing: 3.0}), images, plain.target)
    assert (edited.logit - plain.logit).abs().max() > 1e-2  # the edit changes the logit
    torch.testing.assert_close(total(edited), edited.logit, atol=1e-4, rtol=0)
    if family == "cls":  # the recomputed stream may differ from the model's in the last bits
        torch.testing.assert_close(edited.edits, torch.zeros_like(edited.edits), atol=1e-5, rtol=0)
    else:
        assert edited.edits.abs().max() > 1e-3
