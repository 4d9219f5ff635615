"""Rotary position embeddings (Su et al. 2021) for the patch tokens of a 2-D grid (or a clip's 3-D grid of tubelets).

A rotary model has no learned position table: each block rotates the patch tokens' queries and keys by angles
that grow with their position, so attention scores depend on where two patches are relative to each other. The
prefix tokens ([CLS], registers) are not rotated.

    dinov3    DINOv3's axial form (Siméoni et al. 2025): patch centres normalised to [-1, 1] on each axis, the
              head's channels split between the row and the column, periods ``temperature ** (4 i / head_dim)``,
              and the rotate-half layout (the first half of the channels pairs with the second half)
    eva       EVA-02's form (Fang et al. 2023; timm's RotaryEmbeddingCat): integer patch positions rescaled onto
              the pretraining grid, frequencies ``temperature ** (-4 i / head_dim)``, neighbouring channels paired
    mixed     RoPE-Mixed (Heo et al. 2024): learned frequencies per block and head along both axes (the model's
              ``rotary_frequencies``), neighbouring channels paired
    vjepa2    V-JEPA 2's 3-D form (Assran et al. 2025; transformers' ``VJEPA2RopeAttention``): integer tubelet
              positions along time, rows and columns, each on its own third of the head's channels (the rest is
              not rotated), frequencies ``temperature ** (-2 i / part)``, neighbouring channels paired; within a part,
              channel c turns at frequency c mod (part / 2), so a pair's two channels may turn at different rates,
              as the reference code does (its sines and cosines are repeated, not interleaved)

The maths follows the reference code (facebookresearch/dinov3 ``rope_position_encoding.py``, timm's
``RotaryEmbeddingDinoV3``, Hugging Face's ``Dinov3ViTRopePositionEmbedding``), computed in fp32; the training-time
coordinate shift, jitter and rescale are not part of inference.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import torch

Rotary = Literal["none", "dinov3", "eva", "mixed", "vjepa2"]
ROTARIES = ("none", "dinov3", "eva", "mixed", "vjepa2")


class Rope(NamedTuple):
    """The rotary embedding of one input's grid: what every block's attention rotates queries and keys by."""

    sin: torch.Tensor  # (N, head_dim), fp32; (heads, N, head_dim) for learned per-head frequencies
    cos: torch.Tensor  # the same shape
    interleaved: bool  # channel pairs (0, 1), (2, 3)... (EVA); else (i, i + head_dim / 2) (DINOv3's rotate-half)


def dinov3_angles(grid: tuple[int, int], head_dim: int, temperature: float, device=None) -> torch.Tensor:
    """The rotation angle of every patch and channel pair, (rows * cols, head_dim // 2), fp32, rows first."""
    rows, cols = grid
    # patch centres, normalised by the grid's own height and width, then mapped to [-1, 1]
    y = (torch.arange(rows, device=device, dtype=torch.float32) + 0.5) / rows
    x = (torch.arange(cols, device=device, dtype=torch.float32) + 0.5) / cols
    coords = 2 * torch.stack(torch.meshgrid(y, x, indexing="ij"), dim=-1).reshape(-1, 2) - 1  # (N, 2): row, col
    quarter = head_dim // 4
    periods = temperature ** (2 * torch.arange(quarter, device=device, dtype=torch.float32) / (head_dim // 2))
    angles = 2 * math.pi * coords[:, :, None] / periods  # (N, 2, head_dim / 4)
    return angles.flatten(1)  # (N, head_dim / 2): the row's frequencies, then the column's


def eva_angles(
    grid: tuple[int, int],
    head_dim: int,
    temperature: float,
    reference_grid: tuple[int, int] | None,
    column_first: bool = False,
    offset: float = 0.0,
    device=None,
) -> torch.Tensor:
    """EVA's angles, (rows * cols, head_dim // 2), fp32: integer patch positions, rescaled so that this grid spans
    the reference (pretraining) grid, times frequencies ``temperature ** (-i / (head_dim / 4))``."""
    quarter = head_dim // 4
    frequencies = 1.0 / (temperature ** (torch.arange(quarter, device=device).to(torch.float32) / quarter))
    axes = [torch.arange(size, device=device).to(torch.float32) + offset for size in grid]
    if reference_grid is not None:  # positions at another resolution stretched onto the pretraining grid
        axes = [t / size * ref for t, size, ref in zip(axes, grid, reference_grid)]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)  # (rows, cols, 2): row, col
    if column_first:
        coords = coords.flip(-1)
    return (coords[..., None] * frequencies).reshape(grid[0] * grid[1], -1)  # (N, head_dim / 2)


def vjepa2_angles(grid: tuple[int, int, int], head_dim: int, temperature: float, device=None) -> torch.Tensor:
    """V-JEPA 2's angle for every tubelet and channel, (frames * rows * cols, head_dim), fp32, time-major.

    The head's channels split into three parts of ``2 * (head_dim // 3 // 2)`` each (time, row, column) and an
    unrotated rest (angle 0). Within a part of width ``w``, channel ``c`` turns by ``position * temperature ** (-(c
    mod w/2) / (w/2))``: transformers' ``rotate_queries_or_keys`` repeats its w/2 sines and cosines (``repeat``) where
    its rotation pairs neighbouring channels."""
    part = 2 * (head_dim // 3 // 2)
    half = part // 2
    omega = 1.0 / temperature ** (torch.arange(half, device=device, dtype=torch.float32) / (part / 2.0))
    axes = [torch.arange(size, device=device) for size in grid]
    positions = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)  # (N, 3): time, row, col
    parts = [(positions[:, axis, None] * omega).repeat(1, 2) for axis in range(3)]  # (N, part) each
    rest = torch.zeros(positions.shape[0], head_dim - 3 * part, device=device)  # not rotated: angle 0
    return torch.cat([*parts, rest], dim=-1)


def rotary_embedding(
    kind: Rotary,
    grid: tuple[int, ...],
    head_dim: int,
    temperature: float,
    reference_grid: tuple[int, int] | None = None,
    column_first: bool = False,
    offset: float = 0.0,
    device=None,
) -> Rope | None:
    """The Rope of a rows x cols grid, or None for ``kind="none"``. ``grid`` may be a clip's (frames / tubelet, rows,
    cols): the 2-D kinds read its last two sides, "vjepa2" all three (a 2-D grid: one tubelet along time)."""
    if kind == "none":
        return None
    if kind == "vjepa2":
        grid3 = tuple(grid) if len(grid) == 3 else (1, *grid[-2:])
        angles = vjepa2_angles(grid3, head_dim, temperature, device)
        return Rope(angles.sin(), angles.cos(), interleaved=True)
    grid = tuple(grid[-2:])
    if head_dim % 4:
        raise ValueError(f"rotary embeddings need a head width divisible by 4; got {head_dim}")
    if kind == "dinov3":
        angles = dinov3_angles(grid, head_dim, temperature, device).repeat(1, 2)  # rotate-half: both halves alike
        return Rope(angles.sin(), angles.cos(), interleaved=False)
    if kind == "eva":
        angles = eva_angles(grid, head_dim, temperature, reference_grid, column_first, offset, device)
        angles = angles.repeat_interleave(2, dim=-1)  # interleaved: each frequency on two neighbouring channels
        return Rope(angles.sin(), angles.cos(), interleaved=True)
    raise ValueError(f"rotary must be one of {', '.join(ROTARIES)}; got {kind!r}")


def mixed_angles(frequencies: torch.Tensor, grid: tuple[int, int], column_first: bool = False) -> torch.Tensor:
    """Learned per-head frequencies (Heo et al. 2024, RoPE-Mixed): ``frequencies`` (2, layers, heads, head_dim // 2)
    hold each head's frequency along the two axes, so a head's angle is x * f_x + y * f_y and may run diagonally.
    Returns (layers, heads, rows * cols, head_dim // 2), fp32, with integer patch positions."""
    rows, cols = grid
    row, col = torch.meshgrid(
        torch.arange(rows, device=frequencies.device).to(torch.float32),
        torch.arange(cols, device=frequencies.device).to(torch.float32),
        indexing="ij",
    )
    first, second = (col.reshape(-1), row.reshape(-1)) if column_first else (row.reshape(-1), col.reshape(-1))
    f = frequencies.float()
    return first[:, None] * f[0][..., None, :] + second[:, None] * f[1][..., None, :]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last axis: channel i pairs with channel i + head_dim / 2."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """[x0, x1, x2, x3...] -> [-x1, x0, -x3, x2...]: neighbouring channels pair up (the interleaved layout)."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape(x.shape)


def rotate(x: torch.Tensor, rope: Rope, num_prefix_tokens: int) -> torch.Tensor:
    """Rotate the patch tokens of queries or keys x (B, heads, T, head_dim); the prefix tokens stay as they are.
    The rotation is computed in fp32 (sin and cos are), then cast back to x's dtype."""
    prefix, patches = x[:, :, :num_prefix_tokens], x[:, :, num_prefix_tokens:]
    turned = rotate_pairs(patches) if rope.interleaved else rotate_half(patches)
    rotated = patches * rope.cos + turned * rope.sin  # (B, heads, N, head_dim)
    return torch.cat([prefix, rotated.to(x.dtype)], dim=2)
