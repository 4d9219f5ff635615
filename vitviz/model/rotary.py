"""Rotary position embeddings (Su et al. 2021) for the patch tokens of a 2-D grid.

A rotary model has no learned position table: each block rotates the patch tokens' queries and keys by angles
that grow with their position, so attention scores depend on where two patches are relative to each other. The
prefix tokens ([CLS], registers) are not rotated.

    dinov3    DINOv3's axial form (Siméoni et al. 2025): patch centres normalised to [-1, 1] on each axis, the
              head's channels split between the row and the column, periods ``temperature ** (4 i / head_dim)``,
              and the rotate-half layout (the first half of the channels pairs with the second half)

The maths follows the reference code (facebookresearch/dinov3 ``rope_position_encoding.py``, timm's
``RotaryEmbeddingDinoV3``, Hugging Face's ``Dinov3ViTRopePositionEmbedding``), computed in fp32; the training-time
coordinate shift, jitter and rescale are not part of inference.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Rotary = Literal["none", "dinov3"]
ROTARIES = ("none", "dinov3")


def dinov3_angles(grid: tuple[int, int], head_dim: int, temperature: float, device=None) -> torch.Tensor:
    """The rotation angle of every patch and channel pair, (rows * cols, head_dim // 2), fp32, rows first."""
    if head_dim % 4:
        raise ValueError(f"DINOv3's rotary embedding needs a head width divisible by 4; got {head_dim}")
    rows, cols = grid
    # patch centres, normalised by the grid's own height and width, then mapped to [-1, 1]
    y = (torch.arange(rows, device=device, dtype=torch.float32) + 0.5) / rows
    x = (torch.arange(cols, device=device, dtype=torch.float32) + 0.5) / cols
    coords = 2 * torch.stack(torch.meshgrid(y, x, indexing="ij"), dim=-1).reshape(-1, 2) - 1  # (N, 2): row, col
    quarter = head_dim // 4
    periods = temperature ** (2 * torch.arange(quarter, device=device, dtype=torch.float32) / (head_dim // 2))
    angles = 2 * math.pi * coords[:, :, None] / periods  # (N, 2, head_dim / 4)
    return angles.flatten(1)  # (N, head_dim / 2): the row's frequencies, then the column's


def rotary_sin_cos(kind: Rotary, grid: tuple[int, int], head_dim: int, temperature: float,
                   device=None) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """(sin, cos), each (rows * cols, head_dim) in the layout ``rotate`` expects, or None for ``kind="none"``."""
    if kind == "none":
        return None
    if kind == "dinov3":
        angles = dinov3_angles(grid, head_dim, temperature, device).repeat(1, 2)  # rotate-half: both halves alike
        return angles.sin(), angles.cos()
    raise ValueError(f"rotary must be one of {', '.join(ROTARIES)}; got {kind!r}")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last axis: channel i pairs with channel i + head_dim / 2."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
    """Rotate the patch tokens of queries or keys x (B, heads, T, head_dim); the prefix tokens stay as they are.
    The rotation is computed in fp32 (sin and cos are), then cast back to x's dtype."""
    prefix, patches = x[:, :, :num_prefix_tokens], x[:, :, num_prefix_tokens:]
    rotated = patches * cos + rotate_half(patches) * sin  # (B, heads, N, head_dim)
    return torch.cat([prefix, rotated.to(x.dtype)], dim=2)
