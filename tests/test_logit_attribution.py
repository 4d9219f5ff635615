"""Direct logit attribution: the parts sum to the logit for every readout vitviz has, including converted timm models
and a CLIP prompt head, and one head's share equals a sum written out in the test."""

import pytest
import torch
from tiny_models import build_tiny_vit, perturbed
from tiny_text import clip_folder

import vitviz
from vitviz import explain
from vitviz.model import ViT


def assert_sums_to_the_logit(model: ViT, images: torch.Tensor, target=None) -> explain.LogitAttribution:
    parts = explain.direct_logit_attribution(model, images, target)
    total = parts.embeddings + parts.heads.sum(dim=(1, 2)) + parts.mlps.sum(dim=1) + parts.biases
    with torch.no_grad():
        logits = model(images).logits
    expected = logits.gather(1, parts.target[:, None])[:, 0]
    torch.testing.assert_close(parts.logit, expected)
    assert (total - expected).abs().max() <= 1e-4 * max(1.0, float(expected.abs().max()))
    assert parts.heads.shape == (images.shape[0], model.config.num_layers, model.config.num_heads)
    assert parts.heads.abs().max() > 1e-3  # the heads do contribute: not zeros summing to nothing
    return parts


@pytest.mark.parametrize(
    "options",
    [
        {},
        dict(pooling="mean", class_token=False),
        dict(layer_scale=True, num_register_tokens=2),
        dict(distillation_token=True, distillation_head=True),
        dict(pooling="cls+mean"),
        dict(fc_norm=True, pooling="mean"),
        dict(norm="rmsnorm", gated_mlp=True, qk_norm=True),
        dict(final_norm=False, pooling="mean"),
        dict(rotary="dinov3", absolute_positions=False, num_register_tokens=4, layer_scale=True),
    ],
    ids=[
        "cls",
        "mean",
        "layerscale+registers",
        "deit-two-heads",
        "cls+mean",
        "fc_norm",
        "rmsnorm",
        "no-final-norm",
        "dinov3-style",
    ],
)
def test_the_parts_sum_to_the_logit(options):
    assert_sums_to_the_logit(build_tiny_vit(**options), torch.randn(2, 3, 32, 40), target=[1, 3])


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("vit_small_patch16_224", {}),
        ("deit3_small_patch16_224", {}),
        ("deit_small_distilled_patch16_224", {}),
        ("vit_small_patch14_reg4_dinov2", {"img_size": 112, "num_classes": 10}),
    ],
)
def test_the_parts_sum_to_the_logit_of_converted_timm_models(name, kwargs):
    model = vitviz.from_timm(perturbed(name, depth=2, **kwargs))
    size = model.config.image_hw
    assert_sums_to_the_logit(model, torch.randn(2, 3, *size))


def test_a_clip_prompt_head_is_read_with_its_normalisation_frozen(tmp_path, offline):
    _, _, folder = clip_folder(tmp_path / "clip")
    model = vitviz.zero_shot(vitviz.load_model(str(folder)), ["a dog", "a cat", "the moon"], cache_dir=tmp_path)
    assert_sums_to_the_logit(model, torch.randn(2, 3, 32, 32))


def test_one_heads_share_is_its_output_read_by_the_head():
    """One block, mean pooling, no final norm: the logit is W . mean(tokens) + b, so head h's share is W . the mean
    over tokens of (its weights @ its values) through its slice of the projection, times LayerScale."""
    model = build_tiny_vit(num_layers=1, pooling="mean", class_token=False, final_norm=False, layer_scale=True)
    images = torch.randn(2, 3, 32, 32)
    parts = explain.direct_logit_attribution(model, images, target=2)
    with torch.no_grad():
        output = model(images, output_attentions=True, output_qkv=True)
        weights, v = output.attentions[0], output.qkv[0].v
        block, head_dim = model.blocks[0], 8
        for head in range(4):
            written = (weights[:, head] @ v[:, head]) @ block.attn.proj.weight[
                :, head * head_dim : (head + 1) * head_dim
            ].T
            expected = (written * block.ls1.gamma).mean(dim=1) @ model.head.weight[2]
            torch.testing.assert_close(parts.heads[:, 0, head], expected)


def test_a_knocked_out_head_contributes_nothing():
    model = build_tiny_vit().knock_out(heads=[(1, 2)])
    parts = assert_sums_to_the_logit(model, torch.randn(2, 3, 32, 32))
    assert (parts.heads[:, 1, 2] == 0).all()


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: build_tiny_vit(pooling="map", class_token=False), "attention-pooling head is not linear"),
        (lambda: build_tiny_vit(attention_norm=True), "norm on the heads' joined output"),
        (lambda: build_tiny_vit(num_classes=0), "needs a classifier"),
        (lambda: build_tiny_vit().knock_out(heads=[(0, 0)], ablation="mean"), "batch mean"),
    ],
)
def test_readouts_that_are_not_linear_are_refused(build, message):
    with pytest.raises(ValueError, match=message):
        explain.direct_logit_attribution(build(), torch.randn(1, 3, 32, 32))
