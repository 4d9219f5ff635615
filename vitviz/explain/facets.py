"""Patch features from any block, in any facet: the patch's token after the block, or its key, query or value with
the heads side by side (Amir et al. 2021, "Deep ViT Features as Dense Visual Descriptors", call these facets; DINO's
keys are their favourite for parts and correspondences). What ``features.py``'s PCA colours, matches and parts take.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from vitviz.explain.common import check_choice
from vitviz.model import ViT, autocast

Facet = Literal["token", "key", "query", "value"]
FACETS: tuple[str, ...] = get_args(Facet)


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
    layers = len(model.blocks)
    if not -layers <= block < layers:
        raise ValueError(f"block must be in [0, {layers - 1}] (or -1 for the last); got {block}")
    block %= layers
    device = next(model.parameters()).device
    with torch.inference_mode(), autocast(precision, device.type):
        x, grid = model.embed(pixel_values.to(device))
        controls = model.block_arguments(grid, x.shape[0])  # rotary embeddings, a knocked-out model's masks
        for index in range(block + 1):
            x, _, qkv = model.blocks[index](x, controls[index], need_qkv=index == block and facet != "token")
    p = model.config.num_prefix_tokens
    if facet == "token":
        return x[:, p:].float()
    chosen = {"query": qkv.q, "key": qkv.k, "value": qkv.v}[facet]  # (B, heads, T, head_dim)
    return chosen[:, :, p:].transpose(1, 2).flatten(2).float()  # (B, N, heads * head_dim)
