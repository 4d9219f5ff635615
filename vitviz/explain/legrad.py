"""LeGrad (Bousselham et al., ICCV 2025, "LeGrad: An Explainability Method for Vision Transformers via
Feature Formation Sensitivity"): how sensitive each block's own prediction is to its attention map."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitviz.explain.common import LayoutArgument, check_attentions, check_start_layer, target_score, token_grid, traced
from vitviz.explain.gradients import AttentionGradients
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.target import TargetLike, class_target


def legrad_gradients(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: TargetLike | Sequence[int] | torch.Tensor
) -> AttentionGradients:
    """One forward pass, then for every block l the gradient of s_l w.r.t. that block's attention A_l.

    s_l is the target logit read from block l's output tokens by the model's own final LayerNorm,
    pooling and head (``model.forward_head``), as if block l were the last; for the last block it is the
    model's logit. Returns (output, gradients), ``gradients[l]`` (B, heads, T, T) belonging to
    ``output.attentions[l]``. ``target``: one class, or one per image.
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    with torch.enable_grad():
        output = model(traced(pixel_values), output_attentions=True, output_hidden_states=True)
        target_score(output.logits, target)  # validates the head and the target before L backward passes
        gradients = []
        for hidden, attention in zip(output.hidden_states, output.attentions):
            score = target_score(model.forward_head(hidden, output.grid_size).logits, target)
            (gradient,) = torch.autograd.grad(score, attention, retain_graph=True)
            gradients.append(gradient)
    return AttentionGradients(output, tuple(gradients))


def legrad(
    gradients: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    start_layer: int = 0,
) -> torch.Tensor:
    """LeGrad's map from ``legrad_gradients``: (B, rows, cols), or (B, N) without a grid.

    Per block l, as Bousselham et al.'s code (WalBouss/LeGrad) computes it for ViTs: E_l = the mean
    over heads and over all T query rows of ReLU(ds_l/dA_l) (``grad.clamp(min=0).mean(heads).mean(rows)``),
    a (B, T) vector whose patch entries are kept; the map is the mean of E_l over the blocks from
    ``start_layer`` to the last. Only the rows of the tokens the head reads carry gradient (the
    [CLS] row, the patch rows for mean pooling, the rows the pooling head weights for "map"), so a mean
    over every row already reads the map out the way the head does, with no ``pooling`` argument.
    The paper aggregates all blocks; the released wrapper defaults to the last two (``start_layer=L - 2``)
    and sums rather than averages (the same map up to a constant). Its final min-max scaling is left to
    the plots, like every map here. ``num_prefix_tokens``: the token layout (``output.layout``), or a plain ViT's
    prefix count with ``grid_size``.
    """
    grid = token_grid(num_prefix_tokens, grid_size, "legrad")
    check_attentions(gradients, grid)
    check_start_layer(start_layer, len(gradients))
    p = grid.num_prefix_tokens
    per_layer = [g.clamp(min=0).mean(dim=1).mean(dim=1)[:, p:] for g in gradients[start_layer:]]
    return grid.as_map(torch.stack(per_layer).mean(dim=0))  # (B, N) -> (B, rows, cols)


def _legrad_map(inputs: MapInputs) -> MethodOutput:
    with inputs.autocast():
        _, gradients = legrad_gradients(inputs.model, inputs.pixels, inputs.target)
    gradients = [g.float() for g in gradients]
    return MethodOutput(legrad(gradients, **inputs.layout, start_layer=inputs.options.start_layer))


LEGRAD = Method(
    name="legrad",
    description="LeGrad: each block's attention gradient of its own prediction",
    paper="Bousselham et al. 2025",
    compute=_legrad_map,
    class_specific=True,
    cost="backward per block",
    cost_note="one backward pass per block",
    caption="Bright: patches whose attention, at every block, the class's score is most sensitive to.",
    windowed="reads every block's tokens through the head as if it were the last, which only Swin's last stage can be",
)
