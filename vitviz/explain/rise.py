"""RISE: Randomized Input Sampling for Explanation (Petsiuk et al. 2018), as eclique/RISE's PyTorch class computes it.

    masks    N random binary s x s grids, each cell kept with probability p, upsampled bilinearly to
             (s + 1) * ceil(H / s) pixels a side (mirrored at the edges, as scikit-image's ``resize`` with
             mode="reflect" does) and cropped at a random shift of less than one cell
    saliency S(x)[c] = sum_i P(c | x * M_i) M_i / (N p)

P is the model's own probabilities (a softmax over the classes; SigLIP's sigmoid per prompt), and x * M_i masks the
normalised pixels, so a removed pixel takes the mean colour. No Captum release carries RISE yet (its master has
``captum/attr/_core/rise.py``): this module follows the reference class, and tests/test_explain_baselines.py checks
it against that class written out with SciPy's ``map_coordinates``. ``samples`` (N, default 4000), ``cells`` (s, 7)
and ``keep`` (p, 0.5) are the paper's ImageNet settings; ``seed`` draws the grids and shifts.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vitviz.explain.common import class_probabilities
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.pixels import input_cells, per_patch

RISE_SAMPLES = 4000


def upsampling_matrix(cells: int, size: int) -> torch.Tensor:
    """(size, cells) float64: linear interpolation of ``cells`` values to ``size`` pixels, pixel centres aligned
    (output pixel i reads input coordinate (i + 0.5) cells / size - 0.5), the input mirrored at its edges without
    repeating the edge value (NumPy's "reflect"), as scikit-image's order-1 ``resize`` in mode "reflect"."""
    coordinate = (np.arange(size) + 0.5) * cells / size - 0.5
    low = np.floor(coordinate).astype(np.int64)
    weight = coordinate - low
    matrix = np.zeros((size, cells))
    for index, share in ((low, 1 - weight), (low + 1, weight)):
        if cells == 1:
            mirrored = np.zeros_like(index)
        else:
            period = 2 * (cells - 1)
            mirrored = np.abs(index) % period
            mirrored = np.where(mirrored >= cells, period - mirrored, mirrored)
        np.add.at(matrix, (np.arange(size), mirrored), share)
    return torch.from_numpy(matrix)


def rise_masks(grids: torch.Tensor, shifts: torch.Tensor, image_size: tuple[int, int]) -> torch.Tensor:
    """(N, H, W) float32 masks from (N, s, s) binary ``grids`` and (N, 2) pixel ``shifts`` (row, column), each less
    than a cell: every grid upsampled to (s + 1) cells and cropped to the image at its shift."""
    N, s, _ = grids.shape
    H, W = image_size
    cell = (math.ceil(H / s), math.ceil(W / s))
    up = ((s + 1) * cell[0], (s + 1) * cell[1])
    rows, cols = upsampling_matrix(s, up[0]), upsampling_matrix(s, up[1])
    masks = torch.empty(N, H, W, dtype=torch.float32)
    for i, (grid, (dy, dx)) in enumerate(zip(grids.double(), shifts.tolist(), strict=True)):
        masks[i] = (rows @ grid @ cols.T)[dy : dy + H, dx : dx + W].float()
    return masks


def draw_masks(count: int, cells: int, keep: float, image_size: tuple[int, int], seed: int) -> torch.Tensor:
    """RISE's ``count`` random masks for an image of ``image_size``, from ``seed``."""
    H, W = image_size
    generator = torch.Generator().manual_seed(seed)
    grids = torch.rand(count, cells, cells, generator=generator) < keep
    cell = (math.ceil(H / cells), math.ceil(W / cells))
    shifts = torch.stack(
        [
            torch.randint(0, cell[0], (count,), generator=generator),
            torch.randint(0, cell[1], (count,), generator=generator),
        ],
        dim=1,
    )
    return rise_masks(grids, shifts, image_size)


def rise_saliency(
    model: torch.nn.Module, pixels: torch.Tensor, masks: torch.Tensor, keep: float, batch: int
) -> torch.Tensor:
    """(classes, H, W) float32: sum_i P(c | pixels * M_i) M_i / (N keep), the passes ``batch`` images at a time."""
    N, H, W = masks.shape
    saliency = None
    with torch.no_grad():
        for start in range(0, N, batch):
            chunk = masks[start : start + batch].to(pixels.device, pixels.dtype)
            logits = model(pixels * chunk[:, None]).logits
            if logits is None:
                raise ValueError("RISE explains a class; this model is a backbone (no head)")
            probabilities = class_probabilities(model, logits.float()).double()
            part = probabilities.T @ chunk.reshape(len(chunk), H * W).double()
            saliency = part if saliency is None else saliency + part
    return (saliency / N / keep).reshape(-1, H, W).float()


def rise_map(inputs: MapInputs) -> MethodOutput:
    options, image_size = inputs.options, tuple(inputs.pixels.shape[-2:])
    if options.cells > min(image_size):
        raise ValueError(f"RISE's cells ({options.cells}) must not outnumber the input's {min(image_size)} pixels")
    masks = draw_masks(options.samples or RISE_SAMPLES, options.cells, options.keep, image_size, options.seed)
    with inputs.autocast():
        saliency = rise_saliency(inputs.model, inputs.pixels, masks, options.keep, options.batch)
    pixels = saliency[inputs.target][None].to(inputs.pixels.device)
    return MethodOutput(per_patch(pixels, input_cells(inputs), "mean"), pixels=pixels)


RISE = Method(
    name="rise",
    description="the class's probability under random masks, each mask weighted by it",
    paper="Petsiuk et al. 2018",
    compute=rise_map,
    class_specific=True,
    cost="repeated passes",
    cost_note="4,000 forward passes (samples)",
    caption="Bright: pixels (averaged per patch) whose presence under random masks keeps the class probable.",
    windowed=None,  # it reads only the pixels and the probabilities
)
