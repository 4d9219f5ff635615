"""Interventions on the attention: head_mask and key_mask against references built here, and knocked-out models."""

import pytest
import torch
from tiny_models import build_tiny_vit

from vitviz.model import ViT


def without_head(model: ViT, layer: int, head: int) -> ViT:
    """The reference: the same model with that head's columns of the block's output projection set to 0."""
    reference = ViT(model.config).eval()
    reference.load_state_dict(model.state_dict())
    head_dim = model.config.hidden_size // model.config.num_heads
    with torch.no_grad():
        reference.blocks[layer].attn.proj.weight[:, head * head_dim : (head + 1) * head_dim] = 0
    return reference


def test_a_zero_head_mask_is_the_head_cut_out_of_the_output_projection(tiny_vit):
    model = tiny_vit
    images = torch.randn(2, 3, 32, 40)
    L, H = model.config.num_layers, model.config.num_heads
    for layer in range(L):
        for head in range(H):
            mask = torch.ones(L, H)
            mask[layer, head] = 0
            with torch.no_grad():
                expected = without_head(model, layer, head)(images, output_attentions=True)
                for explicit in (False, True):  # the fused path and the one that returns the weights
                    output = model(images, head_mask=mask, output_attentions=explicit)
                    torch.testing.assert_close(output.logits, expected.logits)
            for ours, theirs in zip(
                model(images, head_mask=mask, output_attentions=True).attentions, expected.attentions
            ):
                torch.testing.assert_close(ours, theirs)  # the returned attentions stay the softmax
                torch.testing.assert_close(ours.sum(-1), torch.ones_like(ours[..., 0]))


def test_a_head_mask_per_image_acts_on_each_image_alone():
    model = build_tiny_vit()
    images = torch.randn(3, 3, 32, 32)
    mask = torch.ones(3, 3, 4)
    mask[0, 0, 1] = 0  # image 0 loses head (0, 1), image 2 head (2, 3), image 1 nothing
    mask[2, 2, 3] = 0
    with torch.no_grad():
        batched = model(images, head_mask=mask).logits
        for index, removed in enumerate([(0, 1), None, (2, 3)]):
            reference = model if removed is None else without_head(model, *removed)
            torch.testing.assert_close(batched[index], reference(images[index : index + 1]).logits[0])


def reference_softmax(model: ViT, images: torch.Tensor, keep: torch.Tensor) -> list[torch.Tensor]:
    """Every block's attention with the keys ``keep`` marks False taken out, written here: the block's q and k, their
    scores, the masked keys' scores dropped and each row's exponentials divided by their sum over the rest."""
    weights, x = [], model.embed(images)[0]
    head_dim = model.config.hidden_size // model.config.num_heads
    arguments = model.block_arguments((images.shape[-2] // 8, images.shape[-1] // 8), images.shape[0], key_mask=keep)
    for block, controls in zip(model.blocks, arguments):
        _, _, (q, k, _) = block(x, controls, need_qkv=True)
        scores = (q @ k.transpose(-2, -1) * head_dim**-0.5).double()
        exponentials = (scores - scores.amax(dim=-1, keepdim=True)).exp() * keep[:, None, None, :]
        weights.append((exponentials / exponentials.sum(dim=-1, keepdim=True)).float())
        x = block(x, controls).hidden
    return weights


def test_a_key_mask_gives_masked_keys_no_attention_and_renormalises_the_rest():
    model = build_tiny_vit("registers")
    images = torch.randn(2, 3, 32, 32)
    T = 3 + 16
    keep = torch.ones(2, T, dtype=torch.bool)
    keep[0, 1:3] = False  # image 0: both registers out
    keep[1, [0, 7]] = False  # image 1: [CLS] and one patch out
    with torch.no_grad():
        output = model(images, key_mask=keep, output_attentions=True)
        fused = model(images, key_mask=keep)
        expected = reference_softmax(model, images, keep)
    torch.testing.assert_close(fused.logits, output.logits)  # the fused kernel takes the same mask
    for ours, theirs in zip(output.attentions, expected):
        torch.testing.assert_close(ours, theirs)
        assert (ours[0, :, :, 1:3] == 0).all() and (ours[1, :, :, [0, 7]] == 0).all()  # exactly zero
        torch.testing.assert_close(ours.sum(-1), torch.ones_like(ours[..., 0]))
    assert not torch.allclose(output.logits, model(images).logits)


def test_mean_ablation_replaces_a_heads_output_with_its_batch_mean():
    model = build_tiny_vit()
    images = torch.randn(4, 3, 32, 32)
    mask = torch.ones(3, 4)
    mask[1, 2] = 0
    with torch.no_grad():
        ablated = model(images, head_mask=mask, head_ablation="mean").logits
        # the reference: block 1's head 2 output (its weights times its values) replaced by the mean over the images
        x, grid = model.embed(images)
        arguments = model.block_arguments(grid, 4)
        for index, block in enumerate(model.blocks):
            if index != 1:
                x = block(x, arguments[index]).hidden
                continue
            _, weights, (q, k, v) = block(x, arguments[index], need_weights=True, need_qkv=True)
            heads = weights @ v  # (B, heads, T, head_dim)
            heads[:, 2] = heads[:, 2].mean(dim=0, keepdim=True)
            attended = block.attn.proj(heads.transpose(1, 2).flatten(2))
            x = x + block.ls1(attended)
            x = x + block.ls2(block.mlp(block.norm2(x)))
        expected = model.forward_head(x, grid).logits
    torch.testing.assert_close(ablated, expected)


def test_a_knocked_out_model_shares_the_weights_and_applies_its_masks_everywhere():
    model = build_tiny_vit("registers")
    images = torch.randn(2, 3, 32, 32)
    knocked = model.knock_out(heads=[(2, 1), (0, 3)], tokens=[1, 2])
    assert knocked.blocks[0] is model.blocks[0] and knocked.head is model.head  # no copy of any weight
    assert not model.interventions and knocked.interventions.heads == ((0, 3), (2, 1))
    mask = torch.ones(3, 4)
    mask[2, 1] = mask[0, 3] = 0
    keep = torch.ones(2, 19, dtype=torch.bool)
    keep[:, 1:3] = False
    with torch.no_grad():
        expected = model(images, head_mask=mask, key_mask=keep, output_attentions=True)
        output = knocked(images, output_attentions=True)
        torch.testing.assert_close(output.logits, expected.logits)
        assert not torch.allclose(model(images).logits, output.logits)  # the original is unchanged
        # code that runs the blocks itself takes the same masks from block_arguments (Grad-CAM, patch features)
        from vitviz import explain

        tokens = explain.patch_features(knocked, images, -1, "token")
        reference = knocked(images, output_hidden_states=True).hidden_states[-1][:, 3:]
        torch.testing.assert_close(tokens, reference)
        # an explicit mask adds to the model's own
        more = torch.ones(3, 4)
        more[1, 0] = 0
        torch.testing.assert_close(
            knocked(images, head_mask=more).logits, model(images, head_mask=mask * more, key_mask=keep).logits
        )
    assert not knocked.knock_out().interventions  # nothing knocked out: the model restored


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda m, x: m(x, head_mask=torch.ones(3, 5)), r"head_mask must be \(layers, heads\) = \(3, 4\)"),
        (lambda m, x: m(x, head_mask=torch.full((3, 4), float("nan"))), "NaN"),
        (lambda m, x: m(x, key_mask=torch.ones(2, 17)), "must hold booleans"),
        (lambda m, x: m(x, key_mask=torch.ones(2, 5, dtype=torch.bool)), r"key_mask must be \(B, T\) = \(2, 17\)"),
        (lambda m, x: m(x, key_mask=torch.zeros(2, 17, dtype=torch.bool)), "nothing to attend to"),
        (lambda m, x: m(x, head_mask=torch.ones(3, 4), head_ablation="half"), "head_ablation must be one of"),
        (lambda m, x: m.knock_out(heads=[(3, 0)]), r"head \(3, 0\) does not exist: the model has 3 layers of 4 heads"),
        (lambda m, x: m.knock_out(tokens=[40])(x), "token 40 does not exist: this input has 17 tokens"),
        (lambda m, x: m.knock_out(tokens=[-1]), "token indices must be >= 0"),
    ],
)
def test_bad_masks_are_refused_with_a_message(call, message):
    with pytest.raises(ValueError, match=message):
        call(build_tiny_vit(), torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize("family", ["mean-pooled", "map-pooled"])
def test_a_knocked_out_patch_is_out_of_the_pooling_heads_view_too(family):
    """SigLIP's attention-pooling head and mean pooling read the kept tokens only: a knocked-out patch's own final
    state (which its row still computes) reaches neither the pooled vector nor the readout."""
    model = build_tiny_vit(family)
    images = torch.randn(2, 3, 32, 32)
    p = model.config.num_prefix_tokens
    knocked_patch = p + 5
    keep = torch.ones(2, p + 16, dtype=torch.bool)
    keep[:, knocked_patch] = False
    with torch.no_grad():
        output = model(images, key_mask=keep, output_hidden_states=True)
        final = output.hidden_states[-1] if model.config.fc_norm else model.norm(output.hidden_states[-1])
        patches = final[:, p:]
        kept = torch.ones(16, dtype=torch.bool)
        kept[5] = False
        if family == "mean-pooled":  # the reference: the mean of the kept patches, through the model's own head
            pooled = patches[:, kept].mean(dim=1)
        else:  # the reference: the pooling query over the kept patches alone
            pooled, _ = model.attn_pool(patches[:, kept])
        expected = model.head(model.norm(pooled) if model.config.fc_norm else pooled)
    assert output.readout[:, knocked_patch].abs().max() == 0
    torch.testing.assert_close(output.readout.sum(-1), torch.ones(2))
    torch.testing.assert_close(output.logits, expected, rtol=1e-5, atol=1e-5)
