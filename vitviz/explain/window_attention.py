"""What one token attends to inside its own attention window, in one block and head: the per-head view of a model
that attends in windows (Swin), for shifted and unshifted blocks alike.

A windowed block's attention is (B * nW, heads, S, S), one matrix per window, listed in the block's (shifted)
frame; ``layouts[l].windows`` (nW, S) names the token in every slot (-1: padding). The clicked token is found in
its window's slot, and that slot's row is placed at the window's tokens, so the result is a vector over the block's
own tokens that ``layout.paint`` draws over the photo without knowing the shift. Weights given to padded slots are
no token's: they are left out of ``values`` (such a row sums to less than 1 over the tokens shown) and returned on
their own, ``padding`` by slot (vitviz.model.windows.window_cells says where each padded slot is drawn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from vitviz.explain.common import HEAD_FUSIONS, HeadFusion, fuse_heads
from vitviz.layout import TokenLayout


class WindowAttention(NamedTuple):
    values: torch.Tensor  # (B, T_l) the token's weights over block l's tokens; NaN outside its window
    tokens: np.ndarray  # int64 (S',) the tokens of its window in the attention's slot order, padded slots left out
    window: int  # the window's row in layouts[l].windows (0 for a block that attends globally)
    padded_slots: np.ndarray  # int64 (P,) the window's padded slots (-1 in layouts[l].windows), in slot order
    padding: torch.Tensor  # (B, P) the token's weights on those slots: what padding took of its row


def window_attention_map(
    attentions: Sequence[torch.Tensor],
    layouts: Sequence[TokenLayout],
    layer: int,
    token: int | tuple[int, int],
    head: int | HeadFusion = "mean",
) -> WindowAttention:
    """Token ``token`` of block ``layer`` (an index into that block's tokens, or (row, col) on its grid): its
    attention over its own window in one ``head``, or the heads fused ("mean", "max", "min").

    ``attentions[layer]`` is (B * nW, heads, S, S) for a windowed block, (B, heads, T, T) for one that attends
    globally (then the window is every token); ``layouts`` are the model's ``output.layouts``. Returns the values
    (B, T_layer) with NaN on the tokens outside the window, the window's tokens and the window's index.
    """
    if len(layouts) != len(attentions):
        raise ValueError(f"{len(layouts)} layouts for {len(attentions)} attention blocks: give output.layouts")
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(f"layer must be in [0, {len(attentions) - 1}]; got {layer}")
    attention, layout = attentions[layer], layouts[layer]
    token = _token_index(token, layout)
    windows = layout.windows if layout.windows is not None else np.arange(len(layout))[None]
    groups, size = windows.shape
    if attention.ndim != 4 or attention.shape[-2:] != (size, size) or attention.shape[0] % groups:
        raise ValueError(
            f"attentions[{layer}] has shape {tuple(attention.shape)}; its layout says (B * {groups}, heads, {size}, "
            f"{size})"
        )
    heads = attention.shape[1]
    if isinstance(head, str):
        attention = fuse_heads(attention, head)  # (B * nW, S, S); checks the choice
    elif not 0 <= head < heads:
        raise ValueError(f"head must be in [0, {heads - 1}] or one of {', '.join(HEAD_FUSIONS)}; got {head}")
    else:
        attention = attention[:, head]  # (B * nW, S, S)
    window, slot = (int(i[0]) for i in np.nonzero(windows == token))  # a token sits in exactly one slot
    real = windows[window] >= 0
    tokens = windows[window][real]
    rows = attention.reshape(-1, groups, size, size)[:, window, slot]  # (B, S): the token's row in its window
    values = rows.new_full((rows.shape[0], len(layout)), float("nan"))
    values[:, torch.as_tensor(tokens, device=rows.device)] = rows[:, torch.as_tensor(real, device=rows.device)]
    padded = np.flatnonzero(~real)
    return WindowAttention(values, tokens, window, padded, rows[:, torch.as_tensor(padded, device=rows.device)])


def _token_index(token: int | tuple[int, int], layout: TokenLayout) -> int:
    """A token index of ``layout``, from an index or a (row, col) place on its grid (one frame)."""
    if isinstance(token, tuple):
        if layout.grid is None or layout.grid[0] != 1:
            raise ValueError("a (row, col) token needs a block whose tokens form one frame's grid; give its index")
        _, rows, cols = layout.grid
        row, col = token
        if not (0 <= row < rows and 0 <= col < cols):
            raise ValueError(f"token ({row}, {col}) is outside the block's {rows}x{cols} grid")
        return int(layout.patch_indices[row * cols + col])
    if not 0 <= token < len(layout):
        raise ValueError(f"token must be in [0, {len(layout) - 1}] for this block's {len(layout)} tokens; got {token}")
    return int(token)
