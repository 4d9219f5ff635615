"""StreamingExplainer: block by block, it gives what keeping every attention matrix gives, and keeps none alive."""

import pytest
import torch
from attention_references import random_attentions
from tiny_models import build_tiny_vit

from vitviz import autocast, explain
from vitviz.explain import (
    StreamingExplainer,
    attention_entropy,
    attention_rollout,
    cls_attention,
    gradient_weighted_attention,
    gradient_weighted_rollout,
    mean_attention_distance,
)


def keep_everything(attentions, grid, prefix, fusion="mean", discard=0.0, start_layer=0, readout="cls"):
    """What StreamingExplainer must give, from the kept attentions upcast to fp32."""
    attentions = [a.float() if a.dtype != torch.float64 else a for a in attentions]
    options = dict(start_layer=start_layer, head_fusion=fusion, discard_ratio=discard)
    return {
        "rollout": attention_rollout(attentions, prefix, grid, readout=readout, **options),
        "readout_attention": explain.readout_attention_all(attentions, prefix, grid, readout=readout),
        "prefix_shares": explain.attention_to_prefix_tokens(attentions, prefix),
        "entropy": attention_entropy(attentions),
        "distance_px": mean_attention_distance(attentions, grid, 8, prefix),
        "distance_patches": mean_attention_distance(attentions, grid, 8, prefix) / 8,
    }


def assert_same_results(streamed, expected, dtype=torch.float32):
    assert streamed.keys() == expected.keys()
    for name, tensor in expected.items():
        assert streamed[name].dtype == dtype, name
        torch.testing.assert_close(streamed[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
        if dtype != torch.float64:
            streamed[name].numpy()  # no bf16 left for numpy to refuse


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "readout,registers,fusion,discard,start_layer",
    [("cls", 0, "mean", 0.0, 0), ("cls", 4, "max", 0.3, 0), ("mean", 2, "mean", 0.3, 1), ("readout", 2, "min", 0.0, 0)],
)
def test_streaming_equals_keeping_everything(precision, readout, registers, fusion, discard, start_layer):
    # under bf16 the running rollout used to stay bf16 (autocast ran its products in bf16): 3e-3 off, and no .numpy()
    family = "map-pooled" if readout == "readout" else "non-square"
    model = build_tiny_vit(family, image_size=(16, 24), num_register_tokens=registers)
    prefix = model.config.num_prefix_tokens
    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad(), autocast(precision):
        output = model(images, output_attentions=True)
        readout = output.readout if readout == "readout" else readout  # "map": the weights depend on the image
        streamer = StreamingExplainer(model.config.grid_size, 8, prefix, fusion, discard, start_layer, readout)
        streamed_output = model(images, attention_sink=streamer)
    assert streamed_output.attentions is None
    grid = output.grid_size
    assert_same_results(
        streamer.results(), keep_everything(output.attentions, grid, prefix, fusion, discard, start_layer, readout)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_streaming_upcasts_half_precision_weights(dtype):
    # weights that arrive in half precision are folded in fp32; a float64 model keeps fp64
    attentions = [a.to(dtype) for a in random_attentions(prefix=3)]
    readout = torch.rand(2, 9).softmax(-1).to(dtype)
    streamer = StreamingExplainer((2, 3), 8, 3, discard_ratio=0.2, readout=readout)
    for index, attention in enumerate(attentions):
        streamer(index, attention)
    result_dtype = torch.promote_types(dtype, torch.float32)
    expected = keep_everything(attentions, (2, 3), 3, discard=0.2, readout=readout)
    assert_same_results(streamer.results(), expected, result_dtype)


def test_streaming_a_second_pass_replaces_the_first():
    # the second image's blocks used to be appended to the first's: 6 layers of rows on a 3-block model
    model = build_tiny_vit("non-square", num_register_tokens=2)
    first, second = torch.randn(2, 3, 16, 24), torch.randn(2, 3, 16, 24)
    reused = StreamingExplainer(model.config.grid_size, 8, 3, start_layer=1)
    fresh = StreamingExplainer(model.config.grid_size, 8, 3, start_layer=1)
    with torch.no_grad():
        model(first, attention_sink=reused)
        first_results = reused.results()
        model(second, attention_sink=reused)
        model(second, attention_sink=fresh)
    results, expected = reused.results(), fresh.results()
    assert results.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(results[name], tensor, rtol=0, atol=0, msg=name)
    assert results["readout_attention"].shape == (2, 3, 4, 2, 3)
    assert not torch.allclose(results["rollout"], first_results["rollout"])


def test_streaming_refuses_a_skipped_block():
    attentions = random_attentions()
    streamer = StreamingExplainer((2, 3), 8, 1)
    with pytest.raises(ValueError, match="expected block 0; got block 1"):
        streamer(1, attentions[0])
    streamer(0, attentions[0])
    streamer(1, attentions[1])
    with pytest.raises(ValueError, match="expected block 2, or 0 to start a new pass; got block 3"):
        streamer(3, attentions[2])
    model = build_tiny_vit("non-square")
    skipping = StreamingExplainer(model.config.grid_size, 8, 1)
    with torch.no_grad(), pytest.raises(ValueError, match="expected block 1, or 0 to start a new pass; got block 2"):
        model(torch.randn(1, 3, 16, 24), attention_sink=lambda index, weights: index != 1 and skipping(index, weights))


def test_streaming_readout_weights_are_validated():
    with pytest.raises(ValueError, match=r"\(B, T\) token weights"):
        StreamingExplainer((2, 3), 8, 1, readout=torch.ones(7))
    streamer = StreamingExplainer((2, 3), 8, 1, readout=torch.ones(1, 7) / 7)
    with pytest.raises(ValueError, match=r"readout weights \(1, 7\) do not match \(B, T\) = \(2, 7\)"):
        streamer(0, random_attentions()[0])


def test_streaming_reports_progress_after_each_block():
    model = build_tiny_vit("non-square")
    seen = []
    streamer = StreamingExplainer(
        model.config.grid_size,
        8,
        1,
        progress=lambda index: seen.append((index, streamer.results()["entropy"].shape[1])),
    )
    with torch.no_grad():
        model(torch.randn(1, 3, 16, 24), attention_sink=streamer)
        model(torch.randn(1, 3, 16, 24), attention_sink=streamer)
    assert seen == [(0, 1), (1, 2), (2, 3)] * 2  # each block once, in order, and already folded in


def test_streaming_keeps_no_full_attention_matrix_alive():
    images = torch.randn(2, 3, 16, 24)
    map_pooled = build_tiny_vit("map-pooled", image_size=(16, 24))
    with torch.no_grad():
        readout = map_pooled(images).readout
    for model, rows in [(build_tiny_vit("non-square"), "cls"), (map_pooled, "mean"), (map_pooled, readout)]:
        streamer = StreamingExplainer(model.config.grid_size, 8, model.config.num_prefix_tokens, readout=rows)
        with torch.no_grad():
            model(images, attention_sink=streamer)
        # every kept tensor owns only its own numbers, not a slice of a (B, heads, T, T) block
        for name, tensor in streamer.results().items():
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), name
        for rows in streamer._readout_rows:
            assert rows.untyped_storage().nbytes() == rows.numel() * rows.element_size()


def test_mean_pooled_models_read_the_mean_patch_row():
    attentions = random_attentions(prefix=2)
    gradients = [torch.rand_like(a) for a in attentions]
    cls_row = gradient_weighted_attention(attentions, gradients, num_prefix_tokens=2)
    mean_row = gradient_weighted_attention(attentions, gradients, num_prefix_tokens=2, readout="mean")
    relevance = torch.eye(8).repeat(2, 1, 1)
    for a, g in zip(attentions, gradients):
        relevance = relevance + (g * a).clamp(min=0).mean(1) @ relevance
    torch.testing.assert_close(mean_row, relevance[:, 2:, 2:].mean(1))
    assert not torch.allclose(cls_row, mean_row)
    no_cls = random_attentions(prefix=0)
    with pytest.raises(ValueError, match="no \\[CLS\\] token"):
        cls_attention(no_cls, layer=0, num_prefix_tokens=0)
    with pytest.raises(ValueError, match="needs a \\[CLS\\] token"):
        gradient_weighted_rollout(no_cls, [torch.rand_like(a) for a in no_cls], num_prefix_tokens=0)
    out = gradient_weighted_rollout(no_cls, [torch.rand_like(a) for a in no_cls], num_prefix_tokens=0, readout="mean")
    assert out.shape == (2, 6)
