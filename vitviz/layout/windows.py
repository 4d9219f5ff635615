"""Layouts of window attention (Swin): a stage's grid of tokens, each covering a square of input pixels, with the
windows its block attends in; and whether a model's per-block layouts are hierarchical."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from vitviz.layout.tokens import TokenLayout, grid_layout


def window_layout(
    grid_size: tuple[int, int], token_size: int, windows: np.ndarray, image_size: tuple[int, int]
) -> TokenLayout:
    """A (rows, cols) grid of "patch" tokens in row-major order, each ``token_size`` pixels square (a Swin stage's
    tokens: the patch size times 2 per merging), on an input of ``image_size`` (height, width): the grid's last
    row and column may reach past it where the input was padded, and ``paint`` leaves those pixels out.
    ``windows`` int (nW, wh * ww): each window's token indices in the order its attention lists them, -1 for a
    padded slot."""
    windows = np.asarray(windows, dtype=np.int64)
    count = grid_size[0] * grid_size[1]
    if windows.ndim != 2 or windows.size and (windows.min() < -1 or windows.max() >= count):
        raise ValueError(f"windows must be (nW, slots) token indices below {count}, or -1; got shape {windows.shape}")
    windows = windows.copy()
    windows.flags.writeable = False  # shared through the model's layout cache
    return replace(grid_layout((), tuple(grid_size), token_size), image_size=tuple(image_size), windows=windows)


def same_tokens(first: TokenLayout, second: TokenLayout) -> bool:
    """Whether two layouts hold the same tokens (kinds, boxes and frames), whatever their windows."""
    return first is second or (
        first.kinds == second.kinds
        and np.array_equal(first.boxes, second.boxes, equal_nan=True)
        and np.array_equal(first.frames, second.frames)
    )


def is_hierarchical(layouts: Sequence[TokenLayout] | None) -> bool:
    """Whether a model's per-block ``layouts`` attend in windows or change their tokens between blocks (Swin): its
    maps are then read through vitviz.explain.stages, not through the functions that take one (T, T) attention per
    block. False for None or a plain ViT's."""
    if not layouts:
        return False
    return any(layout.windows is not None for layout in layouts) or not all(
        same_tokens(layouts[0], layout) for layout in layouts[1:]
    )
