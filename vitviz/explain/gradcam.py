"""Grad-CAM (Selvaraju et al. 2017, "Grad-CAM: Visual Explanations from Deep Networks via Gradient-based
Localization") for ViTs, as pytorch-grad-cam applies it: the patch tokens of the last block's first LayerNorm
(``blocks[-1].norm1``) are the feature map, the patch grid its spatial axes and the token width its channels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from vitviz.explain.common import as_map, target_score
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.model import ViTOutput


class Norm1Gradients(NamedTuple):
    output: ViTOutput  # the model's own output (logits, grid_size, num_prefix_tokens...)
    activations: torch.Tensor  # (B, T, D) the last block's norm1 output
    gradients: torch.Tensor  # (B, T, D) the target logit's gradient w.r.t. it


def norm1_gradients(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: int | Sequence[int] | torch.Tensor
) -> Norm1Gradients:
    """The last block's norm1 output A (B, T, D) and the gradient of the target logit w.r.t. it.

    No hook: the blocks before the last run without gradients, norm1 of the last block's input is computed
    here and passed into that block in its place (``Block.forward(..., normed=A)``), so A is a leaf the
    backward pass stops at. Its gradient is the one a hook on norm1's output would see. Returns
    (output, A, dA), ``output`` being the model's own (logits, grid_size, num_prefix_tokens...).
    """
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


def grad_cam(
    activations: torch.Tensor,
    gradients: torch.Tensor,
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Grad-CAM's map from ``norm1_gradients``: (B, rows, cols), or (B, N) without a grid.

    Over the patch tokens only (the prefix tokens have no place on the grid): w_c = the mean over the grid of
    dy/dA_c, map = ReLU(sum_c w_c A_c) (Selvaraju et al., Eqs. 1-2), pytorch-grad-cam's ``GradCAM`` with a
    ``reshape_transform`` that drops the prefix tokens. Its min-max scaling is left to the plots.
    """
    if activations.ndim != 3 or activations.shape != gradients.shape:
        raise ValueError(
            f"activations {tuple(activations.shape)} and gradients {tuple(gradients.shape)} must both be (B, T, D)"
        )
    if not 0 <= num_prefix_tokens < activations.shape[1]:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} must be in [0, T={activations.shape[1]})")
    N = activations.shape[1] - num_prefix_tokens
    if grid_size is not None and grid_size[0] * grid_size[1] != N:
        raise ValueError(f"grid {grid_size[0]}x{grid_size[1]} does not hold the {N} patch tokens")
    patches = activations[:, num_prefix_tokens:]  # (B, N, D): channels last
    weights = gradients[:, num_prefix_tokens:].mean(dim=1, keepdim=True)  # (B, 1, D): one weight per channel
    return as_map((patches * weights).sum(dim=-1).clamp(min=0), grid_size)


def _grad_cam_map(inputs: MapInputs) -> MethodOutput:
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
)
