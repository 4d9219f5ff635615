"""Prefix tokens, token norms and the attention-pooling head: where attention parks, which patches
turn into high-norm artifacts (Darcet et al. 2023), and what SigLIP's pooling query looks at."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitviz.explain.attention import fuse_heads
from vitviz.explain.common import HEAD_FUSIONS, HeadFusion, LayoutArgument, check_attentions, check_choice, token_grid
from vitviz.layout import TokenLayout


def attention_to_prefix_tokens(attentions: Sequence[torch.Tensor], num_prefix_tokens: LayoutArgument) -> torch.Tensor:
    """How much attention the patches give each prefix token ([CLS], distillation, registers), and the
    patches themselves: (B, layers, heads, num_prefix_tokens + 1), the mean over patch queries; the last
    entry is what stays among the patches, so each (layer, head) sums to 1. Registers that soak up most
    of a head's attention are the "attention sinks" of Darcet et al. (2023). ``num_prefix_tokens``: the token
    layout (``output.layout``) or the prefix count."""
    grid = token_grid(num_prefix_tokens, None, "attention_to_prefix_tokens")
    check_attentions(attentions, grid)
    p = grid.num_prefix_tokens
    per_layer = []
    for attention in attentions:
        rows = attention[:, :, p:]  # (B, heads, N, T): the patch queries
        to_prefix = rows[..., :p].mean(dim=2)  # (B, heads, p)
        to_patches = rows[..., p:].sum(dim=-1).mean(dim=2)[..., None]  # (B, heads, 1)
        per_layer.append(torch.cat([to_prefix, to_patches], dim=-1))
    return torch.stack(per_layer, dim=1)


def token_norms(hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of every token after every block: (B, layers, T). ``hidden_states`` come from
    ``model(x, output_hidden_states=True)``; high-norm patch tokens are Darcet et al.'s artifacts."""
    if len(hidden_states) == 0:
        raise ValueError("hidden_states is empty: run the model with output_hidden_states=True")
    return torch.stack([h.float().norm(dim=-1) for h in hidden_states], dim=1)


def high_norm_patches(norms: torch.Tensor, num_prefix_tokens: LayoutArgument, factor: float = 2.0) -> torch.Tensor:
    """Patch tokens whose norm exceeds ``factor`` times the median patch norm of their block: a boolean
    (..., N) mask from norms (..., T), in token order. Darcet et al.'s artifact tokens stand far above the rest
    (about 10x in DINOv2), so the median is a scale that they do not move. ``num_prefix_tokens``: the token layout
    (``output.layout``) or the prefix count."""
    p = token_grid(num_prefix_tokens, None, "high_norm_patches").num_prefix_tokens
    if factor <= 0:
        raise ValueError(f"factor must be positive; got {factor}")
    patches = norms[..., p:]
    if patches.shape[-1] == 0:
        raise ValueError("there are no patch tokens after the prefix tokens")
    return patches > factor * patches.median(dim=-1, keepdim=True).values


def pooling_attention(
    pool_attention: torch.Tensor,
    head: int | HeadFusion = "mean",
    grid_size: tuple[int, ...] | TokenLayout | None = None,
) -> torch.Tensor:
    """What the attention-pooling head (SigLIP's "map") looks at: one head's weights over the patches, or
    the heads fused; (B, rows, cols). ``pool_attention`` is ``output.pool_attention``, (B, heads, N).
    ``grid_size``: the token layout (``output.layout``) or the grid (rows, cols); None for (B, N)."""
    if pool_attention.ndim != 3:
        raise ValueError(f"pool_attention must be (B, heads, N); got {tuple(pool_attention.shape)}")
    if isinstance(head, str):
        check_choice("head", head, HEAD_FUSIONS)
        rows = fuse_heads(pool_attention[:, :, None], head)[:, 0]
    else:
        if not 0 <= head < pool_attention.shape[1]:
            raise ValueError(f"head must be in [0, {pool_attention.shape[1] - 1}] or one of {HEAD_FUSIONS}; got {head}")
        rows = pool_attention[:, head]
    if isinstance(grid_size, TokenLayout):
        grid = token_grid(grid_size, None, "pooling_attention")
    else:
        grid = token_grid(0, grid_size, "pooling_attention")
    if grid.shape is not None and grid.num_patches != rows.shape[-1]:
        raise ValueError(f"grid {'x'.join(map(str, grid.shape))} does not hold {rows.shape[-1]} patches")
    return grid.as_map(rows)
