"""Faithfulness: replace patches most- or least-relevant first and follow the class probability."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from vitviz.explain.common import _check_choice


Baseline = Literal["mean", "blur"]


def perturbation_curve(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    order: Literal["most", "least"] = "most",
    baseline: Baseline = "mean",
    steps: int = 10,
) -> torch.Tensor:
    """Probability of ``target`` as patches are replaced, most- or least-relevant first.

    ``pixel_values`` is one normalised image (1, C, H, W); ``relevance`` its (rows, cols) map.
    Step k replaces the top k/steps of the patches by the baseline: "mean" is the normalisation
    mean (0 after normalising, i.e. the dataset's mean colour), "blur" a Gaussian blur of the image.
    All steps + 1 images run as one batch. Returns (steps + 1,) probabilities, step 0 intact.
    """
    _check_choice("order", order, ("most", "least"))
    _check_choice("baseline", baseline, ("mean", "blur"))
    if pixel_values.ndim != 4 or pixel_values.shape[0] != 1:
        raise ValueError(f"pixel_values must be one image (1, C, H, W); got {tuple(pixel_values.shape)}")
    _, C, H, W = pixel_values.shape
    rows, cols = relevance.shape
    if H % rows or W % cols or H // rows != W // cols:
        raise ValueError(f"a {rows}x{cols} relevance map does not tile a {H}x{W} image into square patches")
    patch = H // rows
    if baseline == "mean":
        replacement = torch.zeros_like(pixel_values)
    else:
        kernel = 2 * patch + 1
        replacement = gaussian_blur(pixel_values, kernel, sigma=patch)
    ranking = relevance.flatten().argsort(descending=order == "most")  # (N,)
    N = ranking.numel()
    masks = torch.zeros(steps + 1, N, dtype=torch.bool, device=pixel_values.device)
    for k in range(1, steps + 1):
        masks[k, ranking[: round(N * k / steps)]] = True
    pixel_masks = masks.reshape(steps + 1, 1, rows, cols).float()
    pixel_masks = F.interpolate(pixel_masks, scale_factor=patch, mode="nearest")  # (steps+1, 1, H, W)
    batch = pixel_values * (1 - pixel_masks) + replacement * pixel_masks
    with torch.inference_mode():
        probabilities = model(batch).logits.float().softmax(dim=-1)[:, target]
    return probabilities


def gaussian_blur(pixel_values: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (B, C, H, W) with reflect padding."""
    half = kernel_size // 2
    x = torch.arange(kernel_size, dtype=pixel_values.dtype, device=pixel_values.device) - half
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    C = pixel_values.shape[1]
    out = F.pad(pixel_values, (half, half, half, half), mode="reflect" if min(pixel_values.shape[-2:]) > half else "replicate")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(C, 1, 1, -1), groups=C)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(C, 1, -1, 1), groups=C)


def area_under_curve(probabilities: torch.Tensor) -> float:
    """Trapezoidal area under a perturbation curve over the replaced fraction 0..1."""
    steps = probabilities.numel() - 1
    return float(torch.trapezoid(probabilities.double(), dx=1.0 / steps))


def faithfulness(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    baseline: Baseline = "mean",
    steps: int = 10,
) -> dict[str, torch.Tensor | float]:
    """Both perturbation curves and their areas (Chefer et al. 2021's positive/negative tests).

    A faithful map gives a *low* area when the most relevant patches go first and a *high*
    area when the least relevant go first.
    """
    most = perturbation_curve(model, pixel_values, relevance, target, "most", baseline, steps)
    least = perturbation_curve(model, pixel_values, relevance, target, "least", baseline, steps)
    return {"most_first": most, "least_first": least, "auc_most_first": area_under_curve(most),
            "auc_least_first": area_under_curve(least)}  # fmt: skip


def fraction_replaced(steps: int = 10) -> torch.Tensor:
    """The x axis of a perturbation curve: 0, 1/steps, ..., 1."""
    return torch.linspace(0, 1, steps + 1)
