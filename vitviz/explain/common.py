"""What every explanation shares: argument checks, the patch grid, and how the head's reading
(``readout``: [CLS], the mean patch row, or ``output.readout``) is applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from vitviz.layout import TokenLayout, is_hierarchical

HeadFusion = Literal["mean", "max", "min"]
# What the classifier reads: for any model, the (B, T) weights it gives each token's final state
# (``output.readout``: DeiT's [CLS] and distillation tokens half each, SigLIP's attention-pooling weights...),
# or, by name, the [CLS] row or the mean of the patch rows. Every map below is read out through it. (The model's
# ``config.pooling`` is how the head pools, "cls+mean" and "map" included; ``output.readout`` is its result.)
Readout = Literal["cls", "mean"] | torch.Tensor
HEAD_FUSIONS = ("mean", "max", "min")


def class_probabilities(model: torch.nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """The model's own probabilities for ``logits`` (vitviz's ``ViT.probabilities``: a softmax over the classes,
    or a sigmoid per class for SigLIP's prompts); a softmax for any other module. At least fp32."""
    if hasattr(model, "probabilities"):
        return model.probabilities(logits)
    return logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(dim=-1)


def model_layouts(model: torch.nn.Module) -> tuple[TokenLayout, ...] | None:
    """The per-block layouts a model gives its configured input before any pass (its ``input_layouts()``, which
    a model whose blocks attend in windows or change their tokens has: Swin), or None for a model that says none
    (a ViT, whose blocks all attend globally over one set of tokens)."""
    layouts = getattr(model, "input_layouts", None)
    return layouts() if callable(layouts) else None


def is_windowed(model: torch.nn.Module) -> bool:
    """Whether ``model``'s blocks attend in windows or merge tokens, as its layouts say (``is_hierarchical``)."""
    return is_hierarchical(model_layouts(model))


def check_not_windowed(model: torch.nn.Module, what: str) -> None:
    """Refuse in one line a model that attends in windows and merges tokens (Swin) where ``what`` (a clause saying
    what the function reads) is written for a ViT's one set of tokens."""
    if is_windowed(model):
        raise ValueError(f"{what}; Swin attends in windows and merges tokens between stages")


def check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")


def fuse_heads(attention: torch.Tensor, head_fusion: HeadFusion = "mean") -> torch.Tensor:
    """(B, heads, T, T) -> (B, T, T) by the mean, max or min over heads."""
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    if head_fusion == "mean":
        return attention.mean(dim=1)
    return attention.amax(dim=1) if head_fusion == "max" else attention.amin(dim=1)


def check_attentions(attentions: Sequence[torch.Tensor], num_prefix_tokens: int, grid_size) -> int:
    """Validate shapes; return T."""
    if len(attentions) == 0:
        raise ValueError("attentions is empty: run the model with output_attentions=True")
    T = attentions[0].shape[-1]
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-2:] != (T, T) or a.shape[:2] != attentions[0].shape[:2]:
            raise ValueError(f"attentions[{i}] has shape {tuple(a.shape)}; expected (B, heads, {T}, {T}) like block 0")
    if not 0 <= num_prefix_tokens < T:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} must be in [0, T={T})")
    if grid_size is not None and grid_size[0] * grid_size[1] != T - num_prefix_tokens:
        raise ValueError(
            f"grid {grid_size[0]}x{grid_size[1]} has {grid_size[0] * grid_size[1]} patches, "
            f"but T - num_prefix_tokens = {T - num_prefix_tokens}"
        )
    return T


def check_start_layer(start_layer: int, num_layers: int) -> None:
    """Blocks are counted from 0; a negative start is refused rather than read from the end."""
    if not 0 <= start_layer < num_layers:
        raise ValueError(
            f"start_layer must be in [0, {num_layers - 1}] for a model with {num_layers} blocks; got {start_layer}"
        )


def target_indices(logits: torch.Tensor | None, target: int | Sequence[int] | torch.Tensor) -> torch.Tensor:
    """One class for every image, or one per image, as (B,) indices checked against the head."""
    if logits is None:
        raise ValueError("class-specific maps need a classification head (this model is a backbone)")
    B, num_classes = logits.shape
    targets = torch.as_tensor(target, device=logits.device).long().reshape(-1)
    if targets.numel() == 1:
        targets = targets.expand(B)
    if targets.shape != (B,) or not ((0 <= targets) & (targets < num_classes)).all():
        raise ValueError(f"target must be one class or one per image, each in [0, {num_classes - 1}]; got {target}")
    return targets


def target_score(logits: torch.Tensor | None, target: int | Sequence[int] | torch.Tensor) -> torch.Tensor:
    """The sum over images of each image's target logit: images do not interact, so its gradient gives every
    image its own."""
    targets = target_indices(logits, target)  # first: a backbone's logits are None
    return logits.gather(1, targets[:, None]).sum()


def as_map(values: torch.Tensor, grid_size: tuple[int, int] | None) -> torch.Tensor:
    """(..., N) -> (..., rows, cols) when the grid is known."""
    return values if grid_size is None else values.reshape(*values.shape[:-1], *grid_size)


def check_readout(readout: Readout) -> None:
    if not isinstance(readout, torch.Tensor):
        check_choice("readout", readout, ("cls", "mean"))
    elif readout.ndim != 2:
        raise ValueError(f"a readout tensor holds (B, T) token weights (output.readout); got {tuple(readout.shape)}")


def read_out(matrix: torch.Tensor, readout: Readout, num_prefix_tokens: int) -> torch.Tensor:
    """The row the classifier reads, over the patches: [CLS]'s (token 0), the mean of the patch rows,
    or the rows weighted by a (B, T) readout."""
    check_readout(readout)
    p = num_prefix_tokens
    if isinstance(readout, torch.Tensor):
        if readout.shape != matrix.shape[:2]:
            raise ValueError(f"readout weights {tuple(readout.shape)} do not match (B, T) = {tuple(matrix.shape[:2])}")
        return (readout.to(matrix.dtype)[:, None, :] @ matrix)[:, 0, p:]  # (B, N)
    if readout == "cls":
        if p == 0:
            raise ValueError("readout='cls' needs a [CLS] token (num_prefix_tokens >= 1); use readout='mean'")
        return matrix[:, 0, p:]
    return matrix[:, p:, p:].mean(dim=1)
