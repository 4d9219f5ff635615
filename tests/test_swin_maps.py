"""The maps on real Swin and Swin v2 models (tests/tiny_swins.py: three stages, two merges, shifted blocks, inputs
padded in transformers' and in timm's order), against dense implementations written here from the definitions
alone: each block's window attention embedded in a (T_s, T_s) matrix from ``out.layouts[l].windows`` (padded
slots dropped), the rollout's rows renormalised with the identity, merge matrices from box containment (each merged
token the mean of the tokens whose centres it holds), the products formed in full, read out by the mean over the
last stage's tokens. Grad-CAM against pytorch-grad-cam's Swin recipe, on vitviz's model and on timm's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from tiny_models import build_tiny_vit
from tiny_swins import PADDED_SIZE, timm_swin, tiny_swin

import vitviz
from vitviz.explain import (
    METHODS,
    attention_gradients,
    grad_cam,
    method_maps,
    refusals,
    relevance_across_stages,
    rollout_across_stages,
    stage_norm1_gradients,
    window_attention_map,
)

SOURCES = [(source, family) for source in ("huggingface", "timm") for family in ("swin", "swinv2")]
TARGET = 3
# the methods that explain a Swin: those that read its windows, and the model-agnostic ones (pixels and logits only)
BASELINES = {"input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion", "kernel-shap", "rise"}
WINDOWED = {"rollout", "relevance", "grad-rollout", "gradcam", "lens", "attnlrp", "cp-lrp", *BASELINES}


def images(source: str, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, *PADDED_SIZE[source], generator=torch.Generator().manual_seed(seed))


def dense(fused: torch.Tensor, layout) -> torch.Tensor:
    """(nW, S, S) one image's fused window attention -> (T, T): each window's weights at its tokens' places."""
    matrix = torch.zeros(len(layout), len(layout), dtype=torch.float64)
    for window, tokens in enumerate(layout.windows):
        real = np.flatnonzero(tokens >= 0)
        matrix[np.ix_(tokens[real], tokens[real])] = fused[window][np.ix_(real, real)].double()
    return matrix


def merge_matrix(later, earlier) -> torch.Tensor:
    """(T_later, T_earlier): each later token the mean of the earlier tokens whose box centre its box holds."""
    M = torch.zeros(len(later), len(earlier), dtype=torch.float64)
    for i, (x0, y0, x1, y1) in enumerate(earlier.boxes):
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        for j, (a0, b0, a1, b1) in enumerate(later.boxes):
            M[j, i] = float(a0 <= cx < a1 and b0 <= cy < b1)
    assert (M.sum(dim=0) == 1).all()  # every earlier token goes to exactly one later token
    return M / M.sum(dim=1, keepdim=True)


def dense_map(matrices, layouts, step, start: int = 0) -> torch.Tensor:
    """The mean over the last block's tokens of prod_l step(A_l) (merges between, identity before ``start``), over
    the first stage's grid."""
    product = torch.eye(len(layouts[0]), dtype=torch.float64)
    for index, (matrix, layout) in enumerate(zip(matrices, layouts, strict=True)):
        if index and len(layout) != len(layouts[index - 1]):
            product = merge_matrix(layout, layouts[index - 1]) @ product
        if index >= start:
            product = step(matrix) @ product
    return product.mean(dim=0).reshape(layouts[0].grid[1:])


def rollout_step(matrix: torch.Tensor) -> torch.Tensor:
    with_residual = matrix + torch.eye(len(matrix), dtype=torch.float64)
    return with_residual / with_residual.sum(dim=1, keepdim=True)


def relevance_step(matrix: torch.Tensor) -> torch.Tensor:
    return matrix + torch.eye(len(matrix), dtype=torch.float64)


def assert_close(got: torch.Tensor, expected: torch.Tensor) -> None:
    """fp32 maps against float64 products: 1e-5 of the map's largest value."""
    assert got.shape == expected.shape
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


@pytest.mark.parametrize("source, family", SOURCES)
def test_the_model_pads_shifts_and_merges(source, family):
    """What the maps below run through: padded slots, shifted blocks and two merges."""
    model = tiny_swin(source, family)
    with torch.no_grad():
        out = model(images(source), output_attentions=True)
    assert len(out.stage_grids) == 3 and len(out.layouts) == 6
    assert any((layout.windows < 0).any() for layout in out.layouts)
    assert any(model.block_shift(stage, 1, grid) != (0, 0) for stage, grid in enumerate(out.stage_grids))


@pytest.mark.parametrize("source, family", SOURCES)
def test_rollout_equals_the_dense_product(source, family):
    model = tiny_swin(source, family)
    with torch.no_grad():
        out = model(images(source), output_attentions=True)
    expected = dense_map(
        [dense(a.mean(1), lay) for a, lay in zip(out.attentions, out.layouts)], out.layouts, rollout_step
    )
    got = rollout_across_stages(out.attentions, out.layouts)[0]
    assert got.shape == out.stage_grids[0]
    assert_close(got, expected)
    assert abs(float(got.sum()) - 1) < 1e-5  # rows renormalised over real tokens: nothing lost to the padding
    assert_close(method_maps(model, images(source), ["rollout"]).maps["rollout"], expected)
    # from the third block: the first two count as the identity
    later = dense_map(
        [dense(a.mean(1), lay) for a, lay in zip(out.attentions, out.layouts)], out.layouts, rollout_step, start=2
    )
    assert_close(method_maps(model, images(source), ["rollout"], start_layer=2).maps["rollout"], later)


@pytest.mark.parametrize("source, family", SOURCES)
def test_relevance_equals_the_dense_product(source, family):
    model = tiny_swin(source, family)
    out, gradients = attention_gradients(model, images(source), TARGET)
    # every block's attention is in the autograd graph: autograd.grad would raise for one that is not, and none is 0
    assert len(gradients) == 6 and all(g.abs().max() > 0 for g in gradients)
    weighted = [
        dense((g * a).clamp(min=0).mean(1).detach(), lay) for a, g, lay in zip(out.attentions, gradients, out.layouts)
    ]
    expected = dense_map(weighted, out.layouts, relevance_step)
    attentions = [a.detach() for a in out.attentions]
    assert_close(relevance_across_stages(attentions, gradients, out.layouts)[0], expected)
    result = method_maps(model, images(source), ["relevance", "grad-rollout"], target=TARGET)
    assert_close(result.maps["relevance"], expected)
    assert_close(result.maps["grad-rollout"], dense_map(weighted, out.layouts, rollout_step))


def test_only_the_methods_that_read_windows_run_and_the_others_say_why():
    model = tiny_swin("huggingface", "swin")
    assert set(refusals(model, list(METHODS))) == set(METHODS) - WINDOWED
    for name, reason in refusals(model, list(METHODS)).items():
        assert reason.startswith(f"'{name}' ") and "\n" not in reason and "Swin" in reason
        with pytest.raises(ValueError, match=f"'{name}'"):
            method_maps(model, images("huggingface"), ["rollout", name])
    with pytest.raises(ValueError, match="discard_ratio.*windows"):
        method_maps(model, images("huggingface"), ["rollout"], discard_ratio=0.5)
    maps = method_maps(model, images("huggingface"), sorted(WINDOWED), samples=16).maps
    assert {tuple(m.shape) for m in maps.values()} == {(17, 13)}  # every map over the first stage's grid
    assert refusals(build_tiny_vit(), list(METHODS)) == {}  # a plain ViT: every method


class LogitsOnly(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        return out.logits if hasattr(out, "logits") else out


def channels_first(tokens: torch.Tensor) -> torch.Tensor:
    """pytorch-grad-cam's reshape_transform for Swin's norm1 output (B, H, W, C) -> (B, C, H, W)."""
    return tokens.permute(0, 3, 1, 2)


def package_grad_cam(model: torch.nn.Module, layer: torch.nn.Module, x: torch.Tensor, target: int) -> np.ndarray:
    """pytorch-grad-cam's map at the layer's grid, before its scaling and resize (as tests/test_gradcam.py reads it)."""
    cam = GradCAM(LogitsOnly(model), target_layers=[layer], reshape_transform=channels_first)
    targets = [ClassifierOutputTarget(target)]
    try:
        cam(input_tensor=x, targets=targets)
        kept = cam.activations_and_grads
        at_grid = cam.get_cam_image(x, layer, targets, kept.activations[0], kept.gradients[0].numpy())
    finally:
        cam.activations_and_grads.release()
    return np.maximum(at_grid, 0)[0]


# a random model's Grad-CAM is all 0 (every token's weighted sum negative) for some classes: each test compares every
# class's map and asks that several are not all 0


@pytest.mark.parametrize("source, family", SOURCES)
def test_grad_cam_is_pytorch_grad_cams_swin_recipe_on_the_last_stage(source, family):
    model = tiny_swin(source, family).double()
    x = images(source).double()
    nonzero = 0
    for target in range(5):
        output, activations, gradients = stage_norm1_gradients(model, x, target)
        assert all(param.grad is None for param in model.parameters())
        assert not model.blocks[-1].norm1._forward_hooks  # the hook is gone
        ours = grad_cam(activations, gradients, 0, output.stage_grids[-1])[0]
        nonzero += bool(ours.max() > 0)
        expected = torch.from_numpy(package_grad_cam(model, model.blocks[-1].norm1, x, target))
        model.zero_grad(set_to_none=True)  # the package's backward fills .grad; vitviz's leaves none
        torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-10)
        # the registry's map: each first-stage token takes the value of the last-stage token holding it (2 merges)
        painted = method_maps(model, x, ["gradcam"], target=target).maps["gradcam"]
        first = output.stage_grids[0]
        direct = ours[torch.arange(first[0])[:, None] // 4, torch.arange(first[1])[None, :] // 4]
        torch.testing.assert_close(painted.double(), direct, rtol=1e-6, atol=1e-6 * float(direct.max()))
    assert nonzero >= 2


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_grad_cam_equals_pytorch_grad_cam_on_timms_own_model(family):
    """The recipe of pytorch-grad-cam's swinT_example.py on timm's model: layers[-1].blocks[-1].norm1, fp32."""
    reference = timm_swin(family)
    model = vitviz.from_timm(reference)
    x = images("timm", seed=4)
    nonzero = 0
    for target in range(5):
        output, activations, gradients = stage_norm1_gradients(model, x, target)
        ours = grad_cam(activations, gradients, 0, output.stage_grids[-1])[0]
        nonzero += bool(ours.max() > 0)
        expected = torch.from_numpy(package_grad_cam(reference, reference.layers[-1].blocks[-1].norm1, x, target))
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-4 * max(float(expected.max()), 1e-3))
    assert nonzero >= 2


@pytest.mark.parametrize("source, family", SOURCES)
def test_a_tokens_window_attention_is_its_row_of_the_dense_matrix(source, family):
    model = tiny_swin(source, family)
    with torch.no_grad():
        out = model(images(source), output_attentions=True)
    for layer, (attention, layout) in enumerate(zip(out.attentions, out.layouts)):
        rows, cols = layout.grid[1:]
        # the first token, one beside the padding and the shift's seam, and one in the middle
        for token in (0, len(layout) - 1, (rows // 2) * cols + cols // 2):
            for head in (0, attention.shape[1] - 1, "mean"):
                fused = attention.mean(1) if head == "mean" else attention[:, head]
                row = dense(fused, layout)[token]
                got = window_attention_map(out.attentions, out.layouts, layer, token, head)
                shares = {int(t) for w in layout.windows if token in w for t in w if t >= 0}
                assert set(got.tokens.tolist()) == shares and token in layout.windows[got.window]
                inside = torch.zeros(len(layout), dtype=torch.bool)
                inside[got.tokens] = True
                assert got.values[0, ~inside].isnan().all()
                torch.testing.assert_close(got.values[0, inside].double(), row[inside], rtol=0, atol=1e-7)
        by_place = window_attention_map(out.attentions, out.layouts, layer, (rows - 1, cols - 1), 0)
        assert by_place.window == window_attention_map(out.attentions, out.layouts, layer, len(layout) - 1, 0).window
    with pytest.raises(ValueError, match="outside the block's"):
        window_attention_map(out.attentions, out.layouts, 0, (99, 0))
    with pytest.raises(ValueError, match="head must be in"):
        window_attention_map(out.attentions, out.layouts, 0, 0, head=9)


def test_the_functions_written_for_one_set_of_tokens_refuse_swin_in_one_line():
    from vitviz.explain import direct_logit_attribution, logit_lens, patch_features

    model = tiny_swin("timm", "swin")
    x = images("timm")
    calls = {
        "direct logit attribution": lambda: direct_logit_attribution(model, x),
        "the logit lens": lambda: logit_lens(model, model(x, output_hidden_states=True).hidden_states, 0),
        "patch features": lambda: patch_features(model, x, -1),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^{name} .*Swin attends in windows and merges tokens[^\n]*$"):
            call()


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_gradients_work_after_a_forward_in_inference_mode(family):
    """The model caches its shift masks and position indices; a first forward under torch.inference_mode must not
    leave inference tensors there that a later forward needing gradients (relevance after rollout) cannot save."""
    from vitviz.model import swin as swin_module

    model = tiny_swin("huggingface", family)
    for cache in (swin_module._cached_mask, swin_module._cached_index, swin_module._cached_offsets):
        cache.cache_clear()
    pixels = torch.randn(1, 3, *PADDED_SIZE["huggingface"], generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        model(pixels, output_attentions=True)
    _, gradients = attention_gradients(model, pixels, target=1)
    assert all(torch.isfinite(g).all() for g in gradients) and any(g.abs().sum() > 0 for g in gradients)
