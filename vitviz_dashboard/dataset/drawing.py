"""The Dataset page's pictures, from vitviz's drawing functions: the one module of this folder that imports them, so
a move of vitviz's plotting module is one import to change; and the points a click or a box selects in a chart."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vitviz.render.figures import layer_head_figure
from vitviz.render.overlays import COLORMAPS, colorize, colour_bar, mark_patch, overlay, rescale, upsample

__all__ = [
    "COLORMAPS",
    "breakable",
    "chart_points",
    "colour_bar",
    "layer_head_figure",
    "map_picture",
    "map_thumbnail",
    "marked_thumbnail",
    "patch_crop",
    "patch_thumbnail",
]

Box = tuple[float, float, float, float]


def _fitted(image: Image.Image, box: Box, side: int) -> tuple[Image.Image, Box]:
    """The photo with its long side at most ``side`` pixels, and the model's input box in the new photo's pixels. A
    photo under half of ``side`` (a 32 x 32 CIFAR image) is enlarged by a whole factor, each pixel a square block, so
    the map and the patch outlines drawn over it are not a few pixels wide."""
    scale = side / max(image.size)
    if scale < 1.0:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.BILINEAR)
    elif scale >= 2.0:
        scale = float(int(scale))
        image = image.resize((image.width * int(scale), image.height * int(scale)), Image.NEAREST)
    else:
        scale = 1.0
    return image, tuple(v * scale for v in box)


def map_thumbnail(image: Image.Image, patch_map: np.ndarray, box: Box, colormap: str, alpha: float, side: int = 192):
    """A thumbnail of the photo with a patch map drawn over the part the model saw."""
    small, small_box = _fitted(image, box, side)
    return overlay(small, patch_map, colormap, alpha, small_box)


def blocky(patch_map: np.ndarray, height: int, width: int) -> np.ndarray:
    """The patch map enlarged to (height, width) by nearest neighbour: each patch a flat block, nothing smoothed."""
    rows, cols = patch_map.shape
    down = np.minimum(np.arange(height) * rows // max(1, height), rows - 1)
    across = np.minimum(np.arange(width) * cols // max(1, width), cols - 1)
    return np.asarray(patch_map, np.float32)[down[:, None], across[None, :]]


def patch_thumbnail(
    image: Image.Image,
    patch_map: np.ndarray,
    box: Box,
    colormap: str,
    alpha: float,
    value_range: tuple[float, float] | None = None,
    side: int = 192,
) -> Image.Image:
    """A thumbnail with the map drawn patch by patch (each patch one flat colour, as the model computed it) over the
    part the model saw; ``value_range`` (low, high) colours every thumbnail of a grid on one scale."""
    small, small_box = _fitted(image, box, side)
    left, top, right, bottom = (int(round(v)) for v in small_box)
    # at the box's own size, overlay's resize changes nothing: the blocks stay sharp
    return overlay(small, blocky(patch_map, bottom - top, right - left), colormap, alpha, small_box, value_range)


def marked_thumbnail(image: Image.Image, patch: tuple[int, int], grid: tuple[int, int], box: Box, side: int = 192):
    """A thumbnail of the photo with one patch (row, col) outlined."""
    small, small_box = _fitted(image, box, side)
    return mark_patch(small.convert("RGB"), patch, grid, small_box)


def patch_crop(image: Image.Image, patch: tuple[int, int], grid: tuple[int, int], box: Box, side: int = 96):
    """The photo's pixels under one patch, enlarged to ``side`` pixels a side."""
    left, top, right, bottom = box
    rows, cols = grid
    row, col = patch
    width, height = (right - left) / cols, (bottom - top) / rows
    cell = (left + col * width, top + row * height, left + (col + 1) * width, top + (row + 1) * height)
    crop = image.convert("RGB").crop(tuple(round(v) for v in cell))
    return crop.resize((side, max(1, round(side * crop.height / max(1, crop.width)))), Image.NEAREST)


def map_picture(
    patch_map: np.ndarray, colormap: str, side: int = 160, value_range: tuple[float, float] | None = None
) -> Image.Image:
    """A patch map alone, coloured and enlarged (for maps that belong to no one photo, such as a class's mean):
    min-max scaled, or mapped linearly from ``value_range`` (low, high) and clipped, so that maps compare."""
    rows, cols = patch_map.shape
    scale = side / max(rows, cols)
    if value_range is None:
        scaled = rescale(patch_map)
    else:
        low, high = value_range
        scaled = np.clip((np.asarray(patch_map, np.float32) - low) / max(high - low, 1e-12), 0.0, 1.0)
    values = upsample(scaled, max(1, round(rows * scale)), max(1, round(cols * scale)))
    return Image.fromarray(colorize(values, colormap))


def chart_points(event) -> list[dict]:
    """The selected points of st.plotly_chart's event (a click gives one, a box or a lasso several): [] when none.
    Read as a mapping, so a selection that a test put into the session state as a plain dict reads the same."""
    selection = (event or {}).get("selection") or {}
    return list(selection.get("points") or [])


def breakable(path: str) -> str:
    """A file's path for a caption in a narrow column: a zero-width space after each "/", so the line breaks between
    folders rather than inside a file name."""
    return str(path).replace("/", "/\u200b")
