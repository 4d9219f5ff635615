"""Interventions on the attention: heads knocked out, tokens taken out of every query's view.

``model(x, head_mask=M, key_mask=K)`` applies them to one forward pass; ``ViT.knock_out(heads, tokens)`` gives a
model (sharing every weight) that applies them to all of its passes, for code that only calls the model (the
dashboard's analyses, the explanation methods). This module checks the masks and builds them from lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vitviz.model.layers import Ablation

ABLATIONS = ("zero", "mean")


@dataclass(frozen=True)
class Interventions:
    """What a knocked-out model does to every forward pass."""

    heads: tuple[tuple[int, int], ...] = ()  # (layer, head) pairs whose output is removed
    tokens: tuple[int, ...] = ()  # token indices that no query attends to (e.g. 0 for [CLS], the registers after it)
    ablation: Ablation = "zero"  # a removed head's output becomes zeros, or its mean over the batch

    def __bool__(self) -> bool:
        return bool(self.heads or self.tokens)


def head_mask_of(heads: Sequence[tuple[int, int]], layers: int, num_heads: int) -> torch.Tensor:
    """(layers, heads) float mask: 0 for each listed (layer, head), 1 elsewhere."""
    mask = torch.ones(layers, num_heads)
    for layer, head in heads:
        if not (0 <= layer < layers and 0 <= head < num_heads):
            raise ValueError(
                f"head ({layer}, {head}) does not exist: the model has {layers} layers of {num_heads} heads"
            )
        mask[layer, head] = 0.0
    return mask


def check_head_mask(mask: torch.Tensor, batch: int, layers: int, num_heads: int) -> torch.Tensor:
    """A head mask (layers, heads) or (B, layers, heads) as (B or 1, layers, heads), or a clear error."""
    if mask.ndim == 2:
        mask = mask[None]
    if mask.ndim != 3 or mask.shape[1:] != (layers, num_heads) or mask.shape[0] not in (1, batch):
        raise ValueError(
            f"head_mask must be (layers, heads) = ({layers}, {num_heads}) or (B, layers, heads) with "
            f"B = {batch}; got {tuple(mask.shape)}"
        )
    if not torch.isfinite(mask).all():
        raise ValueError("head_mask holds NaN or infinite values")
    return mask


def check_key_mask(mask: torch.Tensor, batch: int, tokens: int) -> torch.Tensor:
    """A key mask (B, T) of booleans (True: the key takes part), or a clear error; a row that takes every key out
    would leave its queries nothing to attend to, so it is refused."""
    if mask.dtype != torch.bool:
        raise ValueError(f"key_mask must hold booleans (True: the key takes part); got {mask.dtype}")
    if mask.ndim == 1:
        mask = mask[None].expand(batch, -1)
    if mask.shape != (batch, tokens):
        raise ValueError(f"key_mask must be (B, T) = ({batch}, {tokens}); got {tuple(mask.shape)}")
    if not mask.any(dim=1).all():
        raise ValueError("key_mask takes every key of an image out: its queries would have nothing to attend to")
    return mask


def key_mask_of(tokens: Sequence[int], batch: int, count: int, device: torch.device | None = None) -> torch.Tensor:
    """(B, T) booleans: False for each listed token index, True elsewhere."""
    mask = torch.ones(batch, count, dtype=torch.bool, device=device)
    for token in tokens:
        if not 0 <= token < count:
            raise ValueError(f"token {token} does not exist: this input has {count} tokens")
        mask[:, token] = False
    return mask
