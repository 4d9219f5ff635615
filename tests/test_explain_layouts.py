"""Every map function takes the token layout (``output.layout``) where it takes (num_prefix_tokens, grid_size):
for a plain ViT, a ViT with registers, a non-square grid and a video ViT (tubelets listed frame by frame) the layout
call is the pair call, the same computation (compared exactly); a TimeSformer-ordered layout (patch-major tokens)
gives the layout's grid view of the per-token values; a layout whose tokens are not one global grid is refused in
one line that names what to use instead."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from vitviz import ViT, ViTConfig
from vitviz.explain import (
    MapInputs,
    StreamingExplainer,
    attention_gradients,
    attention_rollout,
    attention_to_prefix_tokens,
    cls_attention,
    cls_attention_all,
    discard_weakest,
    get_method,
    grad_cam,
    gradient_weighted_attention,
    gradient_weighted_rollout,
    high_norm_patches,
    legrad,
    legrad_gradients,
    logit_lens,
    method_maps,
    norm1_gradients,
    pooling_attention,
    query_attention,
    readout_attention_all,
    token_norms,
    transition_attention_map,
)
from vitviz.explain.common import token_grid
from vitviz.layout import grid_layout, window_layout
from vitviz.model.divided import DividedAttention

SIZES = dict(patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64, num_classes=5)
IMAGES = {  # name: the config's own fields
    "cls 2x3": dict(image_size=(16, 24)),
    "registers 3x2": dict(image_size=(24, 16), num_register_tokens=2),
    "mean 2x4 no cls": dict(image_size=(16, 32), class_token=False, pooling="mean"),
    "map 3x3": dict(image_size=24, class_token=False, pooling="map"),
}
VIDEOS = {  # a clip's (frames, rows, cols) maps
    "videomae 2x2x3": dict(image_size=(16, 24), num_frames=4, tubelet_size=2, class_token=False, pooling="mean"),
    "cls tubelets 2x2x2": dict(image_size=16, num_frames=4, tubelet_size=2),
}
CONFIGS = IMAGES | VIDEOS


def tiny(**fields) -> ViT:
    """A 3-block ViT, random weights of std 0.3 (maps far from uniform), float64."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(**(SIZES | fields))).eval().double()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    return model


def inputs_for(model: ViT, batch: int = 2) -> torch.Tensor:
    height, width = model.config.image_hw
    frames = (model.config.num_frames,) if model.config.is_video else ()
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch, *frames, 3, height, width, generator=generator, dtype=torch.float64)


def same(first: torch.Tensor, second: torch.Tensor) -> None:
    """The same computation, so the same numbers: exact equality, shapes included."""
    assert first.shape == second.shape and torch.equal(first, second)


def readouts(output) -> list:
    choices = ["mean", output.readout.detach()]
    return (["cls"] if output.layout.kinds[0] == "cls" else []) + choices


@pytest.mark.parametrize("name", list(CONFIGS))
def test_attention_maps_from_the_layout_are_the_pair_maps(name):
    model = tiny(**CONFIGS[name])
    with torch.no_grad():
        out = model(inputs_for(model), output_attentions=True)
    layout, pair = out.layout, (out.num_prefix_tokens, out.grid_size)
    attentions = out.attentions
    assert token_grid(layout).shape == tuple(out.grid_size)  # images (rows, cols), clips (frames, rows, cols)
    for readout in readouts(out):
        for options in (dict(), dict(start_layer=1, head_fusion="max", discard_ratio=0.3)):
            by_layout = attention_rollout(attentions, layout, readout=readout, **options)
            same(by_layout, attention_rollout(attentions, *pair, readout=readout, **options))
            assert by_layout.shape == (2, *out.grid_size)
            per_patch = attention_rollout(attentions, out.num_prefix_tokens, readout=readout, **options)  # (B, N)
            same(by_layout, grid_view(layout, per_patch).reshape(by_layout.shape))  # the layout's own grid view
        same(
            readout_attention_all(attentions, layout, readout=readout),
            readout_attention_all(attentions, *pair, readout=readout),
        )
    query = (0,) * len(out.grid_size)  # the first patch: (row, col) or (frame, row, col)
    for token in (query, len(out.layout) - 1, (*(n - 1 for n in out.grid_size),)):
        same(
            query_attention(attentions, layout, layer=1, query=token),
            query_attention(attentions, *pair, layer=1, query=token),
        )
    same(
        query_attention(attentions, layout, layer=-1, query=query, head=2),
        query_attention(attentions, *pair, layer=-1, query=query, head=2),
    )
    if layout.kinds[0] == "cls":
        same(
            cls_attention(attentions, layout, layer=2, head="min"),
            cls_attention(attentions, *pair, layer=2, head="min"),
        )
        same(cls_attention_all(attentions, layout), cls_attention_all(attentions, *pair))
    else:
        for function in (cls_attention, cls_attention_all):
            with pytest.raises(ValueError, match="no \\[CLS\\] token"):
                function(attentions, layout, **({"layer": 0} if function is cls_attention else {}))
    fused = attentions[0].mean(dim=1)
    same(discard_weakest(fused, 0.4, layout), discard_weakest(fused, 0.4, out.num_prefix_tokens))
    same(attention_to_prefix_tokens(attentions, layout), attention_to_prefix_tokens(attentions, out.num_prefix_tokens))
    norms = token_norms(out.attentions)  # any (B, layers, T) values
    same(high_norm_patches(norms, layout), high_norm_patches(norms, out.num_prefix_tokens))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_class_specific_maps_from_the_layout_are_the_pair_maps(name):
    model = tiny(**CONFIGS[name])
    x = inputs_for(model)
    out, gradients = attention_gradients(model, x, target=[1, 3])
    attentions = tuple(a.detach() for a in out.attentions)
    layout, pair = out.layout, (out.num_prefix_tokens, out.grid_size)
    for readout in readouts(out):
        for function in (gradient_weighted_attention, gradient_weighted_rollout):
            by_layout = function(attentions, gradients, layout, readout=readout, start_layer=1)
            same(by_layout, function(attentions, gradients, *pair, readout=readout, start_layer=1))
        integrated = gradients[-1]  # any (B, heads, T, T) weights of the last block's shape
        same(
            transition_attention_map(attentions, integrated, layout, readout=readout, start_layer=1),
            transition_attention_map(attentions, integrated, *pair, readout=readout, start_layer=1),
        )
    _, legrads = legrad_gradients(model, x, 2)
    same(legrad(legrads, layout, start_layer=1), legrad(legrads, *pair, start_layer=1))
    lens = logit_lens(model, model(x, output_hidden_states=True).hidden_states, 2, layout)
    expected = logit_lens(model, model(x, output_hidden_states=True).hidden_states, 2, *pair)
    for field in ("probability", "votes", "readout_probability"):
        same(getattr(lens, field), getattr(expected, field))
    assert lens.probability.shape == (3, 2, *out.grid_size)


@pytest.mark.parametrize("name", list(IMAGES))
def test_grad_cam_pooling_streaming_and_the_registry_read_the_layout(name):
    model = tiny(**IMAGES[name])
    x = inputs_for(model)
    output, activations, gradients = norm1_gradients(model, x, 1)
    pair = (output.num_prefix_tokens, output.grid_size)
    same(grad_cam(activations, gradients, output.layout), grad_cam(activations, gradients, *pair))
    with torch.no_grad():
        out = model(x, output_attentions=True)
    if out.pool_attention is not None:
        same(
            pooling_attention(out.pool_attention, "max", out.layout),
            pooling_attention(out.pool_attention, "max", out.grid_size),
        )
    results = []
    for explainer in (
        StreamingExplainer(out.layout, readout="mean", discard_ratio=0.2),
        StreamingExplainer(out.grid_size, 8, out.num_prefix_tokens, readout="mean", discard_ratio=0.2),
    ):
        with torch.no_grad():
            model(x, attention_sink=explainer)
        results.append(explainer.results())
    assert results[0].keys() == results[1].keys()
    for key in results[0]:
        same(results[0][key], results[1][key])
    one = x[:1]
    names = ["rollout", "relevance", "grad-rollout", "lens"] + (["cls"] if out.layout.kinds[0] == "cls" else [])
    maps = method_maps(model, one, names, start_layer=1).maps
    out = model(one, output_attentions=True, output_hidden_states=True)
    common = dict(
        model=model,
        pixels=one,
        target=0,
        readout=out.readout.detach().float(),
        num_prefix_tokens=out.num_prefix_tokens,
        grid_size=out.grid_size,
        attentions=tuple(a.detach().float() for a in out.attentions),
        attention_gradients=tuple(g.float() for g in torch.autograd.grad(out.logits[0, 0], out.attentions)),
        hidden_states=tuple(h.detach() for h in out.hidden_states),
    )
    with_layout, without = MapInputs(**common, token_layout=out.layout), MapInputs(**common)
    assert with_layout.layout == {"num_prefix_tokens": out.layout} and without.layout["grid_size"] == out.grid_size
    for method in names:
        same(get_method(method).compute(with_layout).map, get_method(method).compute(without).map)
        assert maps[method].shape == out.grid_size


def patch_major(prefix: tuple[str, ...] = ("cls",), frames: int = 3, grid: tuple[int, int] = (2, 3)):
    """TimeSformer's order: token (t, r, c) is prefix + (r cols + c) frames + t."""
    return grid_layout(prefix, grid, 8, num_frames=frames, patch_major=True)


def random_attentions(tokens: int, blocks: int = 3, batch: int = 2, heads: int = 2) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(3)
    return tuple(
        torch.randn(batch, heads, tokens, tokens, generator=generator, dtype=torch.float64).softmax(-1)
        for _ in range(blocks)
    )


def grid_view(layout, values: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(layout.grid_view(values.numpy()))


def test_patch_major_tokens_come_back_frame_by_frame_through_the_layouts_grid_view():
    layout = patch_major()
    p, attentions = layout.num_prefix_tokens, random_attentions(len(layout))
    assert layout.grid == (3, 2, 3) and layout.grid_order is not None
    for readout in ("cls", "mean"):
        by_layout = attention_rollout(attentions, layout, readout=readout, discard_ratio=0.2)
        assert by_layout.shape == (2, 3, 2, 3)
        same(by_layout, grid_view(layout, attention_rollout(attentions, p, None, readout=readout, discard_ratio=0.2)))
        same(
            readout_attention_all(attentions, layout, readout=readout),
            grid_view(layout, readout_attention_all(attentions, p, readout=readout)),
        )
    gradients = random_attentions(len(layout))
    same(
        gradient_weighted_attention(attentions, gradients, layout),
        grid_view(layout, gradient_weighted_attention(attentions, gradients, p)),
    )
    same(legrad(gradients, layout), grid_view(layout, legrad(gradients, p)))
    same(
        transition_attention_map(attentions, gradients[-1], layout),
        grid_view(layout, transition_attention_map(attentions, gradients[-1], p)),
    )
    same(cls_attention_all(attentions, layout), grid_view(layout, cls_attention_all(attentions, p)))
    activations = torch.randn(2, len(layout), 4, dtype=torch.float64)
    same(
        grad_cam(activations, activations.flip(0), layout),
        grid_view(layout, grad_cam(activations, activations.flip(0), p)),
    )
    # a clicked (frame, row, col) is the token TimeSformer lists there; its row, as any token's, comes back in order
    frame, row, col = 2, 1, 0
    token = p + (row * 3 + col) * 3 + frame
    by_position = query_attention(attentions, layout, layer=1, query=(frame, row, col))
    same(by_position, query_attention(attentions, layout, layer=1, query=token))
    same(by_position, grid_view(layout, attentions[1].mean(dim=1)[:, token]))
    # the map cell of each token holds that token's value: plant one and find it where the layout puts it
    planted = torch.zeros(1, 1, len(layout), len(layout), dtype=torch.float64)
    planted[..., 0, token] = 1.0
    shown = query_attention([planted], layout, layer=0, query=0)
    assert shown[0, frame, row, col] == 1 and shown.sum() == 1


def test_layouts_that_are_not_one_global_grid_are_refused_in_one_line():
    grid = (2, 2)
    windowed = window_layout(grid, 8, np.array([[0, 1, 2, 3]]), (16, 16))
    attentions = random_attentions(len(windowed))
    for call in (
        lambda: attention_rollout(attentions, windowed),
        lambda: gradient_weighted_attention(attentions, attentions, windowed),
        lambda: legrad(attentions, windowed),
        lambda: query_attention(attentions, windowed, layer=0, query=0),
        lambda: StreamingExplainer(windowed),
    ):
        with pytest.raises(ValueError, match="windows.*vitviz.explain.stages") as error:
            call()
        assert "\n" not in str(error.value)
    plain = grid_layout(("cls",), grid, 8)
    no_grid = replace(plain, grid=None)
    with pytest.raises(ValueError, match="form none.*paint") as error:
        attention_rollout(random_attentions(len(plain)), no_grid)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="not both"):
        attention_rollout(random_attentions(len(plain)), plain, grid)
    with pytest.raises(ValueError, match="grid 2x2 has 4 patches, but T - num_prefix_tokens = 6"):
        attention_rollout(random_attentions(7), plain)
    divided = [DividedAttention(torch.ones(3, 1, 5, 5), torch.ones(4, 1, 3, 3))]
    with pytest.raises(ValueError, match="divided space-time.*vitviz.explain.spacetime") as error:
        attention_rollout(divided, patch_major(frames=3, grid=(2, 2)))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="token layout \\(output.layout\\) or a prefix count"):
        attention_rollout(random_attentions(5), "cls")
