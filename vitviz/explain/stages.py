"""Rollout and relevance across attention windows and stages, for any model that returns its token layouts.

A plain ViT's blocks all attend over one set of tokens, each block's attention a (B, heads, T, T) matrix. A
hierarchical model (Swin) attends inside windows, shifted every other block, and merges tokens between stages, so
each block returns (B * nW, heads, S, S), one S x S matrix per window, and the tokens of stage s + 1 are fewer than
those of stage s. Both rules here read the model's per-block ``layouts`` (``output.layouts``, vitviz.layout):

- **Window attention, embedded.** A block's fused window attention is the dense (T, T) matrix over its stage's
  tokens that holds each window's weights at its tokens' places (``layout.windows``) and 0 across windows (Chefer's
  zero-padding, Transformer-MM-Explainability #4). Slots marked -1 (padding the model added to fill a window) are
  no token of the input: their columns are dropped.
- **Merging.** Where a block's tokens differ from the previous block's, each earlier token passes to the later token
  whose box holds its centre, and a merged token is the mean of the tokens it holds: the merge matrix M
  (T_next x T_prev) has M[j, i] = 1 / |{i' -> j}| for i -> j. Prefix tokens carry over one to one.
- **Rollout** (Abnar & Zuidema 2020, as ``attention_rollout``): R = N(A_L + I) ... M ... N(A_1 + I), where N makes
  every row sum to 1 (so 0.5 A + 0.5 I where a row's weights sum to 1; a row that gave weight to padded slots is
  renormalised over the real tokens and itself).
- **Relevance** (Chefer et al. 2021a, as ``gradient_weighted_attention``): R = (I + Ā_L) ... M ... (I + Ā_1), with
  Ā_l = mean_heads((dy/dA_l * A_l)+) taken per window, each block's gradient paired with that block's attention.
- **Gradient-weighted rollout** (as ``gradient_weighted_rollout``): the rollout's rule on Ā_l.
- ``start_layer`` (rollout): the blocks before it count as the identity; the merges between them still apply, so
  the map stays over the first block's patches.
- ``last_block_readout``: the last block's attention per head read out by the same row (what the index stores as
  ``readout``), carried back to the first block's patches by ``to_first_tokens``.

The map is the readout row of R: ``readout`` (B, T_last) weights over the last block's tokens, by default the mean
of its patch tokens (Swin's head pools by the mean). It is never formed as a matrix: the row is carried backwards
through the blocks as a (B, T) vector, v <- v N(A + I), so memory is that of the attentions themselves, and time a
few multiply-adds per attention weight. For a plain ViT both functions equal ``attention_rollout`` and
``gradient_weighted_attention`` with ``readout=output.readout``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vitviz.explain.common import HeadFusion, check_start_layer, fuse_heads
from vitviz.layout import TokenLayout, same_tokens

MERGE_BLOCK = 4096  # earlier tokens whose later token is looked up at once: a (4096, T_next) boolean table


def rollout_across_stages(
    attentions: Sequence[torch.Tensor],
    layouts: Sequence[TokenLayout],
    *,
    readout: torch.Tensor | None = None,
    head_fusion: HeadFusion = "mean",
    start_layer: int = 0,
) -> torch.Tensor:
    """Attention rollout over every block, windows and merges included (see the module's docstring).

    ``attentions[l]``: (B, heads, T_l, T_l) for a block that attends globally, (B * nW, heads, S, S) for a windowed
    one (``layouts[l].windows`` (nW, S)). ``readout``: (B, T_last) weights over the last block's tokens, or None for
    the mean of its patch tokens. ``start_layer``: the first block included. Returns the map over the first block's
    patch tokens, (B, rows, cols) where its layout is a grid of one frame, (B, frames, rows, cols) for several, else
    (B, N).
    """
    fused = [fuse_heads(attention, head_fusion) for attention in _checked(attentions, layouts)]
    check_start_layer(start_layer, len(fused))
    return _carried_back(fused, layouts, readout, renormalise=True, start_layer=start_layer)


def relevance_across_stages(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    layouts: Sequence[TokenLayout],
    *,
    readout: torch.Tensor | None = None,
) -> torch.Tensor:
    """Class-specific relevance (Chefer et al. 2021a) over every block, windows and merges included: ``gradients[l]``
    is the target's gradient with respect to ``attentions[l]``, of the same shape. Returns what
    ``rollout_across_stages`` returns."""
    return _carried_back(_weighted(attentions, gradients, layouts), layouts, readout, renormalise=False)


def gradient_rollout_across_stages(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    layouts: Sequence[TokenLayout],
    *,
    readout: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gradient-weighted rollout over every block, windows and merges included: each block's heads fused by
    mean_heads((dy/dA * A)+), then rolled out as in ``rollout_across_stages`` (rows renormalised with the identity).
    Returns what ``rollout_across_stages`` returns."""
    return _carried_back(_weighted(attentions, gradients, layouts), layouts, readout, renormalise=True)


def _weighted(
    attentions: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor], layouts: Sequence[TokenLayout]
) -> list[torch.Tensor]:
    """Per block mean_heads((dy/dA * A)+), each gradient checked against its own block's attention."""
    _checked(attentions, layouts)
    if len(gradients) != len(attentions):
        raise ValueError(f"{len(gradients)} gradients for {len(attentions)} attention blocks")
    weighted = []
    for index, (attention, gradient) in enumerate(zip(attentions, gradients, strict=True)):
        if gradient.shape != attention.shape:
            raise ValueError(
                f"gradients[{index}] has shape {tuple(gradient.shape)}; its attention {tuple(attention.shape)}"
            )
        weighted.append(torch.mul(gradient, attention).clamp_(min=0).mean(dim=1))  # one temporary, not two
    return weighted


def _checked(attentions: Sequence[torch.Tensor], layouts: Sequence[TokenLayout]) -> Sequence[torch.Tensor]:
    """One layout per block, and each block's attention of the shape its layout says."""
    if len(attentions) == 0:
        raise ValueError("attentions is empty: run the model with output_attentions=True")
    if len(layouts) != len(attentions):
        raise ValueError(f"{len(layouts)} layouts for {len(attentions)} attention blocks: give output.layouts")
    batch = None
    for index, (attention, layout) in enumerate(zip(attentions, layouts, strict=True)):
        windows = layout.windows
        size = len(layout) if windows is None else windows.shape[1]
        groups = 1 if windows is None else windows.shape[0]
        if attention.ndim != 4 or attention.shape[-2:] != (size, size) or attention.shape[0] % groups:
            if layout.grid_order is not None and layout.grid is not None and attention.shape[-1] != size:
                raise ValueError(
                    f"attentions[{index}] is per-frame (divided space-time) attention, {tuple(attention.shape)}, not "
                    f"one (T, T) matrix over the clip's {size} tokens: use vitviz.explain.video_rollout"
                )
            expected = f"(B, heads, {size}, {size})" if windows is None else f"(B * {groups}, heads, {size}, {size})"
            raise ValueError(f"attentions[{index}] has shape {tuple(attention.shape)}; its layout says {expected}")
        if batch is not None and attention.shape[0] // groups != batch:
            raise ValueError(f"attentions[{index}] holds {attention.shape[0] // groups} images, block 0 {batch}")
        batch = attention.shape[0] // groups
    return attentions


def _carried_back(
    fused: Sequence[torch.Tensor],
    layouts: Sequence[TokenLayout],
    readout: torch.Tensor | None,
    renormalise: bool,
    start_layer: int = 0,
) -> torch.Tensor:
    """The readout row of prod_l F(A_l) with the merges between, carried from the last block to the first:
    F(A) = N(A + I) when ``renormalise`` (rollout), I + A otherwise (relevance); the identity before
    ``start_layer``."""
    last = layouts[-1]
    batch = fused[-1].shape[0] // (1 if last.windows is None else last.windows.shape[0])
    row = _readout_row(readout, last, batch, fused[-1])
    for index in range(len(fused) - 1, -1, -1):
        matrix, layout = fused[index], layouts[index]
        if index >= start_layer:
            if renormalise:
                row = row / (1 + _row_sums(matrix, layout))
            row = row + _times(row, matrix, layout)
        if index > 0 and not same_tokens(layouts[index - 1], layout):
            row = _merged_back(row, layout, layouts[index - 1])
    values = row[:, layouts[0].patch_indices]
    first = layouts[0]
    if first.grid is None:
        return values
    if first.grid_order is not None:  # patch tokens not listed frame by frame, row-major (TimeSformer's order)
        values = values[:, torch.as_tensor(first.grid_order, device=values.device)]
    view = values.reshape(batch, *first.grid)
    return view[:, 0] if first.grid[0] == 1 else view


def _readout_row(readout: torch.Tensor | None, layout: TokenLayout, batch: int, like: torch.Tensor) -> torch.Tensor:
    """(B, T_last): the given weights, checked, or the mean of the last block's patch tokens."""
    if readout is not None:
        if readout.shape != (batch, len(layout)):
            raise ValueError(
                f"readout must be (B, T) = ({batch}, {len(layout)}) for the last block; got {readout.shape}"
            )
        return readout.to(like.dtype)
    row = like.new_zeros(batch, len(layout))
    patches = torch.as_tensor(layout.patch_indices, device=like.device)
    row[:, patches] = 1 / len(patches)
    return row


def _windows(layout: TokenLayout, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A windowed layout's token indices (nW, S) with padded slots pointed at token 0, and the mask of real ones."""
    windows = torch.tensor(layout.windows, device=device, dtype=torch.long)  # a copy: the layout's is read-only
    real = windows >= 0
    return windows.clamp(min=0), real


def _row_sums(matrix: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """(B, T): each token's row sum of the embedded attention (the weights it gives real tokens)."""
    if layout.windows is None:
        return matrix.sum(dim=-1)
    windows, real = _windows(layout, matrix.device)
    groups, size = windows.shape
    blocks = matrix.reshape(-1, groups, size, size)  # (B, nW, S, S)
    sums = (blocks * real[None, :, None, :]).sum(dim=-1)  # (B, nW, S): padded columns dropped
    out = matrix.new_zeros(blocks.shape[0], len(layout))
    # a real token appears in exactly one window slot; padded slots add nothing
    return out.index_add_(1, windows.reshape(-1), (sums * real).reshape(blocks.shape[0], -1))


def _times(row: torch.Tensor, matrix: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """(B, T) row times the embedded (T, T) attention of each image: row @ A_dense."""
    if layout.windows is None:
        return (row[:, None, :] @ matrix)[:, 0]
    windows, real = _windows(layout, matrix.device)
    groups, size = windows.shape
    blocks = matrix.reshape(-1, groups, size, size)  # (B, nW, S, S)
    gathered = row[:, windows] * real  # (B, nW, S): the row at each window's queries, 0 at padded slots
    product = (gathered[:, :, None, :] @ blocks)[:, :, 0] * real  # (B, nW, S) at each window's keys
    return row.new_zeros(row.shape).index_add_(1, windows.reshape(-1), product.reshape(row.shape[0], -1))


def merge_targets(later: TokenLayout, earlier: TokenLayout) -> np.ndarray:
    """int64 (T_earlier,): for each earlier token, the later token it merges into: the one whose box and frames hold
    the centre of its box; prefix tokens carry over one to one. A token that no later token holds is an error."""
    prefix = earlier.num_prefix_tokens
    if later.kinds[: later.num_prefix_tokens] != earlier.kinds[:prefix]:
        raise ValueError("layouts with different prefix tokens cannot be merged: one block's tokens are not the next's")
    targets = np.full(len(earlier), -1, dtype=np.int64)
    targets[:prefix] = np.arange(prefix)
    patches = earlier.patch_indices
    centres = (earlier.boxes[patches, :2] + earlier.boxes[patches, 2:]) / 2  # (N, 2) x, y
    frames = earlier.frames[patches, 0]
    later_patches = later.patch_indices
    holders = _grid_holders(later, centres, frames)
    if holders is None:  # no regular grid: test every later box, MERGE_BLOCK earlier tokens at a time
        holders = np.empty(len(patches), dtype=np.int64)
        boxes, spans = later.boxes[later_patches], later.frames[later_patches]
        for start in range(0, len(patches), MERGE_BLOCK):
            x, y = centres[start : start + MERGE_BLOCK, :1], centres[start : start + MERGE_BLOCK, 1:]
            frame = frames[start : start + MERGE_BLOCK, None]
            holds = (boxes[:, 0] <= x) & (x < boxes[:, 2]) & (boxes[:, 1] <= y) & (y < boxes[:, 3])
            holds &= (spans[:, 0] <= frame) & (frame <= spans[:, 1])  # (chunk, N_later)
            holders[start : start + MERGE_BLOCK] = np.where(holds.any(axis=1), holds.argmax(axis=1), -1)
    if (holders < 0).any():
        orphan = patches[int(np.flatnonzero(holders < 0)[0])]
        raise ValueError(f"token {orphan} of one block lies in no token of the next: the layouts do not nest")
    targets[patches] = later_patches[holders]
    return targets


def _grid_holders(later: TokenLayout, centres: np.ndarray, frames: np.ndarray) -> np.ndarray | None:
    """Where ``later``'s patch boxes are a grid (each the product of its column's x-span, its row's y-span and its
    frame span, the spans sorted and disjoint), the index among its patches of the one holding each (x, y) centre
    and frame, -1 for none, by binary search along each axis; None for any other layout. For Swin-B at 384 px this
    takes a millisecond where testing every later box (a 9,216 x 2,304 table) took 90."""
    if later.grid is None:
        return None
    depth, rows, cols = later.grid
    patches = later.patch_indices
    boxes, spans = later.boxes[patches], later.frames[patches]
    xs, ys = boxes[:cols, 0::2], boxes[: rows * cols : cols, 1::2]  # (cols, 2) x0, x1; (rows, 2) y0, y1
    ts = spans[:: rows * cols] + [0, 1]  # (frames, 2): half-open frame spans
    f, r, c = (axis.ravel() for axis in np.indices((depth, rows, cols)))
    grid = np.stack([xs[c, 0], ys[r, 0], xs[c, 1], ys[r, 1]], axis=1)
    spans_grid = ts[f] - [0, 1]
    if not (np.array_equal(boxes, grid) and np.array_equal(spans, spans_grid)):
        return None
    if not all((e[:, 0] < e[:, 1]).all() and (e[1:, 0] >= e[:-1, 1]).all() for e in (xs, ys, ts)):
        return None
    column, row, frame = _span_index(xs, centres[:, 0]), _span_index(ys, centres[:, 1]), _span_index(ts, frames)
    return np.where((column >= 0) & (row >= 0) & (frame >= 0), (frame * rows + row) * cols + column, -1)


def _span_index(spans: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For sorted, disjoint half-open spans (n, 2), the span holding each value, -1 for none."""
    index = np.searchsorted(spans[:, 0], values, side="right") - 1
    inside = (index >= 0) & (values < spans[np.maximum(index, 0), 1])
    return np.where(inside, index, -1)


def _merged_back(row: torch.Tensor, later: TokenLayout, earlier: TokenLayout) -> torch.Tensor:
    """row @ M: each earlier token gets its later token's value over the number of tokens merged into it."""
    targets = torch.as_tensor(merge_targets(later, earlier), device=row.device)
    counts = torch.bincount(targets, minlength=len(later)).to(row.dtype)
    return row[:, targets] / counts[targets]


def last_block_readout(
    attention: torch.Tensor, layouts: Sequence[TokenLayout], readout: torch.Tensor | None = None
) -> torch.Tensor:
    """What the tokens the head reads attend to in the last block, per head, drawn on the first block's patches:
    (B, heads, rows, cols) (or (B, heads, N) where the first layout is no grid of one frame). ``attention`` is the
    last block's (B * nW, heads, S, S) or (B, heads, T, T); ``readout`` (B, T_last) as in ``rollout_across_stages``
    (None: the mean of the last block's patch tokens, Swin's pooling). Each head's row ``readout @ A`` over the last
    block's tokens (padded slots dropped) is carried back through the merges as the rollout's is: a first-block
    patch gets its merged token's value over the number of patches that token holds, so each map keeps its sum."""
    last = layouts[-1]
    _checked([attention], [last])
    groups = 1 if last.windows is None else last.windows.shape[0]
    batch, heads = attention.shape[0] // groups, attention.shape[1]
    row = _readout_row(readout, last, batch, attention)  # (B, T_last)
    # each head as an image of its own: (B * heads) rows through that head's attention
    per_head = attention.reshape(batch, groups, heads, *attention.shape[-2:]).transpose(1, 2)
    per_head = per_head.reshape(batch * heads * groups, *attention.shape[-2:])
    values = _times(row.repeat_interleave(heads, dim=0), per_head, last)  # (B * heads, T_last)
    return to_first_tokens(values, layouts).reshape(batch, heads, *_first_shape(layouts[0]))


def to_first_tokens(values: torch.Tensor, layouts: Sequence[TokenLayout]) -> torch.Tensor:
    """(n, T_last) values over the last block's tokens -> (n, N_first) over the first block's patch tokens, carried
    back through every merge between the blocks' layouts as the rollout's row is (each earlier token its later
    token's value over the number of earlier tokens merged into it)."""
    for index in range(len(layouts) - 1, 0, -1):
        if not same_tokens(layouts[index - 1], layouts[index]):
            values = _merged_back(values, layouts[index], layouts[index - 1])
    return values[:, layouts[0].patch_indices]


def first_patch_holders(layouts: Sequence[TokenLayout]) -> np.ndarray:
    """int64 (N_first,): for each patch token of the first block, the last block's token that holds it after every
    merge (``merge_targets`` chained): where a value over the last block's tokens is copied to draw it over the
    first block's patches."""
    holders = np.arange(len(layouts[0]))
    for earlier, later in zip(layouts[:-1], layouts[1:], strict=True):
        if not same_tokens(earlier, later):
            holders = merge_targets(later, earlier)[holders]
    return holders[layouts[0].patch_indices]


def _first_shape(first: TokenLayout) -> tuple[int, ...]:
    """The map shape over the first block's patches: (rows, cols) for one frame's grid, else (frames, rows, cols)
    or (N,)."""
    if first.grid is None:
        return (len(first.patch_indices),)
    return first.grid[1:] if first.grid[0] == 1 else first.grid
