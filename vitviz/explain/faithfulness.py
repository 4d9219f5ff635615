"""Faithfulness: replace patches most- or least-relevant first and follow the class probability."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from vitviz.explain.common import check_choice, class_probabilities
from vitviz.model import Precision, autocast

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
    check_choice("order", order, ("most", "least"))
    check_choice("baseline", baseline, ("mean", "blur"))
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
        probabilities = class_probabilities(model, model(batch).logits.float())[:, target]
    return probabilities


def gaussian_blur(pixel_values: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (B, C, H, W) with reflect padding."""
    half = kernel_size // 2
    x = torch.arange(kernel_size, dtype=pixel_values.dtype, device=pixel_values.device) - half
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    C = pixel_values.shape[1]
    out = F.pad(
        pixel_values, (half, half, half, half), mode="reflect" if min(pixel_values.shape[-2:]) > half else "replicate"
    )
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
    precision: Precision = "fp32",
) -> dict[str, torch.Tensor | float]:
    """Both perturbation curves and their areas (Chefer et al. 2021's positive/negative tests), the passes run in
    ``precision`` (vitviz.autocast).

    A faithful map gives a *low* area when the most relevant patches go first and a *high*
    area when the least relevant go first.
    """
    with autocast(precision, pixel_values.device.type):
        most = perturbation_curve(model, pixel_values, relevance, target, "most", baseline, steps)
        least = perturbation_curve(model, pixel_values, relevance, target, "least", baseline, steps)
    return {
        "most_first": most,
        "least_first": least,
        "auc_most_first": area_under_curve(most),
        "auc_least_first": area_under_curve(least),
    }


def fraction_replaced(steps: int = 10) -> torch.Tensor:
    """The x axis of a perturbation curve: 0, 1/steps, ..., 1."""
    return torch.linspace(0, 1, steps + 1)


# --- Pixel-level protocols over a data set --------------------------------------------------------------------

# Chefer et al. 2021's x axis: the fraction of pixels removed, 0 (the intact image) to 90 %, as the authors
# integrate it (np.trapz(y, x) * 100 with x = 0, 0.1, ..., 0.9; Transformer-Explainability issues #27, #31).
CHEFER_FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def pixel_order(relevance: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(B, rows, cols) maps -> (B, H * W) pixel indices, most relevant first.

    Each map is upsampled bilinearly to the image's pixels first (as Chefer et al. 2021's evaluation does
    with ``interpolate(scale_factor=patch, mode="bilinear")``), so pixels inside a patch are ranked by the
    blend of the neighbouring patches' values.
    """
    if relevance.ndim != 3:
        raise ValueError(f"relevance must be (B, rows, cols); got {tuple(relevance.shape)}")
    pixels = F.interpolate(relevance[:, None].float(), size=size, mode="bilinear", align_corners=False)
    return pixels.flatten(1).argsort(dim=-1, descending=True, stable=True)


def black(pixel_values: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """The normalised value of a pixel set to 0 before normalisation, shaped (1, C, 1, 1)."""
    mean_t = torch.tensor(mean, dtype=pixel_values.dtype, device=pixel_values.device)
    std_t = torch.tensor(std, dtype=pixel_values.dtype, device=pixel_values.device)
    return (-mean_t / std_t).view(1, -1, 1, 1)


def chefer_perturbation(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    labels: torch.Tensor,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    negative: bool = False,
    fractions: tuple[float, ...] = CHEFER_FRACTIONS,
) -> torch.Tensor:
    """Chefer et al. 2021's positive (or negative) perturbation test: (len(fractions), B) booleans, whether the
    model still predicts ``labels`` with the top (or, ``negative``, the bottom) fraction of pixels removed.

    As their released evaluation does: the (B, rows, cols) map is upsampled bilinearly to pixels; for each
    fraction f the ``int(H * W * f)`` most relevant pixels (for the negative test: least relevant) are set to 0
    before normalisation (``pixel_values`` are normalised with ``mean`` and ``std``, so a removed pixel becomes
    ``-mean / std``); the prediction is the top-1 class. The first fraction, 0, is the intact image (their
    curve's first point is the model's accuracy on intact images). Averaged over a data set this is an accuracy
    per fraction; its area (``chefer_auc``) is low for a faithful map in the positive test and high in the
    negative.
    """
    B, _, H, W = pixel_values.shape
    order = pixel_order(-relevance if negative else relevance, (H, W))
    masks = torch.zeros(len(fractions), B, H * W, dtype=torch.bool, device=pixel_values.device)
    for i, fraction in enumerate(fractions):
        masks[i].scatter_(1, order[:, : int(H * W * fraction)], True)
    masks = masks.view(len(fractions) * B, 1, H, W)
    batch = torch.where(masks, black(pixel_values, mean, std), pixel_values.repeat(len(fractions), 1, 1, 1))
    with torch.inference_mode():
        predictions = model(batch).logits.argmax(dim=-1).view(len(fractions), B)
    return predictions == labels.view(1, B)


def chefer_auc(accuracy: torch.Tensor, fractions: tuple[float, ...] = CHEFER_FRACTIONS) -> float:
    """Area under the accuracy curve (in %) over the removed fraction, 0 % to 90 %, by the trapezoidal rule.

    The authors' own area: ``np.trapz(accuracy, fractions) * 100`` with fractions 0, 0.1, ..., 0.9, the first
    point the accuracy on intact images. ``accuracy`` is (len(fractions),) in [0, 1]. The area is not divided by
    the 0.9 width of the interval, so it lies in [0, 90]: a model that stays 100 % accurate scores 90.
    """
    if accuracy.shape != (len(fractions),):
        raise ValueError(f"accuracy must have one value per fraction ({len(fractions)}); got {tuple(accuracy.shape)}")
    return float(torch.trapezoid(100 * accuracy.double(), torch.tensor(fractions, dtype=torch.float64)))


def deletion_insertion(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    steps: int = 16,
) -> dict[str, torch.Tensor | float]:
    """Petsiuk et al. 2018's (RISE) deletion and insertion curves for one image (1, C, H, W) and its map.

    Pixels are taken most relevant first (the map upsampled bilinearly, as in ``pixel_order``), ``1 / steps``
    of them at a time. Deletion starts from the image and sets them to 0 before normalisation; insertion
    starts from a blurred copy (Gaussian, kernel 11, sigma 5, as in RISE) and puts the original pixels back.
    Each curve is the probability of ``target`` at steps 0..steps ((steps + 1,) values); its area over 0..1
    is low for a faithful map under deletion and high under insertion.
    """
    if pixel_values.ndim != 4 or pixel_values.shape[0] != 1:
        raise ValueError(f"pixel_values must be one image (1, C, H, W); got {tuple(pixel_values.shape)}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1; got {steps}")
    _, C, H, W = pixel_values.shape
    order = pixel_order(relevance.reshape(1, *relevance.shape[-2:]), (H, W))[0]
    revealed = torch.zeros(steps + 1, H * W, dtype=torch.bool, device=pixel_values.device)
    for k in range(1, steps + 1):
        revealed[k, order[: round(H * W * k / steps)]] = True
    revealed = revealed.view(steps + 1, 1, H, W)
    deleted = torch.where(revealed, black(pixel_values, mean, std), pixel_values)
    inserted = torch.where(revealed, pixel_values, gaussian_blur(pixel_values, 11, 5.0))
    with torch.inference_mode():
        probabilities = class_probabilities(model, model(torch.cat([deleted, inserted])).logits.float())[:, target]
    deletion, insertion = probabilities[: steps + 1], probabilities[steps + 1 :]
    return {
        "deletion": deletion,
        "insertion": insertion,
        "deletion_auc": area_under_curve(deletion),
        "insertion_auc": area_under_curve(insertion),
    }


# --- SaCo (Wu et al. 2024) ---------------------------------------------------------------------------------------

SACO_GROUPS = 10


def saco_coefficient(salience: torch.Tensor, drops: torch.Tensor) -> float:
    """The salience-guided faithfulness coefficient of K groups, most salient first: ``salience`` (K,) each group's
    summed salience s(G_i), ``drops`` (K,) the target probability's fall when that group alone is removed. Every
    pair i < j adds s(G_i) - s(G_j) when G_i's removal hurts at least as much as G_j's, and subtracts it otherwise;
    the sum over the pairs' total weight is in [-1, 1], 1 for a map whose order of salience is the order of effect
    (adreamwu/SaCo's ``compute_SaCo``). A map whose groups all hold the same salience has no order to test: NaN
    (the reference raises; a benchmark over many images leaves such an image out of the mean)."""
    if salience.shape != drops.shape or salience.ndim != 1 or salience.numel() < 2:
        raise ValueError(f"SaCo needs one salience and one drop per group, 2 groups or more; got {salience.shape}")
    s, d = salience.double(), drops.double()
    i, j = torch.triu_indices(len(s), len(s), offset=1)
    weight = s[i] - s[j]
    signed = torch.where(d[i] >= d[j], weight, -weight)
    total = signed.abs().sum()
    return float(signed.sum() / total) if total > 0 else float("nan")


def saco(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    relevance: torch.Tensor,
    target: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    groups: int = SACO_GROUPS,
) -> float:
    """Wu et al. 2024's SaCo for one image (1, C, H, W) and its (rows, cols) map: the pixels ranked by the map
    (upsampled bilinearly, as ``pixel_order``) and split into ``groups`` groups of equal size (within one pixel),
    most salient first; each group's salience is the sum of its pixels' values, and its effect the target
    probability's fall when only its pixels are set to 0 before normalisation (as the other protocols remove
    them). All groups run in one batch with the intact image. See ``saco_coefficient``."""
    if pixel_values.ndim != 4 or pixel_values.shape[0] != 1:
        raise ValueError(f"pixel_values must be one image (1, C, H, W); got {tuple(pixel_values.shape)}")
    _, _, H, W = pixel_values.shape
    if isinstance(groups, bool) or not isinstance(groups, int) or not 2 <= groups <= H * W:
        raise ValueError(f"SaCo's groups must be a whole number from 2 to the {H * W} pixels; got {groups!r}")
    relevance = relevance.reshape(1, *relevance.shape[-2:]).float()
    upsampled = F.interpolate(relevance[:, None], size=(H, W), mode="bilinear", align_corners=False).flatten()
    order = upsampled.argsort(descending=True, stable=True)
    parts = torch.tensor_split(order, groups)
    removed = torch.zeros(groups + 1, H * W, dtype=torch.bool, device=pixel_values.device)
    for k, part in enumerate(parts, start=1):
        removed[k, part.to(pixel_values.device)] = True
    batch = torch.where(removed.view(groups + 1, 1, H, W), black(pixel_values, mean, std), pixel_values)
    with torch.inference_mode():
        probabilities = class_probabilities(model, model(batch).logits.float())[:, target].double().cpu()
    salience = torch.stack([upsampled[part].double().sum() for part in parts]).cpu()
    return saco_coefficient(salience, probabilities[0] - probabilities[1:])
