"""The from-scratch ViT: block shapes, both attention paths, attentions, any input size."""

import pytest
import torch
from tiny_models import TINY, build_tiny_vit

from vitviz.model import MLP, Attention, AttentionControls, Block, PatchEmbedding, ViT, ViTConfig, autocast


def test_shapes_of_every_block():
    config = ViTConfig(**TINY)
    B, T, D = 2, 17, config.hidden_size
    images = torch.randn(B, 3, 32, 32)
    assert PatchEmbedding(config)(images).shape == (B, 16, D)  # (B, C, H, W) -> (B, N, D)
    tokens = torch.randn(B, T, D)
    out, weights, _ = Attention(config)(tokens, need_weights=True)
    assert out.shape == (B, T, D) and weights.shape == (B, config.num_heads, T, T)
    assert MLP(config)(tokens).shape == (B, T, D)
    assert Block(config)(tokens)[0].shape == (B, T, D)
    model = ViT(config)
    encoded = tokens
    for block in model.blocks:
        encoded = block(encoded).hidden
    assert encoded.shape == (B, T, D)
    output = model(images)
    assert output.logits.shape == (B, config.num_classes)
    assert output.last_hidden_state.shape == (B, T, D) and output.pooled.shape == (B, D)


@pytest.mark.parametrize("pooling,registers", [("cls", 0), ("cls", 2), ("mean", 0), ("mean", 4)])
def test_fused_and_explicit_attention_agree(pooling, registers):
    model = build_tiny_vit(pooling=pooling, num_register_tokens=registers)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        fused = model(images)
        explicit = model(images, output_attentions=True)
    assert fused.attentions is None
    torch.testing.assert_close(fused.logits, explicit.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(fused.last_hidden_state, explicit.last_hidden_state, atol=1e-5, rtol=0)


def test_eager_attn_implementation_trains_like_sdpa():
    # the same maths through either kernel: equal logits and equal gradients, attentions still opt-in
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    grads = {}
    for kind in ("sdpa", "eager"):
        model = build_tiny_vit().train()
        model.attn_implementation = kind
        output = model(images)
        assert output.attentions is None
        torch.nn.functional.cross_entropy(output.logits, labels).backward()
        grads[kind] = {name: p.grad for name, p in model.named_parameters()}
    for name, grad in grads["sdpa"].items():
        torch.testing.assert_close(grads["eager"][name], grad, atol=1e-5, rtol=1e-4)
    model.attn_implementation = "flash"
    with pytest.raises(ValueError, match="'sdpa' or 'eager'"):
        model(images)


def test_attentions_are_post_softmax_rows_for_every_block():
    model = build_tiny_vit(num_register_tokens=1)
    output = model(torch.randn(2, 3, 32, 48), output_attentions=True)
    T = 2 + 4 * 6
    assert output.grid_size == (4, 6) and output.num_prefix_tokens == 2
    assert len(output.attentions) == model.config.num_layers
    for weights in output.attentions:
        assert weights.shape == (2, 4, T, T)
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, T))


def test_attention_weights_match_a_manual_computation():
    config = ViTConfig(**TINY)
    attention = Attention(config)
    x = torch.randn(1, 5, config.hidden_size)
    weights = attention(x, need_weights=True).weights
    q, k, _ = attention.qkv(x).split(config.hidden_size, dim=-1)
    head = 2
    hd = config.hidden_size // config.num_heads
    qh, kh = q[0, :, head * hd : (head + 1) * hd], k[0, :, head * hd : (head + 1) * hd]
    expected = torch.softmax(qh @ kh.T / hd**0.5, dim=-1)
    torch.testing.assert_close(weights[0, head], expected)


@pytest.mark.parametrize(
    "options",
    [
        {},
        dict(num_register_tokens=2, layer_scale=True),
        dict(rotary="dinov3", absolute_positions=False, qk_norm=True, num_register_tokens=4),
        dict(rotary="eva", rotary_reference_grid=(4, 4), qkv_bias=False),
    ],
)
def test_queries_keys_and_values_are_what_the_attention_uses(options):
    """softmax(q kᵀ · scale) is the block's attention, and its weights times v, heads joined and projected, is what
    the block's attention writes (rotated, normed queries and keys included), on a non-square input."""
    model = build_tiny_vit(noise=0.05, **options)  # small weights: float32 sums agree to assert_close's tolerance
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        output = model(images, output_attentions=True, output_qkv=True)
        fused = model(images, output_qkv=True)  # the sdpa path returns the same q, k, v
    assert fused.attentions is None and len(output.qkv) == model.config.num_layers
    T, heads, head_dim = output.num_prefix_tokens + 4 * 6, model.config.num_heads, model.config.hidden_size // 4
    x = model.embed(images)[0]
    for block, (q, k, v), weights, other in zip(model.blocks, output.qkv, output.attentions, fused.qkv):
        assert q.shape == k.shape == v.shape == (2, heads, T, head_dim)
        torch.testing.assert_close(torch.softmax(q @ k.transpose(-2, -1) * head_dim**-0.5, dim=-1), weights)
        for ours, theirs in zip(other, (q, k, v)):
            torch.testing.assert_close(ours, theirs)
        with torch.no_grad():
            written = block.attn.proj((weights @ v).transpose(1, 2).reshape(2, T, -1))
            expected = block.attn(block.norm1(x), AttentionControls(model.rotary_embeddings((4, 6))[0])).out
            x = block(x, AttentionControls(model.rotary_embeddings((4, 6))[0])).hidden
        torch.testing.assert_close(written, expected)
    assert model(images).qkv is None


def test_returned_weights_are_taken_before_dropout():
    model = build_tiny_vit(attention_dropout=0.5).train()
    output = model(torch.randn(2, 3, 32, 32), output_attentions=True)
    for weights in output.attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))


def test_attentions_carry_gradients_for_class_specific_maps():
    model = build_tiny_vit()
    output = model(torch.randn(1, 3, 32, 32), output_attentions=True)
    grads = torch.autograd.grad(output.logits[0, 1], output.attentions)
    assert all(g.shape == a.shape for g, a in zip(grads, output.attentions))
    assert all(g.abs().sum() > 0 for g in grads)


def test_non_square_input_interpolates_position_embeddings():
    model = build_tiny_vit()
    # training grid 4x4 -> 3x5 for a 24x40 image; the patch part is resampled, prefix kept
    pos = model.position_embeddings(3, 5)
    assert pos.shape == (1, 1 + 15, 32)
    torch.testing.assert_close(pos[:, 0], model.pos_embed[:, 0])
    assert model.position_embeddings(4, 4) is model.pos_embed
    output = model(torch.randn(1, 3, 24, 40), output_attentions=True)
    assert output.grid_size == (3, 5) and output.attentions[0].shape[-1] == 16


def test_constant_position_embeddings_stay_constant_when_interpolated():
    model = build_tiny_vit()
    with torch.no_grad():
        model.pos_embed[:, 1:] = 0.25
    torch.testing.assert_close(model.position_embeddings(7, 3)[:, 1:], torch.full((1, 21, 32), 0.25))


def test_non_square_training_size():
    model = build_tiny_vit(image_size=(16, 40))
    assert model.config.grid_size == (2, 5)
    output = model(torch.randn(2, 3, 16, 40), output_attentions=True)
    assert output.logits.shape == (2, 5) and output.attentions[0].shape == (2, 4, 11, 11)


def test_backbone_returns_features_and_attentions():
    model = build_tiny_vit(num_classes=0)
    output = model(torch.randn(2, 3, 32, 32), output_attentions=True)
    assert output.logits is None
    assert output.pooled.shape == (2, 32)
    assert len(output.attentions) == 3


def test_mean_pooling_averages_patch_tokens_only():
    model = build_tiny_vit(pooling="mean", num_register_tokens=2)
    output = model(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(output.pooled, output.last_hidden_state[:, 3:].mean(1))
    model = build_tiny_vit(pooling="mean", class_token=False)
    output = model(torch.randn(2, 3, 32, 32), output_attentions=True)
    assert output.num_prefix_tokens == 0 and output.attentions[0].shape[-1] == 16


def test_bf16_autocast_is_close_to_fp32_and_keeps_fp32_attentions():
    model = build_tiny_vit(noise=0.05)  # weights of a trained model's size: bf16's error stays within the bounds
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        exact = model(images, output_attentions=True)
        with autocast("bf16"):
            fast = model(images, output_attentions=True)
    assert fast.attentions[0].dtype == torch.float32
    torch.testing.assert_close(fast.attentions[-1].sum(-1), torch.ones(2, 4, 17))
    assert (fast.attentions[-1] - exact.attentions[-1]).abs().max() < 0.02
    torch.testing.assert_close(fast.logits.float().softmax(-1), exact.logits.softmax(-1), atol=0.03, rtol=0)
    with pytest.raises(ValueError, match="'fp32', 'bf16'"):
        autocast("fp8")


@pytest.mark.parametrize(
    "shape,message",
    [((2, 1, 32, 32), r"\(B, 3, H, W\)"), ((3, 32, 32), r"\(B, 3, H, W\)"), ((1, 3, 30, 32), "multiple of the patch")],
)
def test_bad_inputs_get_clear_errors(shape, message):
    with pytest.raises(ValueError, match=message):
        build_tiny_vit()(torch.randn(*shape))


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_heads=5), "not divisible by num_heads"),
        (dict(image_size=30), "not a multiple of patch_size"),
        (dict(pooling="max"), "pooling must be"),
        (dict(class_token=False), "needs class_token"),
    ],
)
def test_bad_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**{**TINY, **overrides})


def test_config_from_dict_names_unknown_fields():
    with pytest.raises(ValueError, match="unknown ViTConfig fields \\['depth'\\]"):
        ViTConfig.from_dict({**TINY, "depth": 3})
    assert ViTConfig.from_dict({**TINY, "image_size": [16, 24]}).image_size == (16, 24)


# --- the features of the model families (DeiT, DINOv2, CLIP, SigLIP...) ---------------------------

FAMILY_CONFIGS = {
    "deit distilled": dict(distillation_token=True, distillation_head=True),
    "dinov2 registers": dict(num_register_tokens=4, layer_scale=True, pos_embed_prefix=False, pos_embed_antialias=True),
    "clip": dict(norm_pre=True, activation="quick_gelu", layer_norm_eps=1e-5),
    "siglip": dict(class_token=False, pooling="map", activation="gelu_tanh"),
    "mean with fc_norm": dict(class_token=False, num_register_tokens=2, pooling="mean", fc_norm=True),
    "dinov2 classifier": dict(pooling="cls+mean", layer_scale=True),
}


def randomised(model: ViT) -> ViT:
    with torch.no_grad():  # every parameter random, so each feature changes the output
        for param in model.parameters():
            param.normal_(std=0.3)
    return model


@pytest.mark.parametrize("family", FAMILY_CONFIGS)
def test_every_family_feature_agrees_between_attention_paths_and_reads_a_distribution(family):
    model = randomised(build_tiny_vit(**FAMILY_CONFIGS[family]))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fused = model(images)
        explicit = model(images, output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(fused.logits, explicit.logits, atol=1e-5, rtol=1e-5)
    T = model.config.num_prefix_tokens + 16
    assert explicit.readout.shape == (2, T) and torch.allclose(explicit.readout.sum(-1), torch.ones(2))
    assert len(explicit.hidden_states) == 3 and explicit.hidden_states[-1].shape == (2, T, 32)
    # ... and each feature matters: switching it off changes the logits
    plain = ViT(ViTConfig(**TINY)).eval()
    assert not torch.allclose(plain(images).logits, explicit.logits)


def test_prefix_tokens_come_in_the_sources_order():
    # [CLS], then the distillation token, then the registers, then the patches: as timm and Hugging Face
    model = randomised(build_tiny_vit(distillation_token=True, num_register_tokens=2))
    tokens = []
    model.blocks[0].register_forward_pre_hook(lambda m, inputs: tokens.append(inputs[0]))
    with torch.no_grad():
        output = model(torch.randn(1, 3, 32, 32))
    expected = torch.cat([model.cls_token, model.dist_token, model.register_tokens], dim=1) + model.pos_embed[:, :4]
    torch.testing.assert_close(tokens[0][:, :4], expected)
    assert output.num_prefix_tokens == model.config.num_prefix_tokens == 4


def test_distilled_logits_are_the_mean_of_both_heads():
    model = randomised(build_tiny_vit(distillation_token=True, distillation_head=True))
    with torch.no_grad():
        output = model(torch.randn(2, 3, 32, 32))
        final = output.last_hidden_state
        expected = (model.head(final[:, 0]) + model.head_dist(final[:, 1])) / 2
    torch.testing.assert_close(output.logits, expected)
    torch.testing.assert_close(output.pooled, (final[:, 0] + final[:, 1]) / 2)
    assert output.readout[:, :2].tolist() == [[0.5, 0.5]] * 2 and output.readout[:, 2:].sum() == 0


def test_attention_pooling_returns_its_weights_and_reads_them():
    model = randomised(build_tiny_vit(class_token=False, pooling="map"))
    with torch.no_grad():
        output = model(torch.randn(2, 3, 32, 32))
        pool = model.attn_pool
        x = output.last_hidden_state  # no prefix tokens: every token is a patch
        q = pool.q(pool.query).reshape(1, 4, 8).transpose(0, 1)  # (heads, 1, head_dim)
        k = pool.kv(x)[..., :32].reshape(2, 16, 4, 8).transpose(1, 2)  # (B, heads, N, head_dim)
        expected = (q @ k.transpose(-2, -1) / 8**0.5).softmax(-1)[:, :, 0]  # (B, heads, N)
    torch.testing.assert_close(output.pool_attention, expected)
    torch.testing.assert_close(output.readout, expected.mean(dim=1))


def test_fc_norm_normalises_the_pooled_vector_not_the_tokens():
    model = randomised(build_tiny_vit(class_token=False, pooling="mean", fc_norm=True))
    with torch.no_grad():
        output = model(torch.randn(2, 3, 32, 32), output_hidden_states=True)
    torch.testing.assert_close(output.last_hidden_state, output.hidden_states[-1])  # tokens as the last block left them
    torch.testing.assert_close(output.pooled, model.norm(output.hidden_states[-1].mean(dim=1)))


def test_family_configs_round_trip_through_a_checkpoint(tmp_path):
    from vitviz import Preprocessing, load_checkpoint, save_checkpoint

    for index, (family, overrides) in enumerate(FAMILY_CONFIGS.items()):
        model = randomised(build_tiny_vit(**overrides))
        path = tmp_path / f"{index}.pt"
        save_checkpoint(path, model, [f"c{i}" for i in range(5)], Preprocessing(resize=32))
        loaded = load_checkpoint(path)
        assert loaded.config == model.config, family
        images = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(loaded(images).logits, model(images).logits, atol=0, rtol=0)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(distillation_head=True), "distillation_head=True needs distillation_token"),
        (dict(class_token=False, distillation_token=True), "distillation_token=True needs class_token"),
        (dict(class_token=False, pooling="cls+mean"), "needs class_token=True"),
        (dict(pooling="max"), "pooling must be one of"),
        (dict(activation="relu"), "activation must be one of"),
    ],
)
def test_inconsistent_family_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**{**TINY, **overrides})


# --- precisions: float64 models, fp16 / bf16 weights and autocast -----------------------------------------------


@pytest.mark.parametrize("family", ["plain", *FAMILY_CONFIGS])
def test_a_float64_model_returns_attentions_close_to_float32(family):
    # the explicit path used to force the weights to fp32 and crash: "expected scalar type Double but found Float"
    model = randomised(build_tiny_vit(**FAMILY_CONFIGS.get(family, {})))
    images = torch.randn(2, 3, 32, 32)
    double = ViT(model.config).eval()
    double.load_state_dict(model.state_dict())
    double = double.double()
    with torch.no_grad():
        single = model(images, output_attentions=True)
        exact = double(images.double(), output_attentions=True)
        fused = double(images.double())
    assert exact.attentions[0].dtype == torch.float64 and exact.readout.dtype == torch.float64
    for a, b in zip(exact.attentions, single.attentions):
        torch.testing.assert_close(a.float(), b, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(exact.logits, fused.logits, atol=1e-12, rtol=1e-12)  # both attention paths agree
    torch.testing.assert_close(exact.logits.float(), single.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["plain", "siglip"])
def test_half_precision_weights_and_autocast_run_both_attention_paths(dtype, family):
    model = build_tiny_vit(**FAMILY_CONFIGS.get(family, {}))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        exact = model(images)
        half = ViT(model.config).eval()
        half.load_state_dict(model.state_dict())
        half = half.to(dtype)
        for output in (half(images.to(dtype), output_attentions=True), half(images.to(dtype))):
            torch.testing.assert_close(output.logits.float(), exact.logits, atol=0.05, rtol=0.05)
        with torch.autocast("cpu", dtype=dtype):
            autocast_output = model(images, output_attentions=True)
    attentions = half(images.to(dtype), output_attentions=True).attentions
    assert attentions[0].dtype == torch.float32  # the softmax runs in fp32: rows sum to 1 at fp32 precision
    torch.testing.assert_close(attentions[-1].sum(-1), torch.ones_like(attentions[-1][..., 0]))
    assert autocast_output.attentions[0].dtype == torch.float32


@pytest.mark.parametrize("kind", ["dinov3", "eva"])
def test_rotary_rotation_leaves_prefix_tokens_and_lengths_alone_and_depends_on_relative_position(kind):
    from vitviz.model.rotary import rotary_embedding, rotate

    torch.manual_seed(0)
    grid, head_dim, prefix = (4, 6), 16, 2
    rope = rotary_embedding(kind, grid, head_dim, 100.0, reference_grid=(8, 8) if kind == "eva" else None)
    assert rope.sin.shape == rope.cos.shape == (24, 16) and rope.interleaved == (kind == "eva")
    q = torch.randn(1, 1, prefix + 24, head_dim)
    rotated = rotate(q, rope, prefix)
    assert torch.equal(rotated[:, :, :prefix], q[:, :, :prefix])  # [CLS] and registers are not rotated
    assert torch.allclose(rotated.norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths
    # one query and one key placed at every patch: their score depends only on the offset between the two patches
    q1, k1 = torch.randn(head_dim), torch.randn(head_dim)
    qs = rotate(q1.expand(1, 1, 24, head_dim), rope, 0)[0, 0]
    ks = rotate(k1.expand(1, 1, 24, head_dim), rope, 0)[0, 0]
    index = lambda r, c: r * grid[1] + c  # noqa: E731
    assert torch.allclose(qs[index(0, 1)] @ ks[index(1, 3)], qs[index(2, 2)] @ ks[index(3, 4)], atol=1e-5)
    assert not torch.allclose(qs[index(0, 1)] @ ks[index(1, 3)], qs[index(0, 1)] @ ks[index(3, 4)], atol=1e-3)


def test_a_rotary_model_agrees_between_fused_and_explicit_attention_and_has_no_position_table():
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        mlp_size=64,
        num_classes=3,
        num_register_tokens=2,
        absolute_positions=False,
        rotary="dinov3",
    )
    model = ViT(config).eval()
    assert model.pos_embed is None and config.num_parameters == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
        x = torch.randn(2, 3, 32, 48)  # non-square: a 4 x 6 grid
        fused, explicit = model(x), model(x, output_attentions=True)
    assert torch.allclose(fused.logits, explicit.logits, atol=1e-5)
    with pytest.raises(ValueError, match="head width divisible by 4"):
        ViTConfig(hidden_size=36, num_heads=6, rotary="dinov3")
