"""One image through one model, with everything the dashboard draws from it.

``analyse_image`` runs the forward pass once and keeps the attentions; every map the page shows
afterwards is a cheap function of that result (see vitviz.explain), so moving a slider never
re-runs the model. Class-specific maps need gradients, and the logit lens every block's tokens, so
``class_maps`` and ``logit_lens`` run their own passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from vitviz import explain
from vitviz.model import Precision, ViT, autocast


@dataclass(frozen=True)
class ImageAnalysis:
    probabilities: np.ndarray  # (num_classes,)
    attentions: tuple[torch.Tensor, ...]  # per block (1, heads, T, T), float32
    grid_size: tuple[int, int]  # (rows, cols) of this input
    num_prefix_tokens: int
    box: tuple[float, float, float, float]  # where in the photo the model's input came from
    pixel_values: torch.Tensor  # (1, 3, H, W), the model's input, for faithfulness runs
    readout: torch.Tensor  # (1, T) the weight the head gives each token: every map is read out through it
    token_norms: torch.Tensor  # (layers, T) the norm of every token after every block
    pool_attention: torch.Tensor | None = None  # (1, heads, N) the attention-pooling head's weights, if any

    @property
    def maps_args(self) -> dict:
        return {"num_prefix_tokens": self.num_prefix_tokens, "grid_size": self.grid_size}

    @property
    def readout_args(self) -> dict:
        """maps_args and what the head reads: the arguments of rollout and the class-specific maps."""
        return self.maps_args | {"pooling": self.readout}


def analyse_image(model: ViT, image: Image.Image, precision: Precision = "fp32") -> ImageAnalysis:
    """Preprocess with the model's own recipe, run once with attentions, keep the results."""
    pixels = model.transform(image)[None]
    with torch.inference_mode(), autocast(precision):
        output = model(pixels, output_attentions=True, output_hidden_states=True)
    probabilities = output.logits[0].float().softmax(-1).numpy() if output.logits is not None else np.zeros(0)
    pool_attention = output.pool_attention.float() if output.pool_attention is not None else None
    return ImageAnalysis(
        probabilities=probabilities,
        attentions=tuple(a.float() for a in output.attentions),
        grid_size=output.grid_size,
        num_prefix_tokens=output.num_prefix_tokens,
        box=model.transform.crop_box(*image.size),
        pixel_values=pixels,
        readout=output.readout.float(),
        token_norms=explain.token_norms(output.hidden_states)[0],
        pool_attention=pool_attention,
    )


def class_maps(
    model: ViT, analysis: ImageAnalysis, target: int, precision: Precision = "fp32",
    methods: Sequence[str] = ("relevance", "grad-rollout"),
) -> dict[str, np.ndarray]:
    """The class-specific maps of ``methods`` (any of explain.CLASS_SPECIFIC) for ``target``, each (rows, cols).
    They need gradients, so they run their own passes (explain.method_maps)."""
    result = explain.method_maps(model, analysis.pixel_values, methods, target, precision)
    return {name: m.numpy() for name, m in result.maps.items()}


def logit_lens(model: ViT, analysis: ImageAnalysis, target: int, precision: Precision = "fp32") -> dict[str, np.ndarray]:
    """The patch-level logit lens for ``target``: "probability" (layers, rows, cols), the class's probability
    read from each patch token; "votes" (layers, rows, cols), each patch's top class; "readout" (layers,), the
    class's probability when the head reads that block's output whole."""
    lens = explain.method_maps(model, analysis.pixel_values, ["lens"], target, precision).lens
    return {"probability": lens.probability[:, 0].numpy(), "votes": lens.votes[:, 0].numpy(),
            "readout": lens.readout_probability[:, 0].numpy()}  # fmt: skip


def head_statistics(analysis: ImageAnalysis, patch_size: int) -> dict[str, np.ndarray]:
    """Mean attention distance (pixels) and entropy (nats), each (layers, heads)."""
    return {
        "mean_distance": explain.mean_attention_distance(
            analysis.attentions, analysis.grid_size, patch_size, analysis.num_prefix_tokens
        )[0].numpy(),
        "entropy": explain.attention_entropy(analysis.attentions)[0].numpy(),
    }
