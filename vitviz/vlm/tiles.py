"""Where each image token's pixels came from: tiles, their token grids and their boxes in the photo.

A VLM's processor turns a photo into one or more tiles (the whole image; LLaVA-NeXT's base image and any-res crops;
Idefics3's split tiles and global image), each resized, cropped or padded, and each read as a grid of image tokens.
A ``Tile`` holds that grid's size and the tile's box in the photo's pixel coordinates: token (row, col) covers the
(row, col) cell of the box divided evenly into rows x cols. A box may reach outside the photo where the processor
padded it, and a tile squashed to a square keeps the photo's own box.

``Frame`` follows a canvas through the processor's steps (resize, crop, pad) and knows, at each step, the box of the
photo that the canvas shows; layouts.py builds the tiles with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from vitviz.layout import TokenLayout

Box = tuple[float, float, float, float]  # left, top, right, bottom in the photo's pixels


@dataclass(frozen=True)
class Tile:
    """One tile of image tokens: its token grid (rows, cols), its box in the photo, and a name for people."""

    grid: tuple[int, int]
    box: Box
    name: str = "image"

    @property
    def count(self) -> int:
        return self.grid[0] * self.grid[1]

    def cell(self, row: int, col: int) -> Box:
        """The box in the photo that token (row, col) of this tile covers."""
        left, top, right, bottom = self.box
        width, height = (right - left) / self.grid[1], (bottom - top) / self.grid[0]
        return (left + col * width, top + row * height, left + (col + 1) * width, top + (row + 1) * height)

    def cells(self) -> np.ndarray:
        """float64 (count, 4): every token's box in the photo (``cell``), row-major."""
        left, top, right, bottom = self.box
        rows, cols = np.divmod(np.arange(self.count), self.grid[1])
        width, height = (right - left) / self.grid[1], (bottom - top) / self.grid[0]
        return np.stack(
            [left + cols * width, top + rows * height, left + (cols + 1) * width, top + (rows + 1) * height], axis=1
        )

    def token_grid(self, index: int) -> np.ndarray:
        """(count, 3) rows of (tile index, row, col), row-major: the order a vision tower reads a grid."""
        rows, cols = np.meshgrid(np.arange(self.grid[0]), np.arange(self.grid[1]), indexing="ij")
        return np.stack([np.full(self.count, index), rows.ravel(), cols.ravel()], axis=1).astype(np.int64)


@lru_cache(maxsize=32)
def tiles_layout(tiles: tuple[Tile, ...], photo_size: tuple[int, int]) -> TokenLayout:
    """The tiles' tokens as one TokenLayout over the photo ((width, height) pixels): tile by tile, each row-major, every
    token a "patch" whose box is its cell in the photo (it may reach outside where the processor padded). Maps are
    drawn through it (``TokenLayout.paint``), the same path as every other model's."""
    boxes = np.concatenate([tile.cells() for tile in tiles]).astype(np.float32)
    return TokenLayout(
        kinds=("patch",) * len(boxes),
        boxes=boxes,
        frames=np.zeros((len(boxes), 2), dtype=np.int64),
        image_size=(int(photo_size[1]), int(photo_size[0])),
    )


@dataclass(frozen=True)
class Frame:
    """A canvas of ``width`` x ``height`` pixels that shows the photo's ``box`` (a resize keeps the box; a crop or a
    pad moves it)."""

    width: float
    height: float
    box: Box

    @classmethod
    def photo(cls, width: int, height: int) -> Frame:
        return cls(width, height, (0.0, 0.0, float(width), float(height)))

    def resize(self, width: float, height: float) -> Frame:
        return Frame(width, height, self.box)

    def crop(self, left: float, top: float, width: float, height: float) -> Frame:
        """The canvas's window at (left, top) of width x height (negative or beyond the canvas where it pads)."""
        x0, y0, x1, y1 = self.box
        sx, sy = (x1 - x0) / self.width, (y1 - y0) / self.height
        return Frame(width, height, (x0 + left * sx, y0 + top * sy, x0 + (left + width) * sx, y0 + (top + height) * sy))

    def pad(self, left: float, top: float, right: float, bottom: float) -> Frame:
        return self.crop(-left, -top, self.width + left + right, self.height + top + bottom)

    def center_crop(self, width: int, height: int) -> Frame:
        """torchvision's centre crop (and centre pad, when the crop is bigger than the canvas)."""
        return self.crop(int((self.width - width) / 2.0), int((self.height - height) / 2.0), width, height)

    def pad_to_square(self) -> Frame:
        """LLaVA's pad to a square, the photo in the middle."""
        side = max(self.width, self.height)
        left, top = (side - self.width) // 2, (side - self.height) // 2
        return self.pad(left, top, side - self.width - left, side - self.height - top)

    def tile(self, grid: tuple[int, int], name: str = "image") -> Tile:
        return Tile(grid, self.box, name)


def shortest_edge_size(width: float, height: float, edge: int) -> tuple[int, int]:
    """(width, height) after a resize of the shorter side to ``edge`` (transformers' rounding: the longer side
    truncated)."""
    if width <= height:
        return edge, int(edge * height / width)
    return int(edge * width / height), edge


def setting(settings: Any, key: str, default: Any = None) -> Any:
    """A value of an image processor's size-like setting, a dict or an object with attributes."""
    if settings is None:
        return default
    if isinstance(settings, dict):
        return settings.get(key, default)
    return getattr(settings, key, default)


@dataclass(frozen=True)
class LayoutInputs:
    """What a layout reads: the processor's outputs for the prompt, the photo's (width, height), the model's config,
    the processor, and how many positions of the prompt hold the image token id."""

    inputs: dict[str, Any]
    photo_size: tuple[int, int]
    config: Any
    processor: Any
    slots: int


@dataclass(frozen=True)
class ImageLayout:
    """The tiles, each image token's (tile, row, col) in sequence order (row -1, col -1 for a token outside any grid,
    such as a kept [CLS]), and which of the image-token-id positions are image tokens (False: LLaVA-NeXT's
    image-newline tokens, which stand in the same positions)."""

    tiles: list[Tile]
    grid: np.ndarray  # (n_image_tokens, 3) int64
    is_image: np.ndarray  # (slots,) bool
