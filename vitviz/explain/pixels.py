"""Pixels and patches: which patch holds each input pixel, and a pixel-level map summed or averaged per patch.

The model-agnostic methods (baselines.py, rise.py) attribute the input's pixels; a table compares methods per patch.
``pixel_cells`` reads the token layout (``output.layout``) for the patch that covers each pixel, so the cells are the
model's own (a Swin's first-stage patches, a non-square grid); ``per_patch`` folds a (B, H, W) map into the
(B, rows, cols) grid every other method returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from vitviz.layout import TokenLayout


@dataclass(frozen=True)
class PixelCells:
    """The patch grid over the input's pixels: ``cells`` (H, W) int64 holds the grid cell (row-major over
    (rows, cols)) whose patch covers each pixel's centre, or rows * cols where none does."""

    cells: torch.Tensor
    grid: tuple[int, int]
    patch: tuple[int, int]  # (height, width) of a patch in pixels

    @property
    def count(self) -> int:
        return self.grid[0] * self.grid[1]


def pixel_cells(
    image_size: tuple[int, int], layout: TokenLayout | None, grid_size: tuple[int, ...] | None
) -> PixelCells:
    """The cells of an input of ``image_size`` (H, W): from the layout's patch boxes where it has a one-frame grid,
    else from ``grid_size`` (rows, cols) of equal patches that tile the input."""
    H, W = image_size
    if layout is not None and layout.grid is not None:
        if layout.num_frames != 1:
            raise ValueError("pixel-level methods explain an image; this layout covers several frames")
        rows, cols = layout.grid[1:]
        boxes = layout.boxes[layout.patch_indices].astype(np.float64)
        if layout.grid_order is not None:
            boxes = boxes[layout.grid_order]
        scale = np.array([W / layout.image_size[1], H / layout.image_size[0]] * 2)
        # the pixels whose centres lie in [edge0, edge1), as TokenLayout.paint draws them
        edges = np.clip(np.ceil(boxes * scale - 0.5).astype(np.int64), 0, [W, H, W, H])
        cells = np.full((H, W), rows * cols, np.int64)
        for cell, (x0, y0, x1, y1) in enumerate(edges):
            cells[y0:y1, x0:x1] = cell
        x0, y0, x1, y1 = edges[0]
        return PixelCells(torch.from_numpy(cells), (rows, cols), (int(y1 - y0), int(x1 - x0)))
    if grid_size is None or len(grid_size) != 2:
        raise ValueError(f"pixel-level methods need the patch grid (rows, cols); got {grid_size}")
    rows, cols = grid_size
    if H % rows or W % cols:
        raise ValueError(f"a {rows} x {cols} grid does not tile a {H} x {W} input; pass the model's token layout")
    ph, pw = H // rows, W // cols
    r, c = torch.arange(H)[:, None] // ph, torch.arange(W)[None, :] // pw
    return PixelCells(r * cols + c, (rows, cols), (ph, pw))


def input_cells(inputs) -> PixelCells:
    """The cells of a method's input (``MapInputs``): its pixels' size, its token layout, its grid."""
    return pixel_cells(tuple(inputs.pixels.shape[-2:]), inputs.token_layout, inputs.grid_size)


def per_patch(values: torch.Tensor, cells: PixelCells, reduce: Literal["sum", "mean"]) -> torch.Tensor:
    """(B, H, W) -> (B, rows, cols): each patch's pixels summed (an attribution's share of the score) or averaged (a
    value every pixel of a patch holds: occlusion's, KernelSHAP's, RISE's); pixels of no patch are left out."""
    B = values.shape[0]
    index = cells.cells.to(values.device).reshape(-1)
    totals = torch.zeros(B, cells.count + 1, dtype=torch.float64, device=values.device)
    totals.index_add_(1, index, values.reshape(B, -1).double())
    if reduce == "mean":
        counts = torch.bincount(index, minlength=cells.count + 1).clamp(min=1)
        totals = totals / counts
    return totals[:, : cells.count].float().reshape(B, *cells.grid)
