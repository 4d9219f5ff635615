"""Model anatomy: attention distance and entropy per head, position-embedding similarity, and the
principal components of the patch-embedding filters."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from vitviz.explain.common import check_attentions


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


def mean_attention_distance(
    attentions: Sequence[torch.Tensor], grid_size: tuple[int, int], patch_size: int, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """The ViT paper's attention distance: (B, layers, heads), in pixels.

    Prefix tokens are dropped and each patch query's row renormalised over the patches;
    the attention-weighted distance to the keys is then averaged over the query patches. The
    renormalisation divides each row's weighted sum by the row's sum, (B, heads, N) divisions,
    rather than every weight of the (B, heads, N, N) block.
    """
    check_attentions(attentions, num_prefix_tokens, grid_size)
    p = num_prefix_tokens
    distances = _patch_distances(tuple(grid_size), patch_size).to(attentions[0].device, attentions[0].dtype)  # (N, N)
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


def position_embedding_similarity(
    pos_embed: torch.Tensor, grid_size: tuple[int, int], num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity of each patch's position embedding with every other's (ViT paper, Fig. 7
    centre): (rows, cols, rows, cols); [i, j] is the map for the patch at row i, column j."""
    patches = pos_embed.reshape(-1, pos_embed.shape[-1])[num_prefix_tokens:]  # (N, D)
    if patches.shape[0] != grid_size[0] * grid_size[1]:
        raise ValueError(f"{patches.shape[0]} patch position embeddings for a {grid_size[0]}x{grid_size[1]} grid")
    unit = F.normalize(patches.float(), dim=-1)
    return (unit @ unit.T).reshape(*grid_size, *grid_size)


def rotary_similarity(sin: torch.Tensor, cos: torch.Tensor, grid_size: tuple[int, int]) -> torch.Tensor:
    """What a rotary model has instead of a position table: how alike two patches' rotations are, the mean over
    channels of cos(angle_i - angle_j) from ``ViT.rotary_embedding`` (sin, cos: (N, head_dim) each). It is the factor
    by which rotation scales the score between a query at patch i and the same key at patch j, averaged over the
    channels (and the heads, for learned per-head frequencies): 1 on the patch itself, falling with distance.
    (rows, cols, rows, cols), like ``position_embedding_similarity``."""
    if sin.shape[-2] != grid_size[0] * grid_size[1] or sin.shape != cos.shape:
        raise ValueError(f"rotary sin/cos of shape {tuple(sin.shape)} do not fit a {grid_size[0]}x{grid_size[1]} grid")
    sin, cos = sin.double(), cos.double()  # (..., N, head_dim): a leading heads axis (RoPE-Mixed) is averaged over
    similarity = (cos @ cos.transpose(-2, -1) + sin @ sin.transpose(-2, -1)) / sin.shape[-1]  # (..., N, N)
    similarity = similarity.reshape(-1, *similarity.shape[-2:]).mean(dim=0)
    return similarity.float().reshape(*grid_size, *grid_size)


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
