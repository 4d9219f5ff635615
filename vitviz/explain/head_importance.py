"""Head importance by knockout: remove one head, re-run the model, and see how much the target's logit and
probability move (Michel et al. 2019, "Are Sixteen Heads Really Better than One?", ask this question of every head;
Darcet et al. 2023 take registers out the same way). The model's own ``head_mask`` does the removing.

A model that attends in windows (Swin) has a head mask too, applied in every window of a block
(``windowed_head_importance``): each head is removed in one forward pass of its own, copies of the image side by
side; its stages' heads differ in number, so the result's heads are the most of any block, NaN past a block's own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from vitviz.explain.common import class_probabilities, is_windowed, target_indices
from vitviz.explain.target import TargetLike, class_target
from vitviz.model import ABLATIONS, Swin, ViT, autocast
from vitviz.model.layers import Ablation


@dataclass(frozen=True)
class HeadImportance:
    logit_change: torch.Tensor  # (B, layers, heads): the target's logit with that head removed, minus the intact one
    probability_change: torch.Tensor  # (B, layers, heads): the same for its probability
    logit: torch.Tensor  # (B,) the intact model's target logit
    probability: torch.Tensor  # (B,) and its probability
    target: torch.Tensor  # (B,) the class explained in each image


def head_importance(
    model: ViT,
    pixel_values: torch.Tensor,
    target: TargetLike | Sequence[int] | torch.Tensor | None = None,
    ablation: Ablation = "zero",
    progress: Callable[[int], None] | None = None,
    precision: str = "fp32",
    max_batch: int = 64,
) -> HeadImportance:
    """How much each head alone matters to the target class (default: each image's top prediction): the change of
    its logit and probability when that head's output is removed (``ablation="zero"``) or replaced by its mean over
    the batch ("mean"), one head at a time; negative where the head helped. (B, layers, heads) each.

    Equal to a forward pass per head with ``head_mask`` zero at that head (tested), but cheaper: the blocks before
    a head's own are the intact model's, so they run once, and the copies of an image with each head of one block
    removed run the rest of the model as one batch (of at most ``max_batch`` images): ViT-B/16's 144 heads run the
    blocks of 78 forward passes instead of 144, and took the time of 61 on a 2-core CPU (bench/bench_heads.py).
    ``progress(layer)`` follows the layers.
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation must be 'zero' or 'mean'; got {ablation!r}")
    if is_windowed(model):
        if ablation != "zero":
            raise ValueError("a Swin's heads are knocked out by zeroing them (ablation='zero'); 'mean' is for a ViT")
        return windowed_head_importance(model, pixel_values, target, progress, precision, max_batch)
    c = model.config
    if c.num_classes == 0:
        raise ValueError("head importance needs a classifier: this model is a backbone (no logits)")
    B, L, H = pixel_values.shape[0], c.num_layers, c.num_heads
    device = next(model.parameters()).device
    with torch.inference_mode(), autocast(precision, device.type):
        x, grid = model.embed(pixel_values.to(device))
        output = model(pixel_values.to(device), output_hidden_states=True)
        inputs = [x, *output.hidden_states[:-1]]  # what each block received in the intact model
        targets = target_indices(output.logits, target if target is not None else output.logits.argmax(dim=-1))
        logit, probability = _chosen(model, output.logits, targets[:, None])
        logits = torch.empty(L, H, B, device=device)
        probabilities = torch.empty(L, H, B, device=device)
        per_chunk = max(1, max_batch // B)  # heads removed side by side in one batch
        for layer in range(L):
            for start in range(0, H, per_chunk):
                heads = range(start, min(H, start + per_chunk))
                mask = torch.ones(len(heads), B, L, H, device=device)
                for row, head in enumerate(heads):
                    mask[row, :, layer, head] = 0.0
                hidden = inputs[layer].repeat(len(heads), 1, 1)  # (heads x B, T, D), head-major
                controls = model.block_arguments(grid, hidden.shape[0], mask.flatten(0, 1), head_ablation=ablation)
                for index in range(layer, L):
                    hidden = model.blocks[index](hidden, controls[index]).hidden
                ablated = model.forward_head(hidden, grid).logits.float().view(len(heads), B, -1)
                index = targets.expand(len(heads), B)[..., None]  # each copy's target class
                chosen = _chosen(model, ablated, index)
                logits[layer, start : start + len(heads)], probabilities[layer, start : start + len(heads)] = chosen
            if progress is not None:
                progress(layer)
    return _importance(logits, probabilities, logit, probability, targets)


def windowed_head_importance(
    model: Swin,
    pixel_values: torch.Tensor,
    target: TargetLike | Sequence[int] | torch.Tensor | None = None,
    progress: Callable[[int], None] | None = None,
    precision: str = "fp32",
    max_batch: int = 64,
) -> HeadImportance:
    """``head_importance`` of a model that attends in windows (Swin): each head zeroed in every window of its block
    through the model's ``head_mask``, one forward pass per head (copies of the images side by side, at most
    ``max_batch`` a batch). (B, layers, heads) each, heads the most of any block, NaN past a block's own."""
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    c = model.config
    if c.num_classes == 0:
        raise ValueError("head importance needs a classifier: this model is a backbone (no logits)")
    B, L, H = pixel_values.shape[0], c.num_layers, max(c.num_heads)
    per_block = [heads for depth, heads in zip(c.depths, c.num_heads, strict=True) for _ in range(depth)]
    device = next(model.parameters()).device
    pixels = pixel_values.to(device)
    logits = torch.full((L, H, B), float("nan"), device=device)
    probabilities = torch.full((L, H, B), float("nan"), device=device)
    with torch.inference_mode(), autocast(precision, device.type):
        output = model(pixels)
        targets = target_indices(output.logits, target if target is not None else output.logits.argmax(dim=-1))
        logit, probability = _chosen(model, output.logits, targets[:, None])
        removed = [(layer, head) for layer in range(L) for head in range(per_block[layer])]
        per_chunk = max(1, max_batch // B)
        for start in range(0, len(removed), per_chunk):
            chunk = removed[start : start + per_chunk]
            mask = torch.ones(len(chunk), B, L, H, device=device)
            for row, (layer, head) in enumerate(chunk):
                mask[row, :, layer, head] = 0.0
            ablated = model(pixels.repeat(len(chunk), 1, 1, 1), head_mask=mask.flatten(0, 1)).logits.float()
            ablated = ablated.view(len(chunk), B, -1)
            chosen_logits, chosen_probabilities = _chosen(model, ablated, targets.expand(len(chunk), B)[..., None])
            for row, (layer, head) in enumerate(chunk):
                logits[layer, head], probabilities[layer, head] = chosen_logits[row], chosen_probabilities[row]
                if progress is not None and head == per_block[layer] - 1:
                    progress(layer)
    return _importance(logits, probabilities, logit, probability, targets)


def _chosen(model: torch.nn.Module, logits: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's logit and probability, fp32: ``logits`` (..., classes) read at ``index`` (..., 1)."""
    logits = logits.float()
    return logits.gather(-1, index)[..., 0], class_probabilities(model, logits).gather(-1, index)[..., 0]


def _importance(
    logits: torch.Tensor,
    probabilities: torch.Tensor,
    logit: torch.Tensor,
    probability: torch.Tensor,
    targets: torch.Tensor,
) -> HeadImportance:
    """The record from the knocked-out (layers, heads, B) scores and the intact (B,) ones, on the CPU."""
    return HeadImportance(
        logit_change=(logits - logit).permute(2, 0, 1).cpu(),
        probability_change=(probabilities - probability).permute(2, 0, 1).cpu(),
        logit=logit.cpu(),
        probability=probability.cpu(),
        target=targets.cpu(),
    )
