"""Every map method by name, in one place: what the batch CLI, the benchmark and the dashboard compute.

    result = method_maps(model, pixels, ["rollout", "relevance", "lens"])
    result.maps["relevance"]          # (rows, cols), for the top class unless ``target`` is given
    result.lens.probability[:, 0]     # with "lens": (layers, rows, cols)

One forward pass serves the attention-only maps and Chefer et al.'s two gradient maps (one backward
for both); LeGrad, TAM and Grad-CAM each run the passes their definition needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vitviz.explain.attention import attention_rollout, cls_attention
from vitviz.explain.common import HeadFusion, class_probabilities
from vitviz.explain.gradcam import grad_cam, norm1_gradients
from vitviz.explain.gradients import gradient_weighted_attention, gradient_weighted_rollout
from vitviz.explain.legrad import legrad, legrad_gradients
from vitviz.explain.lens import LogitLens, logit_lens
from vitviz.explain.transition import integrated_attention_gradient, transition_attention_map
from vitviz.model import Precision, autocast

# name -> what it is, in a line (the CLI's help and the dashboard's captions)
DESCRIPTIONS = {
    "rollout": "attention rollout over every block (Abnar & Zuidema 2020)",
    "cls": "the last block's [CLS] attention, mean over heads",
    "relevance": "gradient-weighted attention relevance (Chefer et al. 2021)",
    "grad-rollout": "gradient-weighted rollout: each block's heads fused by (gradient x attention)+, then rolled out",
    "legrad": "LeGrad: each block's attention gradient of its own prediction (Bousselham et al. 2025)",
    "tam": "Transition Attention Maps: attention as a Markov chain, integrated gradients (Yuan et al. 2021)",
    "gradcam": "Grad-CAM on the last block's norm1 tokens (as pytorch-grad-cam does for ViTs)",
    "lens": "logit lens: the class's probability read from each patch token by the head (last block)",
}
METHODS = tuple(DESCRIPTIONS)
CLASS_SPECIFIC = ("relevance", "grad-rollout", "legrad", "tam", "gradcam", "lens")
TAM_STEPS = 20  # integrated-gradient steps of Transition Attention Maps, the reference code's default


@dataclass(frozen=True)
class MethodMaps:
    probabilities: torch.Tensor  # (num_classes,) float32
    target: int  # the class the class-specific maps explain
    maps: dict[str, torch.Tensor]  # method -> (rows, cols) float32, detached
    lens: LogitLens | None = None  # with "lens": every block's maps, (layers, 1, rows, cols)


def method_maps(
    model: torch.nn.Module,
    pixels: torch.Tensor,
    methods: Sequence[str],
    target: int | None = None,
    precision: Precision = "fp32",
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> MethodMaps:
    """The maps of ``methods`` for one image ``pixels`` (1, 3, H, W), each read out through what the head reads
    (``output.readout``). ``target`` defaults to the top class. ``head_fusion`` and ``discard_ratio`` shape the
    rollout; ``start_layer`` is the first block of rollout, LeGrad and TAM."""
    unknown = [m for m in methods if m not in DESCRIPTIONS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if pixels.ndim != 4 or pixels.shape[0] != 1:
        raise ValueError(f"method_maps explains one image: pixels must be (1, 3, H, W); got {tuple(pixels.shape)}")
    needs_gradients = bool({"relevance", "grad-rollout"} & set(methods))
    device = pixels.device.type  # autocast on the device the model runs on
    with autocast(precision, device), torch.set_grad_enabled(needs_gradients):
        output = model(pixels, output_attentions=True, output_hidden_states="lens" in methods)
    if output.logits is None and set(methods) & set(CLASS_SPECIFIC):
        raise ValueError("class-specific maps need a classification head; this model is a backbone (num_classes=0)")
    probabilities = (
        class_probabilities(model, output.logits.float())[0].detach() if output.logits is not None else torch.zeros(0)
    )
    if target is None:
        target = int(probabilities.argmax()) if probabilities.numel() else 0
    elif not 0 <= target < probabilities.numel():
        raise ValueError(f"target must be in [0, {probabilities.numel() - 1}]; got {target}")
    gradients = None
    if needs_gradients:
        gradients = [g.float() for g in torch.autograd.grad(output.logits[0, target], output.attentions)]
    attentions = [a.detach().float() for a in output.attentions]
    grid = dict(num_prefix_tokens=output.num_prefix_tokens, grid_size=output.grid_size)
    pooling = output.readout.detach().float()  # explain what the classifier actually reads
    maps, lens = {}, None
    for method in methods:
        if method == "rollout":
            maps[method] = attention_rollout(
                attentions, head_fusion, discard_ratio, start_layer, pooling=pooling, **grid
            )
        elif method == "cls":
            maps[method] = cls_attention(attentions, layer=-1, head="mean", **grid)
        elif method == "relevance":
            maps[method] = gradient_weighted_attention(attentions, gradients, pooling=pooling, **grid)
        elif method == "grad-rollout":
            maps[method] = gradient_weighted_rollout(attentions, gradients, pooling=pooling, **grid)
        elif method == "legrad":
            with autocast(precision, device):
                _, layer_gradients = legrad_gradients(model, pixels, target)
            maps[method] = legrad([g.float() for g in layer_gradients], start_layer=start_layer, **grid)
        elif method == "tam":
            with autocast(precision, device):
                _, integrated = integrated_attention_gradient(model, pixels, target, TAM_STEPS)
            maps[method] = transition_attention_map(
                attentions, integrated.float(), pooling=pooling, start_layer=start_layer, **grid
            )
        elif method == "gradcam":
            with autocast(precision, device):
                _, activations, gradients_norm1 = norm1_gradients(model, pixels, target)
            maps[method] = grad_cam(activations.float(), gradients_norm1.float(), **grid)
        else:  # lens
            with autocast(precision, device):
                lens = logit_lens(model, [h.detach() for h in output.hidden_states], target, **grid)
            lens = LogitLens(lens.probability.float(), lens.votes, lens.readout_probability.float())
            maps[method] = lens.probability[-1]  # the last block's: the tokens the head reads
    return MethodMaps(probabilities, target, {name: m[0].detach().float() for name, m in maps.items()}, lens)
