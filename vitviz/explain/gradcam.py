"""Grad-CAM (Selvaraju et al. 2017, "Grad-CAM: Visual Explanations from Deep Networks via Gradient-based
Localization") for ViTs, as pytorch-grad-cam applies it: the patch tokens of the last block's first LayerNorm
(``blocks[-1].norm1``) are the feature map, the patch grid its spatial axes and the token width its channels.

Swin (pytorch-grad-cam's ``swinT_example.py``: ``layers[-1].blocks[-1].norm1``, its (B, H, W, C) output as the
feature map): the same layer of the last block, so the map lies on the last stage's grid (``stage_norm1_gradients``);
the method's map is that grid painted onto the first stage's, each first-stage token taking the value of the
last-stage token whose box holds it, so it is comparable with the other maps of the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from vitviz.explain.common import LayoutArgument, target_score, token_grid
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.stages import merge_targets
from vitviz.explain.target import TargetLike, class_target
from vitviz.layout import TokenLayout
from vitviz.model import Swin, SwinOutput, ViTOutput


class Norm1Gradients(NamedTuple):
    output: ViTOutput | SwinOutput  # the model's own output (logits, grid_size, num_prefix_tokens, layouts...)
    activations: torch.Tensor  # (B, T, D) the last block's norm1 output (Swin: the last stage's tokens, row-major)
    gradients: torch.Tensor  # (B, T, D) the target logit's gradient w.r.t. it


def norm1_gradients(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: TargetLike | Sequence[int] | torch.Tensor
) -> Norm1Gradients:
    """The last block's norm1 output A (B, T, D) and the gradient of the target logit w.r.t. it.

    No hook: the blocks before the last run without gradients, norm1 of the last block's input is computed
    here and passed into that block in its place (``Block.forward(..., normed=A)``), so A is a leaf the
    backward pass stops at. Its gradient is the one a hook on norm1's output would see. Returns
    (output, A, dA), ``output`` being the model's own (logits, grid_size, num_prefix_tokens...).
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    with torch.no_grad():
        x, grid = model.embed(pixel_values)
        controls = model.block_arguments(grid, x.shape[0])  # rotary embeddings, a knocked-out model's masks
        for block, block_controls in zip(model.blocks[:-1], controls):
            x = block(x, block_controls).hidden  # (B, T, D): the last block's input
    last = model.blocks[-1]
    with torch.enable_grad():
        activations = last.norm1(x).detach().requires_grad_()
        tokens = last(x, controls[-1], normed=activations).hidden
        output = model.forward_head(tokens, grid)
        (gradients,) = torch.autograd.grad(target_score(output.logits, target), activations)
    return Norm1Gradients(output, activations.detach(), gradients)


def stage_norm1_gradients(
    model: Swin, pixel_values: torch.Tensor, target: TargetLike | Sequence[int] | torch.Tensor
) -> Norm1Gradients:
    """Swin's ``norm1_gradients``: the last block's norm1 output, (B, T, D) over the last stage's tokens in row-major
    order (``output.layouts[-1]``, ``output.stage_grids[-1]``), and the target logit's gradient w.r.t. it.

    The output is swapped for a leaf the backward pass stops at by a forward hook on that norm1, removed before this
    returns: Swin v2's norm1 normalises the attention's output inside the block (post-norm), so no block input can
    stand in for it as ``Block.forward(normed=...)`` does for the ViT. A LayerNorm has no fused kernel to bypass a
    hook, and the map is pytorch-grad-cam's, whose hook sits on the same module."""
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    kept: list[torch.Tensor] = []

    def leaf(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        kept.append(output.detach().requires_grad_())  # (B, rows, cols, D)
        return kept[-1]

    handle = model.blocks[-1].norm1.register_forward_hook(leaf)
    try:
        with torch.enable_grad():
            output = model(pixel_values)
            (gradients,) = torch.autograd.grad(target_score(output.logits, target), kept[0])
    finally:
        handle.remove()
    return Norm1Gradients(output, kept[0].detach().flatten(1, 2), gradients.flatten(1, 2))


def on_first_stage(values: torch.Tensor, layouts: Sequence[TokenLayout]) -> torch.Tensor:
    """(B, N_last) values over the last block's patch tokens -> (B, rows, cols) over the first block's grid: each
    first-block token takes the value of the last-block token whose box holds its centre (``merge_targets``)."""
    first, last = layouts[0], layouts[-1]
    if first.grid is None or first.grid[0] != 1:
        raise ValueError("the first block's tokens do not form one frame's grid; paint the values with its layout")
    targets = merge_targets(last, first)[first.patch_indices]  # last-block token of each first-block patch
    position = torch.as_tensor(np.searchsorted(last.patch_indices, targets), device=values.device)
    return values[:, position].reshape(values.shape[0], *first.grid[1:])


def grad_cam(
    activations: torch.Tensor,
    gradients: torch.Tensor,
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Grad-CAM's map from ``norm1_gradients``: (B, rows, cols), or (B, N) without a grid. ``num_prefix_tokens``: the
    token layout (``output.layout``), or a plain ViT's prefix count with ``grid_size``.

    Over the patch tokens only (the prefix tokens have no place on the grid): w_c = the mean over the grid of
    dy/dA_c, map = ReLU(sum_c w_c A_c) (Selvaraju et al., Eqs. 1-2), pytorch-grad-cam's ``GradCAM`` with a
    ``reshape_transform`` that drops the prefix tokens. Its min-max scaling is left to the plots.
    """
    if activations.ndim != 3 or activations.shape != gradients.shape:
        raise ValueError(
            f"activations {tuple(activations.shape)} and gradients {tuple(gradients.shape)} must both be (B, T, D)"
        )
    grid = token_grid(num_prefix_tokens, grid_size, "grad_cam")
    p = grid.num_prefix_tokens
    if not 0 <= p < activations.shape[1]:
        raise ValueError(f"num_prefix_tokens={p} must be in [0, T={activations.shape[1]})")
    N = activations.shape[1] - p
    if grid.shape is not None and grid.num_patches != N:
        raise ValueError(f"grid {'x'.join(map(str, grid.shape))} does not hold the {N} patch tokens")
    patches = activations[:, p:]  # (B, N, D): channels last
    weights = gradients[:, p:].mean(dim=1, keepdim=True)  # (B, 1, D): one weight per channel
    return grid.as_map((patches * weights).sum(dim=-1).clamp(min=0))


def _grad_cam_map(inputs: MapInputs) -> MethodOutput:
    if inputs.windowed:  # on the last stage's grid, painted onto the first's like every map of the registry
        with inputs.autocast():
            _, activations, gradients = stage_norm1_gradients(inputs.model, inputs.pixels, inputs.target)
        last = grad_cam(activations.float(), gradients.float(), num_prefix_tokens=0)  # (1, N_last)
        return MethodOutput(on_first_stage(last, inputs.layouts))
    with inputs.autocast():
        _, activations, gradients = norm1_gradients(inputs.model, inputs.pixels, inputs.target)
    return MethodOutput(grad_cam(activations.float(), gradients.float(), **inputs.layout))


GRAD_CAM = Method(
    name="gradcam",
    description="Grad-CAM on the last block's norm1 tokens, as pytorch-grad-cam does for ViTs",
    paper="Selvaraju et al. 2017",
    compute=_grad_cam_map,
    class_specific=True,
    cost="backward",
    cost_note="one backward pass",
    caption="Bright: patches whose last-block features, weighted by their gradient, raise the class's score.",
    windowed=None,  # Swin: the last stage's grid (stage_norm1_gradients), painted onto the first's
)
