"""Maps and statistics read from an ``Answer``'s recorded attention: one token's map per tile, the same drawn over the
photo's pixels, and the image share per answer token and layer.

- ``token_map(answer, token, layers, head)``: the attention of an answer token (or the mean over all of them), for a
  layer range and a head (or the heads' mean), on each tile's token grid: one (rows, cols) float32 array per tile.
- ``tile_maps(answer, values)``: any per-image-token values (attention, relevance, the logit lens's words) laid
  into each tile's grid; tokens outside every grid (a kept [CLS]) are left out.
- ``photo_map(tiles, maps, photo_size, size, tile)``: the tiles' grids drawn into their boxes on the photo. A pixel
  takes the value of the grid cell its centre falls in; where tiles overlap (LLaVA-NeXT's base image and any-res
  tiles, Idefics3's global image and splits) it takes the mean over the tiles that cover it, or with ``tile=k`` the
  value of tile k alone. Pixels no chosen tile covers (cropped away) are NaN.
- ``image_shares(answer, head)``: per answer token and layer, the attention's shares on the image tokens, on the
  text tokens and on the first token (the attention sink), from the shares the Answer recorded.

Selections are checked here, once, for every module of vitviz.vlm: ``answer_token``, ``layer_range``, ``head_index``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vitviz.explain.target import Target
from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.tiles import Tile, tiles_layout


def _is_index(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def answer_token(answer: Answer, token: int | Target | None) -> int | None:
    """``token`` checked as an answer token's index (None: all of them); ``vitviz.Target.answer_token(i)`` is token
    ``i``, and a Target of another kind is refused in one line."""
    count = len(answer.token_ids)
    if token is None:
        return None
    if isinstance(token, Target):
        if token.kind != "answer_token":
            raise VLMError(f"a VLM's maps explain an answer token (Target.answer_token); got {token.describe()}")
        token = token.index
    if not _is_index(token) or not 0 <= token < count:
        raise VLMError(f"token must be an answer token's index, 0 to {count - 1} (or None: all); got {token!r}")
    return int(token)


def layer_range(layers: int | tuple[int, int] | None, count: int) -> tuple[int, int]:
    """(first, last) layers, both included, from one layer, a (first, last) pair or None (every layer); negative
    indices count from the end, as in Python."""
    pair = (0, count - 1) if layers is None else (layers, layers) if _is_index(layers) else layers
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(_is_index(v) for v in pair):
        raise VLMError(f"layers must be a layer, a (first, last) pair of layers or None; got {layers!r}")
    first, last = (int(v) + count if v < 0 else int(v) for v in pair)
    if not (0 <= first <= last < count):
        raise VLMError(f"layers {layers!r} are not a range of the model's {count} layers (0 to {count - 1})")
    return first, last


def head_index(head: int | None, count: int) -> int | None:
    """``head`` checked as one of ``count`` heads (None: the heads' mean)."""
    if head is not None and (not _is_index(head) or not 0 <= head < count):
        raise VLMError(f"head must be one of the {count} heads, 0 to {count - 1} (or None: their mean); got {head!r}")
    return None if head is None else int(head)


def token_attention(
    answer: Answer, token: int | None = None, layers: int | tuple[int, int] | None = None, head: int | None = None
) -> np.ndarray:
    """float32 (N,): the attention on each image token of answer token ``token`` (None: the mean over the answer's
    tokens), averaged over ``layers`` (first, last, both included; None: all) and over the heads (or ``head``)."""
    weights = answer.image_attention  # (n, L, H, N)
    token = answer_token(answer, token)
    first, last = layer_range(layers, weights.shape[1])
    head = head_index(head, weights.shape[2])
    chosen = weights if token is None else weights[token : token + 1]
    chosen = chosen[:, first : last + 1]
    chosen = chosen if head is None else chosen[:, :, head : head + 1]
    return chosen.mean(axis=(0, 1, 2), dtype=np.float64).astype(np.float32)


def tile_maps(answer: Answer, values: np.ndarray, fill: object = np.nan) -> list[np.ndarray]:
    """Per tile, a (rows, cols) array of ``values`` (one per image token, in sequence order) at each token's place
    in the tile's grid; cells no token fills hold ``fill``. The arrays take ``values``' dtype (float32 maps, the
    lens's strings ...)."""
    values = np.asarray(values)
    grid = answer.image_token_grid
    if values.shape[:1] != (len(grid),):
        raise VLMError(f"values must hold one entry per image token ({len(grid)}); got shape {values.shape}")
    maps = []
    for index, tile in enumerate(answer.tiles):
        mine = (grid[:, 0] == index) & (grid[:, 1] >= 0)
        cells = np.full(tile.grid + values.shape[1:], fill, dtype=values.dtype)
        cells[grid[mine, 1], grid[mine, 2]] = values[mine]
        maps.append(cells)
    return maps


def token_map(
    answer: Answer, token: int | None = None, layers: int | tuple[int, int] | None = None, head: int | None = None
) -> list[np.ndarray]:
    """One token's map: ``token_attention`` laid into each tile's grid, a (rows, cols) float32 array per tile."""
    return tile_maps(answer, token_attention(answer, token, layers, head))


def photo_map(
    tiles: list[Tile],
    maps: list[np.ndarray],
    photo_size: tuple[int, int],
    size: tuple[int, int] | None = None,
    tile: int | None = None,
) -> np.ndarray:
    """The tiles' maps drawn over the photo: float32 (height, width) for ``size`` = (width, height) (the photo's
    own size by default; another size scales the boxes). Overlapping tiles give the mean of those that cover a
    pixel; ``tile=k`` draws tile k alone. Pixels no drawn tile covers are NaN."""
    if len(maps) != len(tiles):
        raise VLMError(f"there are {len(tiles)} tiles but {len(maps)} maps")
    if tile is not None and (not _is_index(tile) or not 0 <= tile < len(tiles)):
        raise VLMError(
            f"tile must be one of the {len(tiles)} tiles, 0 to {len(tiles) - 1} (or None: all); got {tile!r}"
        )
    width, height = size or photo_size
    if not (_is_index(width) and _is_index(height) and 0 < width <= 16384 and 0 < height <= 16384):
        raise VLMError(f"a map's size must be (width, height), each 1 to 16384 pixels; got {size!r}")
    drawn = []
    for index, (piece, values) in enumerate(zip(tiles, maps, strict=True)):
        values = np.asarray(values, dtype=np.float64)
        if values.shape != piece.grid:
            raise VLMError(f"tile {index}'s map is {values.shape}, not its token grid {piece.grid}")
        drawn.append(values.ravel() if tile is None or index == tile else np.full(piece.count, np.nan))
    layout = tiles_layout(tuple(tiles), tuple(photo_size))
    return layout.paint(np.concatenate(drawn), shape=(int(height), int(width)))


def answer_photo_map(
    answer: Answer,
    token: int | None = None,
    layers: int | tuple[int, int] | None = None,
    head: int | None = None,
    size: tuple[int, int] | None = None,
    tile: int | None = None,
) -> np.ndarray:
    """``token_map`` drawn over the photo (see ``photo_map``): float32 (height, width)."""
    return photo_map(answer.tiles, token_map(answer, token, layers, head), answer.photo_size, size, tile)


@dataclass(frozen=True)
class ImageShares:
    """Per answer token and layer, float32 (n, L): the share of the attention on the image tokens, on the text
    tokens other than the first, and on the first token of the sequence (the attention sink); they sum to 1."""

    image: np.ndarray
    text: np.ndarray
    first: np.ndarray


def image_shares(answer: Answer, head: int | None = None) -> ImageShares:
    """The Answer's recorded shares for ``head`` (None: the heads' mean), per answer token and layer."""
    head = head_index(head, answer.image_share.shape[2])
    parts = (answer.image_share, answer.text_share, answer.first_share)
    chosen = [part.mean(axis=2) if head is None else part[:, :, head] for part in parts]
    return ImageShares(*(part.astype(np.float32) for part in chosen))
