"""Class-specific maps from attention and its gradients: Chefer et al.'s relevance and gradient-weighted rollout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from vitviz.explain.attention import discard_weakest, fused_rollout
from vitviz.explain.common import (
    LayoutArgument,
    Readout,
    TokenGrid,
    check_attentions,
    check_not_divided,
    check_start_layer,
    read_out,
    target_score,
    token_grid,
    traced,
)
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.stages import gradient_rollout_across_stages, relevance_across_stages
from vitviz.explain.target import TargetLike, class_target
from vitviz.model import ViTOutput


class AttentionGradients(NamedTuple):
    output: ViTOutput  # the forward pass, with its attentions
    gradients: tuple[torch.Tensor, ...]  # per block (B, heads, T, T): gradients[l] belongs to output.attentions[l]


def attention_gradients(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: TargetLike | Sequence[int] | torch.Tensor
) -> AttentionGradients:
    """Forward with attentions, then the gradient of each image's target logit w.r.t. every block's
    attention. Returns (output, gradients); ``gradients[l]`` belongs to ``output.attentions[l]``.

    ``target`` is one class for all images or one per image (batch > 1 supported: images do not
    interact, so summing the chosen logits gives each image its own gradient).
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    check_not_divided(model, "attention gradients pair each block's one attention with its gradient")
    output = model(traced(pixel_values), output_attentions=True)
    gradients = torch.autograd.grad(target_score(output.logits, target), output.attentions)
    return AttentionGradients(output, tuple(gradients))


def _check_pairs(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument,
    grid_size: tuple[int, ...] | None,
    function: str,
) -> TokenGrid:
    """One gradient per block's attention, the attentions well formed (check_attentions); the layout's grid."""
    grid = token_grid(num_prefix_tokens, grid_size, function)
    check_attentions(attentions, grid)
    if len(gradients) != len(attentions):
        raise ValueError(f"{len(gradients)} gradients for {len(attentions)} attention blocks")
    return grid


def _positive_weighted(attention: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """mean_heads((grad * A)+): (B, heads, T, T) x2 -> (B, T, T)."""
    if attention.shape != gradient.shape:
        raise ValueError(f"gradient shape {tuple(gradient.shape)} differs from attention {tuple(attention.shape)}")
    return (gradient * attention).clamp(min=0).mean(dim=1)


def gradient_weighted_attention(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
) -> torch.Tensor:
    """Class-specific relevance of Chefer, Gur & Wolf (2021), "Generic Attention-model Explainability".

    R = I; for each block l (from ``start_layer``, in [0, L - 1]): R <- R + mean_heads((dy/dA_l * A_l)+) @ R,
    with each block's gradient paired with that same block's attention. Returns the [CLS] row over
    the patches (``readout="mean"``: the mean of the patch rows, for mean-pooled models; ``output.readout``: the
    rows the head reads, for any model). ``num_prefix_tokens``: the token layout (``output.layout``), or a plain
    ViT's prefix count with ``grid_size``.
    """
    grid = _check_pairs(attentions, gradients, num_prefix_tokens, grid_size, "gradient_weighted_attention")
    check_start_layer(start_layer, len(attentions))
    B, _, T, _ = attentions[0].shape
    relevance = torch.eye(T, dtype=attentions[0].dtype, device=attentions[0].device).repeat(B, 1, 1)
    for attention, gradient in list(zip(attentions, gradients))[start_layer:]:
        relevance = relevance + _positive_weighted(attention, gradient) @ relevance
    return grid.as_map(read_out(relevance, readout, grid.num_prefix_tokens))


def gradient_weighted_rollout(
    attentions: Sequence[torch.Tensor],
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
    discard_ratio: float = 0.0,
) -> torch.Tensor:
    """Rollout of gradient-weighted attention: each block's heads are fused by
    mean((dy/dA * A)+) (its own gradient), then rolled out as in ``attention_rollout``; the layout as there."""
    grid = _check_pairs(attentions, gradients, num_prefix_tokens, grid_size, "gradient_weighted_rollout")
    p = grid.num_prefix_tokens
    fused = [discard_weakest(_positive_weighted(a, g), discard_ratio, p) for a, g in zip(attentions, gradients)]
    return grid.as_map(fused_rollout(fused, start_layer, readout, p))


# Both read the gradients of the shared forward pass (``needs``): one backward pass serves the two. They start at
# block 0 whatever --start-layer says, as they always have: Chefer et al. accumulate relevance over every block.
# On a model that attends in windows and merges tokens (Swin) both read stages.py's rules, over the first stage.
def _relevance_map(inputs: MapInputs) -> MethodOutput:
    if inputs.windowed:
        return MethodOutput(
            relevance_across_stages(
                inputs.attentions, inputs.attention_gradients, inputs.layouts, readout=inputs.readout
            )
        )
    return MethodOutput(
        gradient_weighted_attention(
            inputs.attentions, inputs.attention_gradients, **inputs.layout, readout=inputs.readout
        )
    )


def _gradient_rollout_map(inputs: MapInputs) -> MethodOutput:
    if inputs.windowed:
        return MethodOutput(
            gradient_rollout_across_stages(
                inputs.attentions, inputs.attention_gradients, inputs.layouts, readout=inputs.readout
            )
        )
    return MethodOutput(
        gradient_weighted_rollout(
            inputs.attentions, inputs.attention_gradients, **inputs.layout, readout=inputs.readout
        )
    )


RELEVANCE = Method(
    name="relevance",
    description="gradient-weighted attention relevance",
    paper="Chefer et al. 2021",
    compute=_relevance_map,
    class_specific=True,
    cost="backward",
    cost_note="one backward pass",
    caption="Bright: patches whose attention, weighted by its gradient, raises the class's score.",
    needs=("attention_gradients",),
    windowed=None,  # across windows and stages: stages.relevance_across_stages
)
GRADIENT_ROLLOUT = Method(
    name="grad-rollout",
    description="gradient-weighted rollout: each block's heads fused by (gradient x attention)+, then rolled out",
    compute=_gradient_rollout_map,
    class_specific=True,
    cost="backward",
    cost_note="one backward pass",
    caption="Like rollout, but each block's heads count by how much they raise the class's score.",
    needs=("attention_gradients",),
    windowed=None,  # across windows and stages: stages.gradient_rollout_across_stages
)
