"""Layouts of the families that cut a photo into several tiles: LLaVA-NeXT and LLaVA-OneVision (a base image and
any-res crops, unpadded, with image-newline tokens) and Idefics3 / SmolVLM (split tiles and a global image, pixel
shuffled). The registry in layouts.py names them; each follows the processor's own arithmetic, from its settings.
"""

from __future__ import annotations

import math

import numpy as np

from vitviz.vlm.errors import VLMError
from vitviz.vlm.tiles import Frame, ImageLayout, LayoutInputs, Tile, setting


def _unpadded(rows: int, cols: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(first row, last row + 1, first col, last col + 1) of the feature grid of rows x cols that the model keeps
    for a photo of height x width: transformers' ``unpad_image``, which drops the grid's padded border."""
    if width / height > cols / rows:
        kept = int(round(height * (cols / width), 7))
        pad = (rows - kept) // 2
        return pad, rows - pad, 0, cols
    kept = int(round(width * (rows / height), 7))
    pad = (cols - kept) // 2
    return 0, rows, pad, cols - pad


def anyres_layout(x: LayoutInputs, max_patches: int | None = None) -> ImageLayout:
    """LLaVA-NeXT (``max_patches`` None) and LLaVA-OneVision ("anyres_max_<n>"): the base image (the photo squashed
    to a square) as one tile, then the any-res canvas (the photo resized to fit the best grid of crops, padded
    around) cut into crops, read as one feature grid without its padded border, row by row, each row followed by
    an image-newline token (not an image token). OneVision shrinks a grid of more than ``max_patches`` crops'
    worth of features by interpolation: then the whole grid is one tile."""
    from transformers.image_processing_utils import select_best_resolution

    processor = x.processor.image_processor
    vision = x.config.vision_config
    side = vision.image_size // vision.patch_size  # features per crop side
    width, height = x.photo_size
    crop = setting(processor.crop_size, "height") or setting(processor.size, "height")
    crop = crop or setting(processor.size, "shortest_edge")
    best_h, best_w = select_best_resolution((height, width), x.config.image_grid_pinpoints)
    scale_w, scale_h = best_w / width, best_h / height
    if scale_w < scale_h:
        new_w, new_h = best_w, min(math.ceil(height * scale_w), best_h)
    else:
        new_w, new_h = min(math.ceil(width * scale_h), best_w), best_h
    left, top = (best_w - new_w) // 2, (best_h - new_h) // 2
    canvas = Frame.photo(width, height).resize(new_w, new_h).pad(left, top, best_w - new_w - left, best_h - new_h - top)
    crops_h, crops_w = best_h // crop, best_w // crop
    base = Frame.photo(width, height).tile((side, side), "base")
    row0, row1, col0, col1 = _unpadded(crops_h * side, crops_w * side, height, width)
    pixels = crop / side  # canvas pixels per feature
    tiles, cells = [base], [base.token_grid(0)]
    rows, cols = row1 - row0, col1 - col0
    ratio = math.sqrt(rows * cols / (max_patches * side**2)) if max_patches else 0.0
    if ratio > 1.1:  # OneVision's interpolation: the kept grid shrunk as a whole
        box = canvas.crop(col0 * pixels, row0 * pixels, cols * pixels, rows * pixels)
        tiles.append(box.tile((int(rows // ratio), int(cols // ratio)), "any-res (downsampled)"))
        grid_rows, grid_cols = tiles[-1].grid
        order = tiles[-1].token_grid(1).reshape(grid_rows, grid_cols, 3)
    else:
        grid_rows, grid_cols = rows, cols
        order = np.zeros((rows, cols, 3), dtype=np.int64)
        for i in range(crops_h):
            for j in range(crops_w):
                r0, r1 = max(i * side, row0), min((i + 1) * side, row1)
                c0, c1 = max(j * side, col0), min((j + 1) * side, col1)
                if r1 <= r0 or c1 <= c0:
                    continue  # a crop wholly in the padding
                box = canvas.crop(c0 * pixels, r0 * pixels, (c1 - c0) * pixels, (r1 - r0) * pixels)
                tile = box.tile((r1 - r0, c1 - c0), f"crop {i + 1},{j + 1}")
                block = tile.token_grid(len(tiles)).reshape(r1 - r0, c1 - c0, 3)
                order[r0 - row0 : r1 - row0, c0 - col0 : c1 - col0] = block
                tiles.append(tile)
    cells.append(order.reshape(-1, 3))
    is_image = np.concatenate([np.ones(base.count, bool), np.tile(np.r_[np.ones(grid_cols, bool), False], grid_rows)])
    if len(is_image) != x.slots:
        raise VLMError(
            f"the any-res layout expects {len(is_image)} image and image-newline tokens but the prompt holds "
            f"{x.slots}: the processor and the model's config disagree"
        )
    return ImageLayout(tiles, np.concatenate(cells), is_image)


def onevision_layout(x: LayoutInputs) -> ImageLayout:
    aspect = str(getattr(x.config, "vision_aspect_ratio", "anyres_max_9"))
    return anyres_layout(x, int(aspect.removeprefix("anyres_max_")))


def _longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """Idefics3's first resize: the longer side to ``longest``, the other kept in proportion and made even, then
    both kept under 4,096 pixels (transformers' arithmetic, which this must match to count the tiles)."""
    if width >= height:
        height, width = int(longest / (width / height)), longest
        height += height % 2
    else:
        height, width = longest, int(longest * (width / height))
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(height, width) > 4096:
        aspect = width / height
        height, width = (int(4096 / aspect), 4096) if width >= height else (4096, int(4096 * aspect))
    return max(height, 1), max(width, 1)


def split_layout(x: LayoutInputs) -> ImageLayout:
    """Idefics3 and SmolVLM: the photo resized to a multiple of the tile size and split into rows x cols tiles
    (row by row), then the global image (the whole photo squashed to one tile); each tile's patch grid pixel-shuffled
    by ``scale_factor`` into a smaller grid, row-major. A photo that fits one tile is the global image alone."""
    processor = x.processor.image_processor
    frames = x.inputs["pixel_values"].shape[1]
    size = x.inputs["pixel_values"].shape[-1]
    side = size // x.config.vision_config.patch_size // x.config.scale_factor
    width, height = x.photo_size
    rows = cols = 0
    if getattr(processor, "do_image_splitting", True) and frames > 1:
        tile = setting(processor.max_image_size, "longest_edge")
        longest = setting(processor.size, "longest_edge")
        if getattr(processor, "do_resize", True) and longest:
            height, width = _longest_edge_size(height, width, int(longest))
        if width >= height:
            cols = math.ceil(width / tile)
            rows = math.ceil(int(cols * tile / (width / height)) / tile)
        else:
            rows = math.ceil(height / tile)
            cols = math.ceil(int(rows * tile * (width / height)) / tile)
        width, height = x.photo_size
    if rows * cols + 1 != frames:
        raise VLMError(f"the split layout expects {rows * cols + 1} tiles but the processor made {frames}")
    tiles = [
        Tile(
            (side, side),
            (j * width / cols, i * height / rows, (j + 1) * width / cols, (i + 1) * height / rows),
            f"tile {i + 1},{j + 1}",
        )
        for i in range(rows)
        for j in range(cols)
    ]
    tiles.append(Frame.photo(width, height).tile((side, side), "global"))
    count = sum(t.count for t in tiles)
    if count != x.slots:
        raise VLMError(f"the split layout expects {count} image tokens but the prompt holds {x.slots}")
    grid = np.concatenate([tile.token_grid(index) for index, tile in enumerate(tiles)])
    return ImageLayout(tiles, grid, np.ones(x.slots, dtype=bool))
