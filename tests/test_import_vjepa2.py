"""V-JEPA 2 from transformers reproduces its source: the classifier's logits, every encoder block's attention, the
encoder's last hidden state, and the attentive pooler's weights, which transformers computes and never returns
(re-computed here from the inputs its pooler modules receive, through forward hooks, and their own weights).

Tiny random models built with transformers' own config and model classes (every weight moved off its initial value,
no downloads): 32-pixel frames, 8-pixel patches, 4 frames in tubelets of 2, so 2 x 4 x 4 tubelet tokens. Head widths
16 (three rotated parts of 4 channels, 4 left unrotated) and 24 (three parts of 8, none left).
"""

import pytest
import torch
import transformers as hf
from hub_cache import cached_snapshot
from transformers.models.vjepa2 import modeling_vjepa2

import vitviz
from vitviz import ModelLoadError
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.loading.sources.huggingface_vjepa2 import DEFAULTS
from vitviz.model import attentive_pooler
from vitviz.model.rotary import rotary_embedding, rotate

ATOL = 1e-4  # the bound for logits, hidden states and attentions, fp32
TINY = dict(
    crop_size=32,
    patch_size=8,
    frames_per_clip=4,
    hidden_size=64,
    num_attention_heads=4,
    num_hidden_layers=2,
    mlp_ratio=2.0,  # the encoder's MLP 2 D wide, the pooler's 4 D (transformers builds it with its default ratio)
    num_pooler_layers=2,
    pred_hidden_size=16,
    pred_num_attention_heads=2,
    pred_num_hidden_layers=1,
)
HEAD_WIDTHS = {16: dict(), 24: dict(hidden_size=48, num_attention_heads=2)}


def hf_model(backbone: bool = False, **overrides) -> torch.nn.Module:
    """A tiny VJEPA2ForVideoClassification (or VJEPA2Model), every parameter moved by seeded Gaussian noise."""
    torch.manual_seed(0)
    config = hf.VJEPA2Config(**(TINY | dict(num_labels=5, attn_implementation="eager") | overrides))
    model = (hf.VJEPA2Model if backbone else hf.VJEPA2ForVideoClassification)(config)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    return model.eval()


def clips(batch: int = 2, frames: int = 4, side: int = 32) -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randn(batch, frames, 3, side, side)  # (B, frames, C, H, W): transformers' pixel_values_videos


def convert(model: torch.nn.Module) -> vitviz.ViT:
    return from_huggingface(model.state_dict(), model.config.to_dict())


def recomputed_weights(module: torch.nn.Module, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) written out with a transformers pooler attention's own q_proj and k_proj, (B, heads,
    Tq, T), from the inputs it received."""
    heads = module.num_heads
    q = module.q_proj(queries).unflatten(-1, (heads, -1)).transpose(1, 2)
    k = module.k_proj(keys).unflatten(-1, (heads, -1)).transpose(1, 2)
    return (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(dim=-1)


def hook_pooler(pooler: torch.nn.Module) -> dict:
    """Forward pre-hooks on transformers' pooler attention modules: what each receives, by block index or "cross"."""
    inputs = {}

    def keep(name):
        return lambda module, args, kwargs: inputs.__setitem__(name, (args, kwargs))

    for index, layer in enumerate(pooler.self_attention_layers):
        layer.self_attn.register_forward_pre_hook(keep(index), with_kwargs=True)
    pooler.cross_attention_layer.cross_attn.register_forward_pre_hook(keep("cross"), with_kwargs=True)
    return inputs


def pooler_reference(pooler: torch.nn.Module, inputs: dict) -> tuple[list[torch.Tensor], torch.Tensor]:
    """transformers' pooler blocks' weights (B, heads, T, T) each and its query's (B, heads, T), recomputed from the
    inputs ``hook_pooler`` caught."""
    blocks = []
    for index, layer in enumerate(pooler.self_attention_layers):
        hidden = inputs[index][1]["hidden_states"]
        blocks.append(recomputed_weights(layer.self_attn, hidden, hidden))
    args, _ = inputs["cross"]
    return blocks, recomputed_weights(pooler.cross_attention_layer.cross_attn, args[0], args[1])[:, :, 0]


def dense_readout(cross: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
    """The readout, densely: the query's head mean, then r <- 0.5 r + 0.5 r @ mean_h(A), the last block first."""
    row = cross.mean(dim=1)
    for attention in reversed(blocks):
        row = 0.5 * row + 0.5 * (row[:, None, :] @ attention.mean(dim=1))[:, 0]
    return row


@pytest.mark.parametrize("width", HEAD_WIDTHS)
def test_logits_and_every_attention_match_transformers(width):
    source = hf_model(**HEAD_WIDTHS[width])
    x = clips()
    with torch.no_grad():
        expected = source(pixel_values_videos=x, output_attentions=True)
        model = convert(source)
        out, fused = model(x, output_attentions=True), model(x)
    assert model.config.hidden_size // model.config.num_heads == width
    torch.testing.assert_close(out.logits, expected.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(fused.logits, expected.logits, atol=ATOL, rtol=0)  # the fused kernels' path
    assert len(out.attentions) == len(expected.attentions) == 2
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        assert ours.shape == theirs.shape == (2, model.config.num_heads, 32, 32)
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def test_the_encoder_matches_transformers_last_hidden_state_without_its_predictor():
    source = hf_model(backbone=True)
    x = clips()
    with torch.no_grad():
        expected = source(pixel_values_videos=x, skip_predictor=True).last_hidden_state
        model = convert(source)
        out = model(x)
    assert out.logits is None and model.config.pooling == "mean" and model.attn_pool is None
    torch.testing.assert_close(out.last_hidden_state, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pooled, expected.mean(dim=1), atol=ATOL, rtol=0)


def test_pooler_weights_match_a_recomputation_from_transformers_pooler_inputs(monkeypatch):
    """Forward hooks capture what transformers' pooler attention modules receive; softmax(q k^T / sqrt(d)) with their
    own q_proj and k_proj is what vitviz returns. The readout is rollout's rule carried back through those weights."""
    source = hf_model()
    inputs = hook_pooler(source.pooler)
    x = clips()
    with torch.no_grad():
        expected_logits = source(pixel_values_videos=x).logits
        model = convert(source)
        out = model(x, output_attentions=True)
        expected, cross = pooler_reference(source.pooler, inputs)
    torch.testing.assert_close(out.logits, expected_logits, atol=ATOL, rtol=0)
    assert len(out.pooler_attentions) == 2
    for ours, theirs in zip(out.pooler_attentions, expected, strict=True):
        assert ours.shape == (2, 4, 32, 32)
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.pool_attention, cross, atol=ATOL, rtol=0)
    row = dense_readout(cross, expected)
    torch.testing.assert_close(out.readout, row, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.readout.sum(dim=-1), torch.ones(2))
    # without weights the readout is carried back a few query rows at a time: 3 rows here, so 11 chunks of 32
    monkeypatch.setattr(attentive_pooler, "CHUNK_ELEMENTS", 2 * 4 * 32 * 3)
    with torch.no_grad():
        fused = model(x)
    assert fused.pooler_attentions is None
    torch.testing.assert_close(fused.readout, row, atol=ATOL, rtol=0)
    torch.testing.assert_close(fused.pool_attention, cross, atol=ATOL, rtol=0)


def test_queries_keys_and_values_of_a_block_and_of_the_pooler_query_are_transformers():
    """What a bounded-memory map computes its weights from: a block's rotated queries, keys and values for its normed
    input (``Attention.queries_keys_values``, and ``output_qkv``), the pooler query's and keys
    (``PoolerCrossAttention.queries_keys``), against transformers' own projections and ``apply_rotary_embeddings``
    on the inputs its modules receive (forward pre-hooks)."""
    source = hf_model()
    inputs = {}

    def keep(name):
        return lambda module, args, kwargs: inputs.__setitem__(name, (args, kwargs))

    for index, layer in enumerate(source.vjepa2.encoder.layer):
        layer.attention.register_forward_pre_hook(keep(index), with_kwargs=True)
    source.pooler.cross_attention_layer.register_forward_pre_hook(keep("cross"), with_kwargs=True)
    model = convert(source)
    x = clips()
    with torch.no_grad():
        source(pixel_values_videos=x)
        out = model(x, output_qkv=True)
        controls = model.block_arguments(out.grid_size, x.shape[0])
        for index, block in enumerate(model.blocks):
            args, kwargs = inputs[index]
            hidden = args[0] if args else kwargs["hidden_states"]  # norm1(x), transformers'
            attention = source.vjepa2.encoder.layer[index].attention
            heads = attention.num_attention_heads
            q, k, v = (
                part(hidden).unflatten(-1, (heads, -1)).transpose(1, 2)
                for part in (attention.query, attention.key, attention.value)
            )
            positions = attention.get_position_ids(hidden)
            expected = (
                attention.apply_rotary_embeddings(q, positions),
                attention.apply_rotary_embeddings(k, positions),
                v,
            )
            ours = block.attn.queries_keys_values(hidden, controls[index].rope)
            for mine, returned, theirs in zip(ours, out.qkv[index], expected, strict=True):
                assert mine.shape == theirs.shape == (2, 4, 32, 16)
                torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)
                torch.testing.assert_close(returned, theirs, atol=ATOL, rtol=0)
        (queries, tokens), _ = inputs["cross"]  # the learned query (B, 1, D), the last pooler block's output
        cross = source.pooler.cross_attention_layer
        heads = cross.cross_attn.num_heads
        expected_q = cross.cross_attn.q_proj(queries).unflatten(-1, (heads, -1)).transpose(1, 2)
        expected_k = cross.cross_attn.k_proj(cross.layer_norm1(tokens)).unflatten(-1, (heads, -1)).transpose(1, 2)
        q, k = model.attn_pool.cross.queries_keys(model.attn_pool.query, tokens)
    torch.testing.assert_close(q.expand(2, -1, -1, -1), expected_q, atol=ATOL, rtol=0)
    torch.testing.assert_close(k, expected_k, atol=ATOL, rtol=0)


def test_a_masked_token_leaves_the_pooler_as_if_it_were_not_there(monkeypatch):
    """A key mask (and a knock-out) takes its tokens out of the attentive pooler too: the pooler's weights, the
    logits and the readout equal transformers' pooler run densely on the encoder's output without those tokens."""
    source = hf_model()
    model = convert(source)
    x = clips()
    mask = torch.ones(2, 32, dtype=torch.bool)
    mask[0, 5] = False
    mask[1, [0, 20, 21]] = False
    with torch.no_grad():
        out = model(x, key_mask=mask, output_attentions=True)
        plain = model(x)
        knocked = model.knock_out(tokens=[5])(x[:1], output_attentions=True)
        monkeypatch.setattr(attentive_pooler, "CHUNK_ELEMENTS", 4 * 32 * 3)  # the readout 3 query rows at a time
        fused = model(x, key_mask=mask)
    for b in range(2):
        keep = mask[b]
        inputs = hook_pooler(source.pooler)
        with torch.no_grad():
            tokens = out.last_hidden_state[b : b + 1, keep]  # the (masked) encoder's normed output, tokens removed
            expected_logits = source.classifier(source.pooler(tokens))[0]
            blocks, cross = pooler_reference(source.pooler, inputs)
        torch.testing.assert_close(out.logits[b], expected_logits, atol=ATOL, rtol=0)
        torch.testing.assert_close(fused.logits[b], expected_logits, atol=ATOL, rtol=0)
        for ours, theirs in zip(out.pooler_attentions, blocks, strict=True):
            torch.testing.assert_close(ours[b][:, keep][:, :, keep], theirs[0], atol=ATOL, rtol=0)
            torch.testing.assert_close(ours[b][:, :, ~keep], torch.zeros(4, 32, int((~keep).sum())), atol=1e-7, rtol=0)
        for pool_attention in (out.pool_attention, fused.pool_attention):
            torch.testing.assert_close(pool_attention[b][:, keep], cross[0], atol=ATOL, rtol=0)
            assert (pool_attention[b][:, ~keep] == 0).all()
        expected_readout = torch.zeros(32)
        expected_readout[keep] = dense_readout(cross, blocks)[0]
        torch.testing.assert_close(out.readout[b], expected_readout, atol=ATOL, rtol=0)
        torch.testing.assert_close(fused.readout[b], expected_readout, atol=ATOL, rtol=0)
    assert (out.logits - plain.logits).abs().amax() > 1e-3  # the mask changed what the classifier read
    torch.testing.assert_close(knocked.logits[0], out.logits[0], atol=ATOL, rtol=0)  # knock_out: the same mask
    torch.testing.assert_close(knocked.pool_attention[0], out.pool_attention[0], atol=ATOL, rtol=0)


def test_the_returned_pooler_weights_are_those_the_logits_are_computed_from():
    """Relevance (Chefer et al.) needs the logit's gradient with respect to each weight tensor: the returned ones are
    the tensors the values are read with, not copies or views made after, so the gradients exist and are not 0."""
    model = convert(hf_model())
    out = model(clips(), output_attentions=True)
    weights = (*out.attentions, *out.pooler_attentions, out.pool_attention)
    gradients = torch.autograd.grad(out.logits[:, 1].sum(), weights)
    assert all(g.shape == w.shape and g.abs().amax() > 0 for g, w in zip(gradients, weights, strict=True))


@pytest.mark.parametrize("head_dim", [16, 24, 64])  # 64: ViT-L's, three parts of 20 and 4 channels unrotated
def test_rotary_embedding_turns_queries_as_transformers_does(head_dim):
    config = hf.VJEPA2Config(crop_size=32, patch_size=8, hidden_size=2 * head_dim, num_attention_heads=2)
    attention = modeling_vjepa2.VJEPA2RopeAttention(config, config.hidden_size, 2)
    torch.manual_seed(3)
    q = torch.randn(2, 2, 3 * 16, head_dim)  # 3 tubelets along time of 4 x 4 patches
    expected = attention.apply_rotary_embeddings(q, attention.get_position_ids(q[:, 0]))
    rope = rotary_embedding("vjepa2", (3, 4, 4), head_dim, 10000.0)
    torch.testing.assert_close(rotate(q, rope, 0), expected, atol=1e-5, rtol=0)
    turned = 3 * 2 * (head_dim // 3 // 2)  # 12, 24 and 60 channels: the rest are left as they are
    assert torch.equal(rotate(q, rope, 0)[..., turned:], q[..., turned:])


@pytest.mark.parametrize("frames", [1, 2, 8])
def test_clips_of_other_lengths_match_transformers_and_an_image_is_repeated_into_one_tubelet(frames):
    """Rotary positions along time need no table: 8 frames (twice the config's 4) read as transformers reads them;
    one frame (an image, as the video processor gives it) is repeated to fill a tubelet, as transformers does."""
    source = hf_model()
    x = clips(1, frames)
    with torch.no_grad():
        expected = source(pixel_values_videos=x).logits
        out = convert(source)(x)
    torch.testing.assert_close(out.logits, expected, atol=ATOL, rtol=0)
    tubelets = max(1, frames // 2)
    assert out.grid_size == (tubelets, 4, 4) and out.layout.num_frames == frames  # the input's frames, not the repeat
    assert out.layout.frames[:, 1].max() == frames - 1 and out.layouts[0].num_frames == frames
    if frames == 1:  # the repeated tubelet covers the one frame the input has
        assert out.layout.frames.tolist() == [[0, 0]] * 16 and out.layout.paint(torch.ones(16).numpy()).shape == (
            32,
            32,
        )
        with pytest.raises(ValueError, match="frame must be from 0 to 0"):
            out.layout.paint(torch.ones(16).numpy(), frame=1)


def test_another_input_size_or_an_odd_frame_count_is_refused_with_one_line():
    model = convert(hf_model())
    with pytest.raises(ValueError, match=r"rotary positions are for frames of 32x32 pixels \(its crop_size\)") as error:
        model(clips(1, 4, side=48))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="tubelets of 2: give it a multiple of 2 frames") as error:
        model(clips(1, 3))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"clips of shape \(B, frames, 3, H, W\)"):
        model(torch.randn(1, 3, 32, 32))


def test_layout_is_one_token_per_tubelet_and_the_readout_covers_every_token():
    model = convert(hf_model())
    out = model(clips(1))
    layout = out.layout
    assert out.grid_size == layout.grid == (2, 4, 4) and len(layout) == 32 and out.num_prefix_tokens == 0
    assert layout.frames[17].tolist() == [2, 3] and layout.boxes[17].tolist() == [8, 0, 16, 8]
    assert out.readout.shape == (1, 32) and out.pool_attention.shape == (1, 4, 32)
    assert model.config.num_parameters == sum(p.numel() for p in model.parameters())


def test_save_pretrained_folder_and_hub_id_load_to_the_same_logits(tmp_path, offline):
    source = hf_model()
    source.config.id2label = {i: f"action {i}" for i in range(5)}
    source.save_pretrained(tmp_path / "folder")
    source.save_pretrained(cached_snapshot(offline, "someone/tiny-vjepa2"))
    x = clips()
    with torch.no_grad():
        expected = source(pixel_values_videos=x).logits
        for spec in [str(tmp_path / "folder"), "hf:someone/tiny-vjepa2"]:
            model = vitviz.load_model(spec)
            torch.testing.assert_close(model(x).logits, expected, atol=ATOL, rtol=0)
            assert model.class_names[:2] == ["action 0", "action 1"] and model.transform is None


def test_a_config_vitviz_cannot_read_is_refused_with_one_line():
    source = hf_model()
    for overrides, message in [
        (dict(hidden_act="relu"), "hidden_act 'relu' is not supported"),
        (dict(frames_per_clip=3), "num_frames 3 is not a multiple of tubelet_size 2"),
        (dict(mlp_ratio="4"), "mlp_ratio must be a finite real number; got '4'"),  # not "4" * 64 read as an int
        (dict(mlp_ratio=True), "mlp_ratio must be a finite real number; got True"),
        (dict(mlp_ratio=float("inf")), "mlp_ratio must be a finite real number; got inf"),
        (dict(hidden_size="64"), "hidden_size must be a finite real number; got '64'"),
        (dict(patch_size=[8, 16]), r"patch_size must be square \(vitviz's patches are\); got \[8, 16\]"),
    ]:
        with pytest.raises(ModelLoadError, match=message) as error:
            from_huggingface(source.state_dict(), source.config.to_dict() | overrides)
        assert "\n" not in str(error.value)


def test_defaults_match_transformers_config_class():
    config = hf.VJEPA2Config()
    for key, value in DEFAULTS.items():
        assert getattr(config, key) == value, key


def test_the_logit_lens_reads_each_token_through_the_pooler_alone():
    """token_logits runs V-JEPA 2's attentive pooler on one token at a time (its blocks and query see only it), as
    transformers' pooler and classifier do on a one-token sequence; the readout before a pass is image-dependent."""
    from vitviz.analysis import _readout_before_the_pass
    from vitviz.explain import token_logits

    source = hf_model()
    with torch.no_grad():
        normed = source.vjepa2(pixel_values_videos=clips(1), skip_predictor=True).last_hidden_state  # (1, T, D)
        expected = torch.stack([source.classifier(source.pooler(normed[:, j : j + 1]))[0] for j in range(3)])
        model = convert(source)
        last_block = model(clips(1), output_hidden_states=True).hidden_states[-1]  # before the final norm
        ours = token_logits(model, last_block[0, :3])
    torch.testing.assert_close(ours, expected, atol=ATOL, rtol=0)
    assert _readout_before_the_pass(model, (4, 4)) is None
