"""Windows for Swin's attention: the grid cut into windows (after the cyclic shift and padding), put back, the
shift's attention mask, the relative positions inside a window (and the log-spaced offsets Swin v2's position
MLPs read), and which token sits in each window's slot.

One pair of functions moves features into windows and back (``to_windows`` / ``from_windows``); the token layout
runs the very same ``to_windows`` on a grid of token indices, so a window's slot always names the token whose
features the attention saw there. ``window_cells`` gives each slot the grid cell it is drawn at, padded slots past
the grid's edge.

Padding: a grid that is not a multiple of the window gets zero tokens on its bottom and right. transformers pads
before the shift, so the padding wraps round into the top-left windows of a shifted block; timm shifts first and
pads after, so the padding stays at the bottom and right. Both compute the shift's mask on the padded grid.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

Padding = Literal["huggingface", "timm"]
PADDINGS = ("huggingface", "timm")
Pair = tuple[int, int]


def padded_size(grid: Pair, window: Pair) -> Pair:
    """The grid (rows, cols) rounded up to a whole number of windows."""
    return (math.ceil(grid[0] / window[0]) * window[0], math.ceil(grid[1] / window[1]) * window[1])


def partition(x: torch.Tensor, window: Pair) -> torch.Tensor:
    """(B, H, W, C), H and W multiples of the window -> (B * nW, wh * ww, C), windows row-major, batch outermost."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C).permute(0, 1, 3, 2, 4, 5)  # (B, nWh, nWw, wh, ww, C)
    return x.reshape(B * (H // wh) * (W // ww), wh * ww, C)


def unpartition(windows: torch.Tensor, window: Pair, size: Pair) -> torch.Tensor:
    """``partition``'s inverse: (B * nW, wh * ww, C) -> (B, H, W, C) for a padded grid ``size`` (H, W)."""
    (wh, ww), (H, W) = window, size
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)  # (B, nWh, wh, nWw, ww, C)
    return x.reshape(-1, H, W, C)


def to_windows(x: torch.Tensor, window: Pair, shift: Pair, padding: Padding, fill: float = 0.0) -> torch.Tensor:
    """(B, H, W, C) -> (B * nW, wh * ww, C): rolled by -shift and padded with ``fill`` (in the source's order)."""
    H, W = x.shape[1:3]
    pad_h, pad_w = -H % window[0], -W % window[1]
    roll = (lambda t: torch.roll(t, (-shift[0], -shift[1]), (1, 2))) if any(shift) else (lambda t: t)
    pad = lambda t: F.pad(t, (0, 0, 0, pad_w, 0, pad_h), value=fill) if pad_h or pad_w else t  # noqa: E731
    x = roll(pad(x)) if padding == "huggingface" else pad(roll(x))
    return partition(x, window)


def from_windows(windows: torch.Tensor, window: Pair, shift: Pair, padding: Padding, grid: Pair) -> torch.Tensor:
    """``to_windows``' inverse: (B * nW, wh * ww, C) -> (B, H, W, C) on the unpadded ``grid`` (H, W)."""
    H, W = grid
    x = unpartition(windows, window, padded_size(grid, window))
    unroll = (lambda t: torch.roll(t, shift, (1, 2))) if any(shift) else (lambda t: t)
    crop = lambda t: t[:, :H, :W]  # noqa: E731
    return crop(unroll(x)) if padding == "huggingface" else unroll(crop(x))


def shift_mask(grid: Pair, window: Pair, shift: Pair, value: float, device=None) -> torch.Tensor | None:
    """(nW, wh * ww, wh * ww): ``value`` between two slots of a window whose tokens the cyclic shift brought from
    different regions of the (padded) grid, 0 elsewhere; None for an unshifted block.

    The padded grid is cut along each axis at ``size - window`` and ``size - shift``: the rolled grid's last
    ``shift`` rows came from its top, and the shifted windows that straddle the cut must not mix the two."""
    if not any(shift):
        return None
    H, W = padded_size(grid, window)
    rows, cols = torch.arange(H, device=device), torch.arange(W, device=device)
    row_region = (rows >= H - window[0]).long() + (rows >= H - shift[0]).long()
    col_region = (cols >= W - window[1]).long() + (cols >= W - shift[1]).long()
    region = (row_region[:, None] * 3 + col_region[None, :]).float()  # (H, W)
    region = partition(region[None, :, :, None], window)[..., 0]  # (nW, wh * ww)
    differs = region[:, None, :] != region[:, :, None]  # (nW, N, N)
    return torch.zeros(differs.shape, device=device).masked_fill_(differs, value)


def window_tokens(grid: Pair, window: Pair, shift: Pair, padding: Padding) -> torch.Tensor:
    """int64 (nW, wh * ww): the token index (row-major in ``grid``) in each window's slot, as the block's attention
    lists them; -1 for a padded slot."""
    index = torch.arange(grid[0] * grid[1]).view(1, grid[0], grid[1], 1)
    return to_windows(index, window, shift, padding, fill=-1)[..., 0]


def relative_position_index(window: Pair) -> torch.Tensor:
    """int64 (N, N), N = wh * ww: for slots i and j, the row of (dy, dx) = pos(i) - pos(j) in a table of the
    (2 wh - 1)(2 ww - 1) offsets, row-major in dy then dx."""
    wh, ww = window
    ys, xs = torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")
    pos = torch.stack([ys.flatten(), xs.flatten()])  # (2, N)
    offset = pos[:, :, None] - pos[:, None, :]  # (2, N, N)
    return (offset[0] + wh - 1) * (2 * ww - 1) + (offset[1] + ww - 1)


def log_spaced_offsets(window: Pair, pretrained_window: Pair) -> torch.Tensor:
    """Swin v2's inputs to its position MLP: float32 ((2 wh - 1)(2 ww - 1), 2), each offset (dy, dx) scaled so the
    window's (or the pretraining window's) edge is at 8, then sign(t) log2(1 + |t|) / 3, in [-1, 1] at that edge."""
    wh, ww = window
    ys, xs = torch.meshgrid(
        torch.arange(-(wh - 1), wh, dtype=torch.float32),
        torch.arange(-(ww - 1), ww, dtype=torch.float32),
        indexing="ij",
    )
    table = torch.stack([ys, xs], dim=-1)  # (2 wh - 1, 2 ww - 1, 2)
    # a model trained at a smaller window keeps that window's scale, so its MLP sees the offsets it learned
    reference = pretrained_window if pretrained_window[0] > 0 else window
    table = table / torch.tensor([max(reference[0] - 1, 1), max(reference[1] - 1, 1)], dtype=torch.float32) * 8
    return (torch.sign(table) * torch.log2(table.abs() + 1.0) / math.log2(8)).view(-1, 2)


def natural_log_offsets(window: Pair) -> torch.Tensor:
    """timm swinv2_cr's inputs to its position MLP: float32 ((2 wh - 1)(2 ww - 1), 2), each offset (dy, dx) as
    sign(t) ln(1 + |t|), unscaled, in ``relative_position_index``'s order."""
    wh, ww = window
    ys, xs = torch.meshgrid(
        torch.arange(-(wh - 1), wh, dtype=torch.float32),
        torch.arange(-(ww - 1), ww, dtype=torch.float32),
        indexing="ij",
    )
    table = torch.stack([ys, xs], dim=-1).view(-1, 2)
    return torch.sign(table) * torch.log(1.0 + table.abs())


def window_cells(grid: Pair, window: Pair, shift: Pair, padding: Padding) -> torch.Tensor:
    """int64 (nW, wh * ww, 2): the (row, col) each window slot is drawn at, in ``window_tokens``' order. A real
    token's is its place on ``grid``; a padded slot's lies past the grid's bottom or right edge (row >= rows or
    col >= cols), where the source's padding put it: transformers pads before the shift, so its padded grid is
    rolled whole and every padded slot keeps its place on it; timm pads the rolled grid, so a padded slot stays past
    the edge of the rolled frame, its other coordinate unrolled as a real token's would be."""
    (H, W), (Hp, Wp) = grid, padded_size(grid, window)
    rows, cols = torch.arange(Hp), torch.arange(Wp)
    if padding == "huggingface":
        place = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)  # (Hp, Wp, 2) on the padded grid
        if any(shift):
            place = torch.roll(place, (-shift[0], -shift[1]), (0, 1))
    else:
        rows = torch.where(rows < H, (rows + shift[0]) % H, rows)  # the rolled frame's row r came from r + shift
        cols = torch.where(cols < W, (cols + shift[1]) % W, cols)
        place = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)
    return partition(place[None], window)  # (nW, S, 2)
