"""Patch features from any block, in any facet: the patch's token after the block, or its key, query or value with
the heads side by side (Amir et al. 2021, "Deep ViT Features as Dense Visual Descriptors", call these facets; DINO's
keys are their favourite for parts and correspondences). What ``features.py``'s PCA colours, matches and parts take.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from vitviz.explain.common import check_choice, check_not_windowed
from vitviz.model import ViT, autocast

Facet = Literal["token", "key", "query", "value"]
FACETS: tuple[str, ...] = get_args(Facet)
SWIN_FEATURES = "patch features are read from a ViT's one grid of patches (Swin's blocks hold one per stage)"


def patch_features(
    model: ViT, pixel_values: torch.Tensor, block: int, facet: Facet = "token", precision: str = "fp32"
) -> torch.Tensor:
    """The patch tokens' features (B, N, D) in block ``block`` (0 is the first, -1 the last), fp32, prefix tokens left
    out, in row-major grid order:
    - "token": the block's output tokens (``output_hidden_states``), before the final norm;
    - "key", "query", "value": what the block's attention uses (``output_qkv``: after the query/key norms and the
      rotary embedding), the heads concatenated, so D is heads * head_dim.

    Only the blocks up to ``block`` run: an early block's features cost a fraction of a forward pass.
    """
    check_choice("facet", facet, FACETS)
    check_not_windowed(model, SWIN_FEATURES)
    x, qkv = _up_to_block(model, pixel_values, block, precision, need_qkv=facet != "token")
    p = model.config.num_prefix_tokens
    if facet == "token":
        return x[:, p:].float()
    chosen = {"query": qkv.q, "key": qkv.k, "value": qkv.v}[facet]  # (B, heads, T, head_dim)
    return chosen[:, :, p:].transpose(1, 2).flatten(2).float()  # (B, N, heads * head_dim)


def head_queries_and_keys(
    model: ViT, pixel_values: torch.Tensor, block: int, head: int, precision: str = "fp32"
) -> tuple[torch.Tensor, torch.Tensor]:
    """One head's queries and keys of the patch tokens in block ``block``: two (B, N, head_dim) fp32 tensors, as
    ``patch_features``' "query" and "key" facets give them (after the query/key norms and the rotary embedding), for
    that head only, from one pass through the blocks up to ``block``. What AttentionViz's joint embedding takes."""
    check_not_windowed(model, SWIN_FEATURES)
    heads = model.config.num_heads
    if not 0 <= head < heads:
        raise ValueError(f"head must be in [0, {heads - 1}]; got {head}")
    _, qkv = _up_to_block(model, pixel_values, block, precision, need_qkv=True)
    p = model.config.num_prefix_tokens
    return qkv.q[:, head, p:].float(), qkv.k[:, head, p:].float()


def _up_to_block(model: ViT, pixel_values: torch.Tensor, block: int, precision: str, need_qkv: bool):
    """Run the blocks up to ``block`` (0 is the first, -1 the last) and no further: its output tokens (B, T, D), and
    its queries, keys and values when ``need_qkv`` (else None)."""
    layers = len(model.blocks)
    if not -layers <= block < layers:
        raise ValueError(f"block must be in [0, {layers - 1}] (or -1 for the last); got {block}")
    block %= layers
    device = next(model.parameters()).device
    with torch.inference_mode(), autocast(precision, device.type):
        x, grid = model.embed(pixel_values.to(device))
        controls = model.block_arguments(grid, x.shape[0])  # rotary embeddings, a knocked-out model's masks
        for index in range(block + 1):
            x, _, qkv = model.blocks[index](x, controls[index], need_qkv=need_qkv and index == block)
    return x, qkv
