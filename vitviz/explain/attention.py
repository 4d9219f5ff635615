"""Maps from attention alone: rollout, and what [CLS] / a patch / the head's tokens attend to. The streaming
explainer (streaming.py) folds the same maps in during the forward pass. On a model that attends in windows and
merges tokens (Swin) the rollout method reads stages.py's rule."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitviz.explain.common import (
    HEAD_FUSIONS,
    HeadFusion,
    LayoutArgument,
    Readout,
    TokenGrid,
    check_attentions,
    check_readout,
    check_start_layer,
    fuse_heads,
    read_out,
    token_grid,
)
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.stages import rollout_across_stages


def discard_weakest(fused: torch.Tensor, discard_ratio: float, num_prefix_tokens: LayoutArgument) -> torch.Tensor:
    """Zero the ``discard_ratio`` fraction of the weakest patch-to-patch weights of each image.

    Attention to or from prefix tokens is never discarded ([CLS] included): only the
    (N x N) patch block competes. ``num_prefix_tokens``: the token layout (``output.layout``) or the prefix count.
    Returns a new tensor (B, T, T).
    """
    p = token_grid(num_prefix_tokens, None, "discard_weakest").num_prefix_tokens
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1); got {discard_ratio}")
    if discard_ratio == 0.0:
        return fused
    patches = fused[:, p:, p:]  # (B, N, N)
    flat = patches.reshape(patches.shape[0], -1)
    k = int(flat.shape[1] * discard_ratio)
    if k == 0:
        return fused
    # Exactly the k weakest, as topk(k, largest=False) picks them, but through the k-th smallest
    # value: about 3x faster than topk on a CPU. Everything below it goes, and of the weights equal
    # to it, the first ones (by position) until k are gone; topk leaves the choice among ties open.
    threshold = flat.kthvalue(k, dim=1, keepdim=True).values  # (B, 1)
    below = flat < threshold
    tied = flat == threshold
    drop = below | (tied & (tied.cumsum(1) <= k - below.sum(1, keepdim=True)))
    out = fused.clone()
    out[:, p:, p:] = flat.masked_fill(drop, 0.0).reshape_as(patches)
    return out


def residual_step(fused: torch.Tensor) -> torch.Tensor:
    """One rollout factor: add the identity for the skip connection, then make every row sum to 1."""
    with_residual = fused + torch.eye(fused.shape[-1], dtype=fused.dtype, device=fused.device)
    return with_residual / with_residual.sum(dim=-1, keepdim=True)  # keepdim: each row by its own sum


def fused_rollout(
    fused: Sequence[torch.Tensor], start_layer: int, readout: Readout, num_prefix_tokens: int
) -> torch.Tensor:
    """Shared rollout loop: R = prod_l normalize_rows(A_l + I), later layers on the left; (B, N)."""
    check_start_layer(start_layer, len(fused))
    check_readout(readout)
    B, T, _ = fused[0].shape
    rollout = torch.eye(T, dtype=fused[0].dtype, device=fused[0].device).expand(B, T, T)
    for matrix in fused[start_layer:]:
        rollout = residual_step(matrix) @ rollout  # (B, T, T), later layers on the left
    return read_out(rollout, readout, num_prefix_tokens)


def attention_rollout(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how much each patch flows into the output.

    Per block: fuse heads, optionally discard the weakest patch-to-patch weights, add the
    identity for the residual path, renormalise rows; multiply from ``start_layer`` to the last
    block. Returns the [CLS] row over the patches, (B, rows, cols) or (B, N). For models pooled
    by the mean patch token (``readout="mean"``, e.g. no [CLS] token) the rows of all patch
    queries are averaged instead, since that mean is what the head sees; ``readout=output.readout``
    reads exactly what any model's head reads (DeiT's two tokens, SigLIP's pooling weights).
    ``num_prefix_tokens``: the token layout (``output.layout``; a clip's maps are (B, frames, rows, cols)), or a
    plain ViT's prefix count with ``grid_size`` (``vitviz.explain``'s conventions).
    """
    grid = token_grid(num_prefix_tokens, grid_size, "attention_rollout")
    check_attentions(attentions, grid)
    p = grid.num_prefix_tokens
    fused = torch.stack([fuse_heads(a, head_fusion) for a in attentions])  # (L, B, T, T)
    L, B, T, _ = fused.shape  # discard in all blocks at once: one call instead of L
    fused = discard_weakest(fused.reshape(L * B, T, T), discard_ratio, p).reshape(L, B, T, T)
    return grid.as_map(fused_rollout(list(fused), start_layer, readout, p))


def cls_attention(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    layer: int,
    head: int | HeadFusion = "mean",
) -> torch.Tensor:
    """What [CLS] attends to in one block: one head's row, or the heads fused; (B, rows, cols).

    Token 0 must be the [CLS] token: for a model without one there is no [CLS] row to show.
    """
    grid = token_grid(num_prefix_tokens, grid_size, "cls_attention")
    _check_cls(grid)
    return query_attention(attentions, num_prefix_tokens, grid_size, layer=layer, query=0, head=head)


def _check_cls(grid: TokenGrid) -> None:
    """Refuse a layout whose token 0 is not a [CLS] token, in one line."""
    if grid.num_prefix_tokens == 0 or (grid.layout is not None and grid.layout.kinds[0] != "cls"):
        raise ValueError("this model has no [CLS] token (num_prefix_tokens=0); use query_attention on a patch")


def query_attention(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    layer: int,
    query: int | tuple[int, int],
    head: int | HeadFusion = "mean",
) -> torch.Tensor:
    """What one token attends to in one block, over the patches; (B, rows, cols) or (B, N).

    ``query`` is a token index (0 is [CLS]) or a patch position (row, col), a clip's (frame, row, col), which needs
    the grid: the layout's (whatever order its tokens come in) or ``grid_size``.
    """
    grid = token_grid(num_prefix_tokens, grid_size, "query_attention")
    T = check_attentions(attentions, grid)
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(f"layer must be in [0, {len(attentions) - 1}]; got {layer}")
    if isinstance(query, tuple):
        if grid.shape is None:
            raise ValueError("a (row, col) query needs the grid: give the layout or grid_size")
        query = grid.patch_token(query)
    if not 0 <= query < T:
        raise ValueError(f"query token must be in [0, {T - 1}]; got {query}")
    attention = attentions[layer]  # (B, heads, T, T)
    if isinstance(head, str):
        rows = fuse_heads(attention[:, :, query : query + 1], head)[:, 0]  # (B, T)
    else:
        if not 0 <= head < attention.shape[1]:
            raise ValueError(f"head must be in [0, {attention.shape[1] - 1}] or one of {HEAD_FUSIONS}; got {head}")
        rows = attention[:, head, query]  # (B, T)
    return grid.as_map(rows[:, grid.num_prefix_tokens :])


def cls_attention_all(
    attentions: Sequence[torch.Tensor], num_prefix_tokens: LayoutArgument = 1, grid_size: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Every block's and head's [CLS] row over the patches: (B, layers, heads, rows, cols)."""
    grid = token_grid(num_prefix_tokens, grid_size, "cls_attention_all")
    check_attentions(attentions, grid)
    _check_cls(grid)
    rows = torch.stack([a[:, :, 0, grid.num_prefix_tokens :] for a in attentions], dim=1)  # (B, L, heads, N)
    return grid.as_map(rows)


def readout_attention_all(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
) -> torch.Tensor:
    """What the tokens the head reads attend to, in every block and head: (B, layers, heads, rows, cols).

    With ``readout="cls"`` this is ``cls_attention_all``; with "mean", the mean of the patch rows;
    with ``readout=output.readout``, the rows weighted as the head weights the final tokens (DeiT's two
    tokens, SigLIP's pooling weights), so models without a [CLS] token get this view too.
    """
    grid = token_grid(num_prefix_tokens, grid_size, "readout_attention_all")
    check_attentions(attentions, grid)
    p = grid.num_prefix_tokens
    rows = torch.stack(
        [read_out(a.flatten(0, 1), per_head(readout, a.shape[1]), p).unflatten(0, a.shape[:2]) for a in attentions],
        dim=1,
    )  # (B, L, heads, N)
    return grid.as_map(rows)


def per_head(readout: Readout, heads: int) -> Readout:
    """A (B, T) readout repeated for each head, to match attention flattened to (B * heads, T, T)."""
    return readout.repeat_interleave(heads, dim=0) if isinstance(readout, torch.Tensor) else readout


def _rollout_map(inputs: MapInputs) -> MethodOutput:
    options = inputs.options
    if inputs.windowed:
        if options.discard_ratio > 0:  # across windows the weights are 0 already: the weakest would all be those
            raise ValueError(
                "rollout's discard_ratio ranks the weights of one global (T, T) attention; this model attends in "
                "windows and merges tokens (Swin): give discard_ratio=0"
            )
        return MethodOutput(
            rollout_across_stages(
                inputs.attentions,
                inputs.layouts,
                readout=inputs.readout,
                head_fusion=options.head_fusion,
                start_layer=options.start_layer,
            )
        )
    return MethodOutput(
        attention_rollout(
            inputs.attentions,
            **inputs.layout,
            readout=inputs.readout,
            start_layer=options.start_layer,
            head_fusion=options.head_fusion,
            discard_ratio=options.discard_ratio,
        )
    )


def _cls_map(inputs: MapInputs) -> MethodOutput:
    return MethodOutput(cls_attention(inputs.attentions, **inputs.layout, layer=-1, head="mean"))


ROLLOUT = Method(
    name="rollout",
    description="attention rollout over every block",
    paper="Abnar & Zuidema 2020",
    compute=_rollout_map,
    class_specific=False,
    cost="forward",
    cost_note="",
    caption="Bright: patches whose information flows most into what the head reads, through every block.",
    windowed=None,  # across windows and stages: stages.rollout_across_stages
)
CLS = Method(
    name="cls",
    description="the last block's [CLS] attention, mean over heads",
    compute=_cls_map,
    class_specific=False,
    cost="forward",
    cost_note="",
    caption="Bright: patches the [CLS] token attends to most in the last block.",
    windowed="reads the [CLS] token's attention, and Swin has no [CLS] token",
)
