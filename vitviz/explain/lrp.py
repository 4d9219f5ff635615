"""AttnLRP (Achtibat et al. 2024) and CP-LRP (Ali et al. 2022): layer-wise relevance propagation through vitviz's own
blocks, one forward and one backward pass, as LXT computes it (gradient x input under its rules).

    relevance = lrp_relevance(model, pixels, target, "attnlrp")   # (B, H, W): x * dS/dx summed over channels

The rules are in ``vitviz.model.relevance_rules``: norms and element-wise non-linearities by the identity rule, the
attention's matmuls by the uniform rule (AttnLRP) or its queries and keys held constant (CP-LRP), every linear layer
plain. S is the target's logit, so the pixels' relevance sums to S minus what the biases absorb. The methods' map
sums each patch's pixels (``MethodOutput.pixels`` keeps every pixel). They act on the blocks themselves, so they read
every family vitviz's ViT and Swin hold: registers, CLIP and SigLIP (the attention-pooling head is attention too),
the rotary families, Swin's windows and merges. A zero-shot head's cosine similarity is differentiated plainly.
"""

from __future__ import annotations

import torch

from vitviz.explain.common import target_score, traced
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.pixels import input_cells, per_patch
from vitviz.explain.target import TargetLike, class_target
from vitviz.model.relevance_rules import Rules, relevance_rules


def lrp_relevance(
    model: torch.nn.Module, pixel_values: torch.Tensor, target: TargetLike | torch.Tensor, rules: Rules
) -> torch.Tensor:
    """(B, H, W) float32: each pixel's relevance for each image's target logit under ``rules`` ("attnlrp" or
    "cp-lrp"), summed over the colour channels. ``target``: one class for every image or one per image."""
    target = class_target(model, target)
    pixels = traced(pixel_values)
    with relevance_rules(rules), torch.enable_grad():
        score = target_score(model(pixels).logits, target)
    (gradient,) = torch.autograd.grad(score, pixels)
    return (pixels * gradient).detach().float().sum(dim=1)


def _lrp_map(rules: Rules):
    def compute(inputs: MapInputs) -> MethodOutput:
        with inputs.autocast():
            pixels = lrp_relevance(inputs.model, inputs.pixels, inputs.target, rules)
        return MethodOutput(per_patch(pixels, input_cells(inputs), "sum"), pixels=pixels)

    return compute


ATTNLRP = Method(
    name="attnlrp",
    description="layer-wise relevance propagation with attention-aware rules, as LXT computes it",
    paper="Achtibat et al. 2024",
    compute=_lrp_map("attnlrp"),
    class_specific=True,
    cost="backward",
    cost_note="one backward pass to the pixels",
    caption="Bright: patches whose pixels carry the most relevance for the class (LRP relevance can be negative).",
    windowed=None,  # the rules act inside Swin's window attention and merges too
)

CP_LRP = Method(
    name="cp-lrp",
    description="conservative layer-wise relevance propagation, the attention held constant, as LXT computes it",
    paper="Ali et al. 2022",
    compute=_lrp_map("cp-lrp"),
    class_specific=True,
    cost="backward",
    cost_note="one backward pass to the pixels",
    caption="Bright: patches whose pixels carry the most relevance for the class (LRP relevance can be negative).",
    windowed=None,
)
