"""timm ViTs convert exactly: outputs and every block's attention weights (random weights, no downloads).

The reference attention is what timm's own blocks compute with fused attention off: the tensor its
``attn_drop`` receives, the post-softmax weights.
"""

import pytest
import timm
import torch
from PIL import Image
from timm.data import ImageNetInfo, create_transform, resolve_data_config
from tiny_models import perturbed

import vitviz
from vitviz import ModelLoadError
from vitviz.loading.sources.from_timm import imagenet_class_names, preprocessing_from_timm

RTOL = 1e-4  # the bound: differences relative to the largest output value (at least 1)


def reference_run(model: torch.nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """timm's output and each block's post-softmax attention (fused attention off)."""
    captured = []
    hooks = []
    for block in model.blocks:
        block.attn.fused_attn = False
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, inputs, out: captured.append(inputs[0])))
    with torch.no_grad():
        output = model(images)
    for hook in hooks:
        hook.remove()
    return output, captured


def compare(model: torch.nn.Module, images: torch.Tensor) -> tuple[float, float, vitviz.ViTOutput]:
    """(largest relative output difference, largest attention difference, vitviz's output)."""
    expected, attentions = reference_run(model, images)
    converted = vitviz.from_timm(model)
    with torch.no_grad():
        output = converted(images, output_attentions=True)
    ours = output.logits if output.logits is not None else output.pooled
    assert ours.shape == expected.shape and expected.abs().max() > 0.1  # not zeros against zeros
    assert len(output.attentions) == len(attentions) == len(model.blocks)
    output_difference = float((ours - expected).abs().max() / expected.abs().max().clamp(min=1))
    attention_difference = max(float((a - b).abs().max()) for a, b in zip(output.attentions, attentions))
    return output_difference, attention_difference, output


# name, creation arguments, what the converted config must say
# The conversion is per block, so every family but one is cut to three blocks (the same code at a quarter of a
# ViT-B's time); ViT-B/16 keeps its twelve, so block names of two digits (blocks.10) are read too.
CUT = {"depth": 3}
FAMILIES = [
    ("vit_base_patch16_224", {}, dict(pooling="cls", num_prefix_tokens=1, num_classes=1000, num_layers=12)),
    ("deit_base_distilled_patch16_224", CUT, dict(distillation_head=True, num_prefix_tokens=2)),
    ("vit_small_patch16_224.dino", CUT, dict(num_classes=0, patch_size=16)),
    # DINOv2 is trained at 518; at 224 the same architecture costs a fifth of the time and memory
    (
        "vit_base_patch14_reg4_dinov2",
        {"img_size": 224} | CUT,
        dict(num_register_tokens=4, num_prefix_tokens=5, layer_scale=True, pos_embed_prefix=False),
    ),
    ("vit_base_patch16_clip_224", CUT, dict(norm_pre=True, layer_norm_eps=1e-5, activation="gelu")),
    ("vit_base_patch16_siglip_224", CUT, dict(pooling="map", class_token=False, num_prefix_tokens=0)),
    # more variants: LayerScale without registers; mean pooling without [CLS]; registers without [CLS];
    # another resolution; quick-GELU; MAE's encoder
    ("deit3_small_patch16_224", CUT, dict(layer_scale=True, num_register_tokens=0, pos_embed_prefix=False)),
    ("vit_medium_patch16_gap_256", CUT, dict(pooling="mean", class_token=False, qkv_bias=False, fc_norm=False)),
    ("vit_base_patch16_reg4_gap_256", CUT, dict(pooling="mean", class_token=False, num_prefix_tokens=4, fc_norm=True)),
    ("vit_small_patch16_384", CUT, dict(image_size=(384, 384), grid_size=(24, 24))),
    ("vit_base_patch16_clip_quickgelu_224", CUT, dict(activation="quick_gelu")),
    ("vit_base_patch16_224.mae", CUT, dict(num_classes=0)),
    # DINOv3 (timm's Eva class), cut to two blocks: rotary embeddings instead of a position table, 4 storage tokens
    (
        "vit_small_patch16_dinov3",
        {"depth": 2},
        dict(
            rotary="dinov3",
            absolute_positions=False,
            num_register_tokens=4,
            layer_scale=True,
            pooling="mean",
            qkv_bias=False,
        ),
    ),
    ("vit_base_patch16_dinov3_qkvb", {"depth": 2}, dict(rotary="dinov3", qkv_bias=True, layer_norm_eps=1e-5)),
    (
        "vit_large_patch16_dinov3",
        {"depth": 2, "global_pool": "token", "num_classes": 10},
        dict(rotary="dinov3", pooling="cls", num_classes=10, hidden_size=1024),
    ),
    ("vit_small_plus_patch16_dinov3", {"depth": 2}, dict(rotary="dinov3", gated_mlp=True, mlp_norm=False)),
    # EVA-02 (timm's Eva class): a position table and EVA's rotary embedding, SwiGLU packed (T, S) or split with a
    # norm inside (B, L), the CLIP tower's norm on the attention output; timm's rope ViTs (column-first frequencies)
    (
        "eva02_tiny_patch14_224",
        {"depth": 2},
        dict(rotary="eva", gated_mlp=True, mlp_norm=False, rotary_reference_grid=(16, 16), absolute_positions=True),
    ),
    ("eva02_small_patch14_224", {"depth": 2}, dict(rotary="eva", gated_mlp=True, rotary_temperature=10000.0)),
    ("eva02_base_patch14_224", {"depth": 2}, dict(rotary="eva", gated_mlp=True, mlp_norm=True, fc_norm=True)),
    ("eva02_large_patch14_224", {"depth": 2}, dict(rotary="eva", gated_mlp=True, mlp_norm=True, hidden_size=1024)),
    ("eva02_base_patch16_clip_224", {"depth": 2}, dict(rotary="eva", attention_norm=True, pooling="cls")),
    (
        "vit_base_patch16_rope_224",
        {"depth": 2},
        dict(
            rotary="eva",
            rotary_column_first=True,
            layer_scale=True,
            rotary_reference_grid=None,
            absolute_positions=False,
        ),
    ),
    # the Perception Encoder (Eva): PE-Core's attention-pooling head over every token, 8 heads against the blocks' 6,
    # a norm before the blocks, EVA's rotary embedding offset by 1, column first; PE-Spatial: no final norm at all
    (
        "vit_pe_core_small_patch16_384",
        {"depth": 2},
        dict(pooling="map", pool_heads=8, pool_prefix=True, norm_pre=True, rotary_offset=1.0, rotary_column_first=True),
    ),
    ("vit_pe_spatial_small_patch16_512", {"depth": 2, "img_size": 256}, dict(final_norm=False, pooling="mean")),
    # RoPE-Mixed: learned rotary frequencies per block and head, with and without a position table
    (
        "vit_base_patch16_rope_mixed_224",
        {"depth": 2},
        dict(rotary="mixed", rotary_column_first=True, absolute_positions=False),
    ),
    ("vit_base_patch16_rope_mixed_ape_224", {"depth": 2}, dict(rotary="mixed", absolute_positions=True)),
    # AIMv2 (timm's VisionTransformer): RMSNorm everywhere, one in the patch embedding too, SwiGLU, no biases, no [CLS]
    (
        "aimv2_large_patch14_224",
        {"depth": 2},
        dict(norm="rmsnorm", patch_norm=True, gated_mlp=True, class_token=False, pooling="mean", qkv_bias=False),
    ),
    # per-head q/k norms; SwiGLU packed; SwiGLU split with the norms inside the MLP and on the attention output
    ("vit_small_patch16_224", {"depth": 2, "qk_norm": True}, dict(qk_norm=True)),
    ("vit_small_patch16_224", {"depth": 2, "pos_embed": "none"}, dict(absolute_positions=False, rotary="none")),
    (
        "vit_small_patch16_224",
        {"depth": 2, "mlp_layer": timm.layers.SwiGLUPacked, "act_layer": torch.nn.SiLU},
        dict(gated_mlp=True, mlp_size=768),
    ),  # the packed fc1 (1536) holds the gate and the value
    (
        "vit_small_patch16_224",
        {
            "depth": 2,
            "mlp_layer": timm.layers.SwiGLU,
            "act_layer": torch.nn.SiLU,
            "scale_mlp_norm": True,
            "scale_attn_norm": True,
        },
        dict(gated_mlp=True, mlp_norm=True, attention_norm=True),
    ),
]


@pytest.mark.parametrize("name,kwargs,expected_config", FAMILIES, ids=[f"{f[0]}-{i}" for i, f in enumerate(FAMILIES)])
def test_timm_family_reproduces_outputs_and_every_attention(name, kwargs, expected_config):
    model = perturbed(name, **kwargs)
    size = model.patch_embed.img_size
    output_difference, attention_difference, output = compare(model, torch.randn(2, 3, *size))
    assert output_difference <= RTOL
    assert attention_difference <= RTOL
    config = vitviz.from_timm(model).config
    for field, value in expected_config.items():
        assert getattr(config, field) == value, field
    assert output.readout.sum(-1).allclose(torch.ones(2))  # the head's reading of the tokens is a distribution


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("deit_base_distilled_patch16_224", {}),  # position embeddings with a prefix part
        ("vit_base_patch14_reg4_dinov2", {"img_size": 224}),  # without one (no_embed_class)
        ("vit_base_patch16_siglip_224", {}),
        ("vit_small_patch16_dinov3", {"depth": 2}),  # rotary embeddings on a non-square grid
        ("eva02_small_patch14_224", {"depth": 2}),  # ... rescaled onto the pretraining grid, with a position table
        ("vit_base_patch16_rope_224", {"depth": 2}),
        ("vit_base_patch16_rope_mixed_224", {"depth": 2}),
        ("aimv2_large_patch14_224", {"depth": 2}),
        ("vit_pe_core_small_patch16_384", {"depth": 2}),
    ],
)
def test_non_square_input_matches_timm_dynamic_img_size(name, kwargs):
    model = perturbed(name, dynamic_img_size=True, **kwargs)
    patch = model.patch_embed.patch_size[0]
    images = torch.randn(1, 3, 10 * patch, 17 * patch)  # wider than tall, and another grid than training's
    output_difference, attention_difference, output = compare(model, images)
    assert output.grid_size == (10, 17)
    assert output_difference <= RTOL and attention_difference <= RTOL


@pytest.mark.parametrize(
    "name",
    [
        "vit_small_patch16_dinov3",
        "eva02_small_patch14_224",
        "vit_base_patch16_rope_224",
        "vit_base_patch16_rope_mixed_224",
    ],
)
def test_the_rotary_embedding_is_what_makes_it_match(name):
    """Without its rotary embedding the converted model is far from timm's: the tests above would notice one lost."""
    import dataclasses

    model = perturbed(name, depth=2, global_pool="token", dynamic_img_size=True, num_classes=0)
    patch = model.patch_embed.patch_size[0]
    images = torch.randn(1, 3, 6 * patch, 10 * patch)  # non-square, and not the training grid
    converted = vitviz.from_timm(model)
    no_rotary = vitviz.ViT(dataclasses.replace(converted.config, rotary="none")).eval()
    no_rotary.load_state_dict({k: v for k, v in converted.state_dict().items() if k != "rotary_frequencies"})
    with torch.no_grad():
        expected = model(images)
        assert (converted(images).pooled - expected).abs().max() <= RTOL
        assert (no_rotary(images).pooled - expected).abs().max() > 0.01


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("vit_base_patch14_reg4_dinov2", {"img_size": 112}),
        ("deit_base_distilled_patch16_224", {}),
        ("vit_small_patch16_dinov3", {}),
    ],
)
def test_queries_keys_and_values_of_converted_models_give_timms_attention(name, kwargs):
    """The facets of patch features: softmax(q kᵀ · scale) from the converted model's q and k is timm's own attention,
    and its values are those timm's qkv projection makes (the value third of its output)."""
    model = perturbed(name, depth=2, **kwargs)
    values = []
    hooks = [
        block.attn.qkv.register_forward_hook(lambda m, inputs, out: values.append(out.chunk(3, dim=-1)[2]))
        for block in model.blocks
    ]
    size = model.patch_embed.img_size
    images = torch.randn(2, 3, *size)
    _, attentions = reference_run(model, images)
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        output = vitviz.from_timm(model)(images, output_qkv=True)
    head_dim = output.qkv[0].q.shape[-1]
    for (q, k, v), expected, timm_values in zip(output.qkv, attentions, values):
        weights = torch.softmax(q @ k.transpose(-2, -1) * head_dim**-0.5, dim=-1)
        assert (weights - expected).abs().max() <= RTOL
        joined = v.transpose(1, 2).flatten(2)  # (B, T, heads * head_dim): the heads side by side, as timm's
        assert (joined - timm_values).abs().max() <= RTOL * timm_values.abs().max()


def test_siglip_pooling_weights_come_back_with_the_output():
    model = perturbed("vit_base_patch16_siglip_224", depth=3)  # the pooling head reads the last block's tokens
    images = torch.randn(2, 3, 224, 224)
    tokens = []
    model.attn_pool.register_forward_pre_hook(lambda m, inputs: tokens.append(inputs[0]))
    converted = vitviz.from_timm(model)
    with torch.no_grad():
        model(images)
        output = converted(images)
        # the reference: timm's pooling query against timm's final tokens, with timm's own weights
        pool = model.attn_pool
        B, N, D = tokens[0].shape
        heads, head_dim = pool.num_heads, D // pool.num_heads
        q = pool.q(pool.latent).reshape(1, 1, heads, head_dim).transpose(1, 2)
        k = pool.kv(tokens[0]).reshape(B, N, 2, heads, head_dim).permute(2, 0, 3, 1, 4)[0]
        expected = ((q * pool.scale) @ k.transpose(-2, -1)).softmax(-1)[:, :, 0]  # (B, heads, N)
    assert output.pool_attention.shape == (2, 12, 196)
    assert (output.pool_attention - expected).abs().max() <= RTOL
    # what the head reads: the mean over heads of those weights, on the patches (no prefix tokens here)
    assert torch.allclose(output.readout, expected.mean(dim=1), atol=1e-6)


@pytest.mark.parametrize(
    "build,feature",
    [
        (lambda: timm.create_model("vit_small_patch16_224", depth=1, dynamic_img_pad=True), "dynamic_img_pad"),
        (lambda: timm.create_model("beit_base_patch16_224", depth=1), "relative position bias"),
        (lambda: timm.create_model("eva02_tiny_patch14_224", depth=1, qk_norm=True), "q/k normalisation"),
        (lambda: timm.create_model("vit_small_patch16_224", depth=1, act_layer=torch.nn.ReLU), "the activation ReLU"),
        (lambda: timm.create_model("vit_pwee_patch16_reg1_gap_256", depth=1), "ParallelScalingBlock blocks"),
        (lambda: timm.create_model("vit_small_patch16_224", depth=1, global_pool="max"), "global_pool='max'"),
        (lambda: torch.nn.Linear(2, 2), "expected a timm VisionTransformer"),
    ],
    ids=["dynamic_img_pad", "beit", "eva_qk_norm", "relu", "parallel", "max_pool", "not_timm"],
)
def test_what_cannot_be_reproduced_is_refused_by_name(build, feature):
    with pytest.raises(ModelLoadError, match=feature):
        vitviz.from_timm(build())


@pytest.mark.parametrize(
    "name",
    ["vit_base_patch16_224.augreg2_in21k_ft_in1k", "vit_base_patch16_clip_224.openai", "deit3_small_patch16_224"],
)
def test_preprocessing_matches_timms_evaluation_transform(name):
    model = timm.create_model(name, pretrained=False, num_classes=0)
    photo = Image.effect_mandelbrot((333, 250), (-2, -1.2, 1, 1.2), 50).convert("RGB")  # not square, not 224
    expected = create_transform(**resolve_data_config({}, model=model))(photo)
    torch.testing.assert_close(preprocessing_from_timm(model)(photo), expected, atol=1e-6, rtol=0)


def test_class_names_come_from_timms_imagenet_metadata():
    in1k = timm.create_model("vit_small_patch16_224", pretrained=False, depth=1)
    assert imagenet_class_names(in1k) == ImageNetInfo("imagenet-1k").label_descriptions()
    assert imagenet_class_names(in1k)[281] == "tabby, tabby cat"
    in21k = timm.create_model("vit_small_patch16_224", pretrained=False, depth=1, num_classes=21843)
    assert len(imagenet_class_names(in21k)) == 21843
    projection = timm.create_model("vit_small_patch16_224", pretrained=False, depth=1, num_classes=512)
    assert imagenet_class_names(projection) is None  # CLIP's projection is not a classifier
