"""Transition Attention Maps (Yuan et al. 2021, "Explaining Information Flow Inside Vision Transformers Using
Markov Chain", XAI4Debugging workshop at NeurIPS; code: XianrenYty/Transition_Attention_Maps): the head's
attention followed backwards through the blocks as a Markov chain, weighted by integrated gradients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from vitviz.explain.common import (
    LayoutArgument,
    Readout,
    check_attentions,
    check_start_layer,
    read_out,
    target_score,
    token_grid,
    traced,
)
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.target import TargetLike, class_target
from vitviz.model import ViTOutput

TAM_STEPS = 20  # integrated-gradient steps of Transition Attention Maps, the reference code's default


class IntegratedGradient(NamedTuple):
    output: ViTOutput  # the last pass's, at alpha = 1: the input's own attentions
    gradient: torch.Tensor  # (B, heads, T, T) the last block's attention gradient, integrated along the path


def integrated_attention_gradient(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    target: TargetLike | Sequence[int] | torch.Tensor,
    steps: int = TAM_STEPS,
) -> IntegratedGradient:
    """The last block's attention gradient of the target logit, integrated along the straight path from a black
    image (0 after normalising: the data set's mean colour) to the input (Sundararajan et al. 2017).

    The mean over alpha = 0, 1/(steps - 1), ..., 1 of d y_target(alpha x) / d A_last, as the TAM reference code
    computes it (``np.linspace(0, 1, steps)``: both ends included): (B, heads, T, T). ``steps`` forward and
    backward passes; ``target`` is one class or one per image. Returns (output, gradient), ``output`` being the
    last pass's, at alpha = 1: the input's own attentions.
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    if steps < 2:
        raise ValueError(f"steps must be at least 2 (the black image and the input); got {steps}")
    total = None
    with torch.enable_grad():
        for alpha in torch.linspace(0, 1, steps, dtype=torch.float64).tolist():  # np.linspace, as the reference
            output = model(traced(pixel_values) * alpha, output_attentions=True)
            (gradient,) = torch.autograd.grad(target_score(output.logits, target), output.attentions[-1])
            total = gradient if total is None else total + gradient
    return IntegratedGradient(output, total / steps)


def transition_attention_map(
    attentions: Sequence[torch.Tensor],
    integrated_gradient: torch.Tensor,
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
) -> torch.Tensor:
    """Transition Attention Map: (B, rows, cols), or (B, N) without a grid.

    The state starts as what the head reads in the last block's head-averaged attention (the [CLS] row) and moves
    down the blocks as a Markov chain whose transitions include the residual path: s <- s (mean_heads(A_l) + I)
    for l = L-2 down to ``start_layer`` (unnormalised, as in the reference code: a constant factor per block).
    It is then weighted token by token by mean_heads(IG)+ read the same way, IG being
    ``integrated_attention_gradient``. The reference code's defaults: ``start_layer=4`` for 12-block models,
    20 steps. ``readout`` reads the rows the head reads: "cls", "mean" (patch rows) or ``output.readout``.
    ``num_prefix_tokens``: the token layout (``output.layout``), or a plain ViT's prefix count with ``grid_size``.
    """
    grid = token_grid(num_prefix_tokens, grid_size, "transition_attention_map")
    check_attentions(attentions, grid)
    p = grid.num_prefix_tokens
    check_start_layer(start_layer, len(attentions))
    if integrated_gradient.shape != attentions[-1].shape:
        raise ValueError(
            f"integrated_gradient {tuple(integrated_gradient.shape)} must match the last block's attention "
            f"{tuple(attentions[-1].shape)}"
        )
    T = attentions[0].shape[-1]
    identity = torch.eye(T, dtype=attentions[0].dtype, device=attentions[0].device)
    transition = attentions[-1].mean(dim=1)  # (B, T, T): row t is the state that starts from token t
    for attention in reversed(attentions[start_layer:-1]):
        transition = transition @ (attention.mean(dim=1) + identity)  # (B, T, T)
    states = read_out(transition, readout, p)  # (B, N)
    weights = read_out(integrated_gradient.clamp(min=0).mean(dim=1), readout, p)  # (B, N)
    return grid.as_map(states * weights)


def _tam_map(inputs: MapInputs) -> MethodOutput:
    with inputs.autocast():
        _, integrated = integrated_attention_gradient(inputs.model, inputs.pixels, inputs.target, TAM_STEPS)
    return MethodOutput(
        transition_attention_map(
            inputs.attentions,
            integrated.float(),
            **inputs.layout,
            readout=inputs.readout,
            start_layer=inputs.options.start_layer,
        )
    )


TAM = Method(
    name="tam",
    description="Transition Attention Maps: attention as a Markov chain, integrated gradients",
    paper="Yuan et al. 2021",
    compute=_tam_map,
    class_specific=True,
    cost="repeated passes",
    cost_note=f"{TAM_STEPS} forward and backward passes",
    caption="Bright: patches the class's information flows from, through the attention as a Markov chain.",
    windowed="needs global attention over one set of tokens for its Markov chain; Swin attends in windows and merges "
    "tokens between stages",
)
