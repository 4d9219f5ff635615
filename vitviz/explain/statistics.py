"""Model anatomy: attention distance and entropy per head (inside each window for a model that attends in windows:
``window_head_statistics``), position-embedding similarity, and the principal components of the patch-embedding
filters."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from vitviz.explain.common import TokenGrid, check_attentions, token_grid
from vitviz.layout import TokenLayout


def patch_distances(grid_size: tuple[int, int], patch_size: int = 1) -> torch.Tensor:
    """(N, N) Euclidean distances between patch centres, in pixels (patch_size per step)."""
    return _patch_distances(tuple(grid_size), patch_size).clone()


@functools.lru_cache(maxsize=16)
def _patch_distances(grid_size: tuple[int, int], patch_size: int) -> torch.Tensor:
    """patch_distances, computed once per grid (a streamed pass asks for it in every block); never modified."""
    rows, cols = grid_size
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    centres = torch.stack([r.flatten(), c.flatten()], dim=1).double() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def layout_distances(layout: TokenLayout) -> torch.Tensor:
    """(N, N) Euclidean distances in pixels between the centres of the layout's patch tokens' boxes, in sequence
    order (``layout.patch_indices``; a clip's frames are not counted): a plain ViT's are
    ``patch_distances(grid_size, patch_size)``, to the bit."""
    return _layout_distances(layout).clone()


def _layout_distances(layout: TokenLayout) -> torch.Tensor:
    """layout_distances, shared: never modified."""
    boxes = layout.boxes[layout.patch_indices].astype(np.float64)
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    # measured from the first centre's corner of the grid: a plain ViT's centres become r p, c p exactly, the
    # numbers patch_distances measures, so both give the same distances to the last bit
    centres = np.ascontiguousarray((centres - centres.min(axis=0))[:, ::-1])  # (N, 2) as (y, x), like patch_distances
    return _centre_distances(centres.tobytes())


@functools.lru_cache(maxsize=16)
def _centre_distances(centres: bytes) -> torch.Tensor:
    """The distances between (N, 2) float64 centres given as bytes: cached by the centres themselves, not by the
    layout object, so layouts rebuilt for every pass (a streamed pass asks in every block) share one entry."""
    points = torch.from_numpy(np.frombuffer(centres, dtype=np.float64).reshape(-1, 2).copy())
    return torch.cdist(points, points)


def mean_attention_distance(
    attentions: Sequence[torch.Tensor],
    layout: TokenLayout | tuple[int, int],
    patch_size: int | None = None,
    num_prefix_tokens: int | None = None,
) -> torch.Tensor:
    """The ViT paper's attention distance: (B, layers, heads), in pixels.

    ``layout`` is the token layout (``output.layout``): the distance between two patches is the one between their
    boxes' centres in the input's pixels (``layout_distances``; a clip's frames are not counted), whatever order the
    model lists them in. Or it is a plain ViT's ``grid_size`` (rows, cols) with ``patch_size`` (pixels per step) and
    ``num_prefix_tokens`` (default 1), the same distances for such a model.

    Prefix tokens are dropped and each patch query's row renormalised over the patches;
    the attention-weighted distance to the keys is then averaged over the query patches. The
    renormalisation divides each row's weighted sum by the row's sum, (B, heads, N) divisions,
    rather than every weight of the (B, heads, N, N) block.
    """
    if isinstance(layout, TokenLayout):
        if patch_size is not None or num_prefix_tokens is not None:
            raise ValueError("mean_attention_distance takes a token layout or (grid_size, patch_size), not both")
        grid = token_grid(layout, function="mean_attention_distance")
        distances = _layout_distances(layout)
    else:
        if patch_size is None:
            raise ValueError("mean_attention_distance needs patch_size with a grid_size (or give output.layout)")
        grid = token_grid(1 if num_prefix_tokens is None else num_prefix_tokens, tuple(layout))
        distances = _patch_distances(tuple(layout), patch_size)
    check_attentions(attentions, grid, function="mean_attention_distance")
    p = grid.num_prefix_tokens
    distances = distances.to(attentions[0].device, attentions[0].dtype)  # (N, N)
    per_layer = []
    for attention in attentions:
        patches = attention[:, :, p:, p:]  # (B, heads, N, N)
        totals = patches.sum(dim=-1).clamp(min=torch.finfo(patches.dtype).tiny)  # (B, heads, N)
        per_layer.append(((patches * distances).sum(dim=-1) / totals).mean(dim=-1))  # (B, heads)
    return torch.stack(per_layer, dim=1)


def attention_entropy(attentions: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean entropy of the attention rows, in nats: (B, layers, heads).

    0 means every query attends to a single token; log(T) means uniform attention.
    """
    check_attentions(attentions, 0, None)
    per_layer = []
    for a in attentions:
        if a.requires_grad and torch.is_grad_enabled():  # autograd needs the intermediate tensors
            terms = a * a.clamp(min=1e-12).log()
        else:  # a * log(a), the same values in one new tensor instead of three
            terms = a.clamp(min=1e-12).log_().mul_(a)
        per_layer.append(-terms.sum(dim=-1).mean(dim=-1))  # (B, heads)
    return torch.stack(per_layer, dim=1)


def _pair_map(similarity: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
    """(N, N) patch-by-patch values -> (*shape, *shape) through the grid's order: [cell] is that cell's map."""
    if grid.order is not None:
        order = torch.tensor(grid.order, device=similarity.device)  # a copy: the layout's is read-only
        similarity = similarity[order][:, order]
    return similarity.reshape(*grid.shape, *grid.shape)


def _similarity_grid(layout: TokenLayout | tuple[int, int], num_prefix_tokens: int, function: str) -> TokenGrid:
    """The grid a similarity function draws on: the layout's (its own prefix count), or a plain ViT's
    (rows, cols) after ``num_prefix_tokens``."""
    if isinstance(layout, TokenLayout):
        return token_grid(layout, function=function)
    if len(layout) != 2:
        raise ValueError(f"{function}: grid_size must be (rows, cols); got {tuple(layout)}")
    return token_grid(num_prefix_tokens, tuple(layout), function=function)


def position_embedding_similarity(
    pos_embed: torch.Tensor, layout: TokenLayout | tuple[int, int], num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity of each patch's position embedding with every other's (ViT paper, Fig. 7
    centre): (rows, cols, rows, cols); [i, j] is the map for the patch at row i, column j.

    ``layout`` is the token layout (``output.layout``, ``num_prefix_tokens`` then unused: the layout has its own)
    whose patch tokens the table lists in order, the maps laid out through its ``grid_order``; or a plain ViT's
    ``grid_size`` (rows, cols) after ``num_prefix_tokens`` prefix rows."""
    grid = _similarity_grid(layout, num_prefix_tokens, "position_embedding_similarity")
    patches = pos_embed.reshape(-1, pos_embed.shape[-1])[grid.num_prefix_tokens :]  # (N, D)
    if patches.shape[0] != grid.num_patches:
        shape = "x".join(map(str, grid.shape))
        raise ValueError(f"{patches.shape[0]} patch position embeddings for a {shape} grid")
    unit = F.normalize(patches.float(), dim=-1)
    return _pair_map(unit @ unit.T, grid)


def rotary_similarity(sin: torch.Tensor, cos: torch.Tensor, layout: TokenLayout | tuple[int, int]) -> torch.Tensor:
    """What a rotary model has instead of a position table: how alike two patches' rotations are, the mean over
    channels of cos(angle_i - angle_j) from ``ViT.rotary_embedding`` (sin, cos: (N, head_dim) each). It is the factor
    by which rotation scales the score between a query at patch i and the same key at patch j, averaged over the
    channels (and the heads, for learned per-head frequencies): 1 on the patch itself, falling with distance.
    (rows, cols, rows, cols), like ``position_embedding_similarity``; ``layout`` as there (the token layout, or a
    plain ViT's (rows, cols)), the rows of sin and cos being the patch tokens in sequence order."""
    grid = _similarity_grid(layout, 0, "rotary_similarity")
    if sin.shape[-2] != grid.num_patches or sin.shape != cos.shape:
        shape = "x".join(map(str, grid.shape))
        raise ValueError(f"rotary sin/cos of shape {tuple(sin.shape)} do not fit a {shape} grid")
    sin, cos = sin.double(), cos.double()  # (..., N, head_dim): a leading heads axis (RoPE-Mixed) is averaged over
    similarity = (cos @ cos.transpose(-2, -1) + sin @ sin.transpose(-2, -1)) / sin.shape[-1]  # (..., N, N)
    similarity = similarity.reshape(-1, *similarity.shape[-2:]).mean(dim=0)
    return _pair_map(similarity.float(), grid)


def patch_embedding_components(weight: torch.Tensor, count: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

    ``weight`` is the Conv2d weight (D, C, p, p). Returns the top ``count`` components as
    (count, C, p, p) and the fraction of variance each explains, (count,).
    """
    D, C, p, q = weight.shape
    filters = weight.detach().reshape(D, -1).double()
    filters = filters - filters.mean(dim=0, keepdim=True)
    _, singular_values, components = torch.linalg.svd(filters, full_matrices=False)
    variance = singular_values**2
    count = min(count, components.shape[0])
    return components[:count].reshape(count, C, p, q).float(), (variance[:count] / variance.sum()).float()


class WindowStatistics(NamedTuple):
    """Per block and head, inside the windows: (B, layers, heads), NaN past a block's own heads."""

    entropy: torch.Tensor  # nats
    distance: torch.Tensor  # pixels of the input
    to_tokens: torch.Tensor  # the share of a query's weight on real tokens (1 but where padding takes attention)


def window_head_statistics(attentions: Sequence[torch.Tensor], layouts: Sequence[TokenLayout]) -> WindowStatistics:
    """Attention entropy (nats), mean attention distance (pixels) and the share of attention on real tokens per block
    and head of a model that attends in windows (Swin), measured inside each window: (B, layers, heads), heads the
    most of any block, NaN where a block has fewer (Swin's heads grow by stage).

    ``attentions[l]`` is (B * nW, heads, S, S) with ``layouts[l].windows`` (nW, S) naming each slot's token (-1 for
    padding), or (B, heads, T, T) for a block that attends globally (its patch tokens then form one window). Padded
    slots are no token of the input: they are left out as queries, and each query's row is renormalised over the
    real keys of its window (transformers pads before its softmax, so padding takes some attention). A row's
    entropy is then -sum p log p over those keys; its distance the p-weighted distance in pixels between the
    centres of the query's and the keys' boxes (``layout.boxes``: a stage's tokens are 2^stage patches wide, so
    the distances are on the input's pixels at every stage). Each is the mean over the real queries of every
    window, the ViT paper's statistics (``attention_entropy``, ``mean_attention_distance``) with the window as the
    tokens a query can see."""
    if len(attentions) != len(layouts) or not attentions:
        raise ValueError(f"{len(layouts)} layouts for {len(attentions)} attention blocks: give output.layouts")
    entropies, distances, shares = [], [], []
    for attention, layout in zip(attentions, layouts, strict=True):
        windows = layout.windows if layout.windows is not None else layout.patch_indices[None]
        groups, size = windows.shape
        if attention.ndim != 4 or attention.shape[-2:] != (size, size) or attention.shape[0] % groups:
            raise ValueError(
                f"an attention of shape {tuple(attention.shape)} does not fit its layout's {groups} windows of {size}"
            )
        if layout.windows is None:  # a global block: keep its patch tokens' rows and columns
            keep = torch.as_tensor(windows[0], device=attention.device)
            attention = attention[:, :, keep][..., keep]
        dtype = torch.promote_types(attention.dtype, torch.float32)
        weights = attention.to(dtype).reshape(-1, groups, attention.shape[1], size, size)  # (B, nW, heads, S, S)
        real = torch.as_tensor(windows >= 0, device=attention.device)  # (nW, S)
        weights = weights * real[None, :, None, None, :]
        totals = weights.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
        p = weights / totals
        entropy = -(p * p.clamp(min=1e-12).log()).sum(dim=-1)  # (B, nW, heads, S)
        boxes = torch.from_numpy(layout.boxes.astype(np.float64)).to(attention.device)  # a copy: read-only
        slots = torch.from_numpy(np.maximum(windows, 0)).to(attention.device)  # padded slots at token 0, masked out
        centres = ((boxes[:, :2] + boxes[:, 2:]) / 2)[slots]
        apart = torch.cdist(centres, centres).to(dtype)  # (nW, S, S) pixels between slots' centres
        distance = (p * apart[None, :, None]).sum(dim=-1)  # (B, nW, heads, S)
        queries = real[None, :, None, :].to(dtype)  # (1, nW, 1, S)
        count = queries.sum()
        entropies.append((entropy * queries).sum(dim=(1, 3)) / count)  # (B, heads)
        distances.append((distance * queries).sum(dim=(1, 3)) / count)
        shares.append((totals[..., 0] * queries).sum(dim=(1, 3)) / count)
    return WindowStatistics(_stacked(entropies), _stacked(distances), _stacked(shares))


def _stacked(per_block: Sequence[torch.Tensor]) -> torch.Tensor:
    """(B, heads_l) per block -> (B, layers, max heads), NaN past a block's own heads."""
    heads = max(values.shape[1] for values in per_block)
    out = per_block[0].new_full((per_block[0].shape[0], len(per_block), heads), float("nan"))
    for layer, values in enumerate(per_block):
        out[:, layer, : values.shape[1]] = values
    return out
