"""TokenLayout: what each token of a model's input is, and which pixels and frames it covers.

A map is one value per token; to draw it, vitviz needs each token's place in the input. The layout says it for
every token at once, from the model's config and the input's shape (never guessed from a token count):

    kinds    one string per token: "cls", "distillation", "register", "patch"
    boxes    float32 (T, 4): x0, y0, x1, y1 of the token's pixels in the input, half-open pixel edges (a patch at
             row r, column c of a ViT with patch size p covers [c p, (c + 1) p) x [r p, (r + 1) p)); NaN for
             tokens with no pixels of their own (the prefix tokens)
    frames   int64 (T, 2): the first and last input frame the token covers; (0, 0) for an image
    windows  int64 (nW, w*w): the token indices of each attention window, in the order the block's attention
             lists them, -1 for a padded slot; None for a block that attends globally
    grid     (frames, rows, cols) of the patch tokens when they form a grid; None otherwise
    grid_order  int64 (N,) or None: where the patch tokens are not listed frame by frame, row-major (TimeSformer lists
             them patch by patch, each patch's frames together: token 1 + n * frames + t), the position among the
             patch tokens (``patch_indices``) of the token in each grid cell, cells listed frame by frame, row-major;
             None where the tokens are listed in that order already

``paint`` draws any per-token vector over the input's pixels (tokens whose boxes overlap are averaged, pixels no
token covers are NaN); ``grid_view`` reshapes it to (frames, rows, cols) where the layout is a grid, through
``grid_order``: per-patch values are never to be reshaped by ``grid`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

PREFIX_KINDS = ("cls", "distillation", "register")
MAX_SIDE = 16384  # pixels a side of a painted map


@dataclass(frozen=True, eq=False)
class TokenLayout:
    """The tokens of one input, in the order the model's blocks see them (see the module's docstring)."""

    kinds: tuple[str, ...]
    boxes: np.ndarray  # float32 (T, 4)
    frames: np.ndarray  # int64 (T, 2)
    image_size: tuple[int, int]  # (height, width) of the input in pixels
    num_frames: int = 1
    grid: tuple[int, int, int] | None = None
    windows: np.ndarray | None = None
    grid_order: np.ndarray | None = None  # int64 (N,), see the module's docstring

    def __post_init__(self):
        count = len(self.kinds)
        if self.boxes.shape != (count, 4) or self.frames.shape != (count, 2):
            raise ValueError(
                f"a layout of {count} tokens needs boxes (T, 4) and frames (T, 2); "
                f"got {self.boxes.shape} and {self.frames.shape}"
            )
        if self.grid is not None and int(np.prod(self.grid)) != len(self.patch_indices):
            raise ValueError(f"a grid of {self.grid} does not hold the layout's {len(self.patch_indices)} patch tokens")
        if self.grid_order is not None and (
            self.grid is None or not np.array_equal(np.sort(self.grid_order), np.arange(len(self.patch_indices)))
        ):
            raise ValueError("grid_order must list every patch token once, in a layout with a grid")

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def num_tokens(self) -> int:
        return len(self.kinds)

    @property
    def patch_indices(self) -> np.ndarray:
        """int64 (N,): the tokens that cover pixels (every token not a prefix token), in sequence order."""
        return np.flatnonzero(~np.isnan(self.boxes[:, 0]))

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the first patch token ([CLS], distillation, registers)."""
        patches = self.patch_indices
        return int(patches[0]) if len(patches) else len(self.kinds)

    def grid_view(self, values: np.ndarray) -> np.ndarray:
        """Per-token values (..., T), or per-patch values (..., N), as (..., frames, rows, cols), whatever order the
        model lists its patch tokens in (``grid_order``)."""
        if self.grid is None:
            raise ValueError("this layout's tokens do not form a grid; draw them with paint()")
        values = np.asarray(values)
        if values.shape[-1] == self.num_tokens:
            values = values[..., self.patch_indices]
        elif values.shape[-1] != len(self.patch_indices):
            raise ValueError(
                f"values need one entry per token ({self.num_tokens}) or per patch token "
                f"({len(self.patch_indices)}); got {values.shape[-1]}"
            )
        if self.grid_order is not None:
            values = values[..., self.grid_order]
        return values.reshape(*values.shape[:-1], *self.grid)

    def paint(self, values: np.ndarray, frame: int = 0, shape: tuple[int, int] | None = None) -> np.ndarray:
        """float32 (height, width): each pixel of input frame ``frame`` gets the mean value of the tokens whose boxes
        and frames hold its centre; NaN where no token does (or every such value is NaN). ``values`` has one entry
        per token (T) or per patch token (N). ``shape`` (height, width) draws at another size than the input's own
        (the boxes scaled), e.g. a photo's: pixel (y, x)'s centre is ((x + 0.5) / sx, (y + 0.5) / sy) in the input."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"paint takes one value per token, a 1-D array; got shape {values.shape}")
        patches = self.patch_indices
        if len(values) == self.num_tokens:
            values = values[patches]
        elif len(values) != len(patches):
            raise ValueError(
                f"values need one entry per token ({self.num_tokens}) or per patch token ({len(patches)}); "
                f"got {len(values)}"
            )
        if not 0 <= frame < self.num_frames:
            raise ValueError(f"frame must be from 0 to {self.num_frames - 1}; got {frame}")
        height, width = shape or self.image_size
        if not (0 < height <= MAX_SIDE and 0 < width <= MAX_SIDE):
            raise ValueError(f"a painted map is 1 to {MAX_SIDE} pixels a side; got {height} x {width}")
        scale = np.array([width / self.image_size[1], height / self.image_size[0]] * 2)
        drawn = (self.frames[patches, 0] <= frame) & (frame <= self.frames[patches, 1]) & ~np.isnan(values)
        # the pixels whose centres lie in [edge0, edge1) are ceil(edge0 * s - 0.5) to ceil(edge1 * s - 0.5) - 1
        edges = np.ceil(self.boxes[patches][drawn].astype(np.float64) * scale - 0.5).astype(np.int64)
        edges = np.clip(edges, 0, [width, height, width, height])
        total = np.zeros((height + 1, width + 1))
        count = np.zeros((height + 1, width + 1))
        # each box adds its value to the corners of a difference array; the 2-D cumulative sum spreads it inside
        for (x0, y0, x1, y1), value in zip(edges, values[drawn], strict=True):
            if x1 > x0 and y1 > y0:
                for y, x, sign in ((y0, x0, 1), (y0, x1, -1), (y1, x0, -1), (y1, x1, 1)):
                    total[y, x] += sign * value
                    count[y, x] += sign
        total = total.cumsum(0).cumsum(1)[:height, :width]
        count = np.rint(count.cumsum(0).cumsum(1)[:height, :width])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)


def prefix_kinds(class_token: bool, distillation_token: bool, num_register_tokens: int) -> tuple[str, ...]:
    """The prefix tokens of a ViT in its order: [CLS], the distillation token, then the registers."""
    return ("cls",) * class_token + ("distillation",) * distillation_token + ("register",) * num_register_tokens


@lru_cache(maxsize=64)
def grid_layout(
    prefix: tuple[str, ...],
    grid_size: tuple[int, int],
    patch_size: int | tuple[int, int],
    num_frames: int = 1,
    tubelet: int = 1,
    patch_major: bool = False,
) -> TokenLayout:
    """The layout of a plain ViT: ``prefix`` tokens (kinds from PREFIX_KINDS), then the patches of a (rows, cols)
    grid in row-major order, each ``patch_size`` pixels (one int, or (height, width)) square, on ``num_frames`` equal
    frames (one image: 1), listed frame by frame. A video ViT's tokens each cover ``tubelet`` consecutive frames
    (VideoMAE, ViViT: 2), so its grid is (num_frames / tubelet, rows, cols) and token (t, r, c) spans frames
    t tubelet to (t + 1) tubelet - 1. ``patch_major`` lists them patch by patch instead, each patch's frames together
    (TimeSformer: token (t, r, c) is prefix + (r cols + c) frames + t), with the ``grid_order`` that ``grid_view``
    reads them back by. Cached: a model sees one input size many times, and the layout is immutable."""
    if unknown := set(prefix) - set(PREFIX_KINDS):
        raise ValueError(f"prefix tokens are {', '.join(PREFIX_KINDS)}; got {sorted(unknown)}")
    rows, cols = grid_size
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    if min(rows, cols, ph, pw, num_frames, tubelet) < 1:
        raise ValueError(
            f"a grid needs positive sizes; got {grid_size} patches of {patch_size} px, {num_frames} frames"
            + (f" in tubelets of {tubelet}" if tubelet != 1 else "")
        )
    if num_frames % tubelet:
        raise ValueError(f"{num_frames} frames do not split into tubelets of {tubelet} frames")
    groups = num_frames // tubelet
    r, c = np.divmod(np.arange(rows * cols), cols)
    patch_boxes = np.stack([c * pw, r * ph, (c + 1) * pw, (r + 1) * ph], axis=1).astype(np.float32)
    starts = np.arange(groups) * tubelet  # each group's first frame
    if patch_major:  # patch n of group t is token n * groups + t
        patch_boxes, first = np.repeat(patch_boxes, groups, axis=0), np.tile(starts, rows * cols)
        order = (np.arange(rows * cols)[None] * groups + np.arange(groups)[:, None]).ravel()
    else:  # patch n of group t is token t * rows * cols + n
        patch_boxes, first, order = np.tile(patch_boxes, (groups, 1)), np.repeat(starts, rows * cols), None
    boxes = np.concatenate([np.full((len(prefix), 4), np.nan, np.float32), patch_boxes])
    frames = np.concatenate([np.zeros((len(prefix), 2), np.int64), np.stack([first, first + tubelet - 1], axis=1)])
    for array in (boxes, frames, order):
        if array is not None:
            array.flags.writeable = False  # shared through the cache
    return TokenLayout(
        kinds=prefix + ("patch",) * (rows * cols * groups),
        boxes=boxes,
        frames=frames,
        image_size=(rows * ph, cols * pw),
        num_frames=num_frames,
        grid=(groups, rows, cols),
        grid_order=order,
    )
