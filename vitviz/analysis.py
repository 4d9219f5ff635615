"""One image through one model, with everything the dashboard draws from it.

``analyse_image`` runs the forward pass once. Every block's attention is folded into the small views the
page shows as it streams past (explain.StreamingExplainer): what the tokens the head reads attend to per
layer and head, the rollout, the head statistics and the prefix-token shares. The (layers, heads, T, T)
attention tensors themselves are kept only when asked (``keep_attentions``); the page keeps them when they
fit its memory budget, so a clicked patch or another rollout setting is then a cheap function of them, and
otherwise runs a streaming pass for it (``rollout``, ``patch_attention``): ViT-L/16 at 512 holds 403 MB of
attention per image, DINOv2 at 518 1.08 GB.

Class-specific maps need gradients, and the logit lens every block's tokens, so ``class_maps`` and
``logit_lens`` run their own passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from vitviz import explain
from vitviz.explain.common import HeadFusion
from vitviz.model import Precision, ViT, autocast

Progress = Callable[[int], None]  # called with each block's index once it has run


@dataclass(frozen=True)
class ImageAnalysis:
    probabilities: np.ndarray  # (num_classes,); empty for a backbone
    grid_size: tuple[int, int]  # (rows, cols) of this input
    num_prefix_tokens: int
    box: tuple[float, float, float, float]  # where in the photo the model's input came from
    pixel_values: torch.Tensor  # (1, 3, H, W), the model's input, for the passes that come later
    precision: str  # the precision of the forward pass, and of every later pass for this image
    readout: torch.Tensor  # (1, T) the weight the head gives each token: every map is read out through it
    token_norms: torch.Tensor  # (layers, T) the norm of every token after every block
    readout_attention: torch.Tensor  # (layers, heads, rows, cols) what the tokens the head reads attend to
    rollout: torch.Tensor  # (rows, cols) the rollout with the default settings (mean fusion, from block 0)
    distance_px: torch.Tensor  # (layers, heads) mean attention distance, in pixels
    entropy: torch.Tensor  # (layers, heads) attention entropy, in nats
    prefix_shares: torch.Tensor  # (layers, heads, P + 1) the patches' attention to each prefix token, then to patches
    pool_attention: torch.Tensor | None = None  # (1, heads, N) the attention-pooling head's weights, if any
    attentions: tuple[torch.Tensor, ...] | None = None  # per block (1, heads, T, T) float32, when kept whole

    @property
    def maps_args(self) -> dict:
        return {"num_prefix_tokens": self.num_prefix_tokens, "grid_size": self.grid_size}

    @property
    def readout_args(self) -> dict:
        """maps_args and what the head reads: the arguments of rollout and the class-specific maps."""
        return self.maps_args | {"readout": self.readout}


def attention_bytes(model: ViT, height: int, width: int) -> int:
    """What every block's fp32 attention takes for one (height, width) input: layers x heads x T x T x 4."""
    c = model.config
    tokens = c.num_prefix_tokens + (height // c.patch_size) * (width // c.patch_size)
    return c.num_layers * c.num_heads * tokens * tokens * 4


def analyse_image(
    model: ViT,
    image: Image.Image,
    precision: Precision = "fp32",
    max_attention_bytes: int | None = None,
    progress: Progress | None = None,
) -> ImageAnalysis:
    """Preprocess with the model's own recipe and run it once, folding each block's attention into the
    views. The attention tensors are kept too, unless they would take more than ``max_attention_bytes``
    (``attention_bytes``). ``progress(block)`` follows the pass."""
    pixels = model.transform(image)[None]
    grid = (pixels.shape[-2] // model.config.patch_size, pixels.shape[-1] // model.config.patch_size)
    keep_attentions = max_attention_bytes is None or attention_bytes(model, *pixels.shape[-2:]) <= max_attention_bytes
    known = _readout_before_the_pass(model, grid)  # None for an attention-pooling head, which reads the image
    streamer = _streamer(model, grid, known if known is not None else "mean", progress=progress)
    with torch.inference_mode(), autocast(precision, pixels.device.type):
        output = model(pixels, output_attentions=keep_attentions, output_hidden_states=True, attention_sink=streamer)
    readout = output.readout.float()
    attentions = tuple(a.float() for a in output.attentions) if keep_attentions else None
    streamer.readout = readout  # the rollout is read out at the end, so it uses the head's actual weights
    views = streamer.results()
    readout_attention = views["readout_attention"]
    if known is None:  # the pooling head's weights are known now: read the rows again with them
        if attentions is not None:
            readout_attention = explain.readout_attention_all(
                attentions, num_prefix_tokens=output.num_prefix_tokens, grid_size=grid, readout=readout
            )
        else:
            streamer = _streamer(model, grid, readout, progress=progress)
            readout_attention = _stream(model, pixels, precision, streamer)["readout_attention"]
    probabilities = model.probabilities(output.logits[0].float()).numpy() if output.logits is not None else np.zeros(0)
    pool_attention = output.pool_attention.float() if output.pool_attention is not None else None
    return ImageAnalysis(
        probabilities=probabilities,
        grid_size=grid,
        num_prefix_tokens=output.num_prefix_tokens,
        box=model.transform.crop_box(*image.size),
        pixel_values=pixels,
        precision=precision,
        readout=readout,
        token_norms=explain.token_norms(output.hidden_states)[0],
        readout_attention=readout_attention[0],
        rollout=views["rollout"][0],
        distance_px=views["distance_px"][0],
        entropy=views["entropy"][0],
        prefix_shares=views["prefix_shares"][0],
        pool_attention=pool_attention,
        attentions=attentions,
    )


def rollout(
    model: ViT,
    analysis: ImageAnalysis,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
    progress: Progress | None = None,
) -> torch.Tensor:
    """The rollout (rows, cols) for these settings: from the kept attentions, else by a streaming pass."""
    if analysis.attentions is not None:
        return explain.attention_rollout(
            analysis.attentions,
            **analysis.readout_args,
            start_layer=start_layer,
            head_fusion=head_fusion,
            discard_ratio=discard_ratio,
        )[0]
    streamer = _streamer(model, analysis.grid_size, analysis.readout, head_fusion, discard_ratio, start_layer, progress)
    return _stream(model, analysis.pixel_values, analysis.precision, streamer)["rollout"][0]


class _Enough(Exception):
    """Raised by a sink that has what it needs: the blocks after it need not run."""


def patch_attention(
    model: ViT, analysis: ImageAnalysis, layer: int, query: tuple[int, int], progress: Progress | None = None
) -> torch.Tensor:
    """What patch ``query`` (row, col) attends to in block ``layer``, per head: (heads, rows, cols). From the
    kept attentions, else by a pass that stops after that block."""
    rows, cols = analysis.grid_size
    if not (0 <= layer < model.config.num_layers and 0 <= query[0] < rows and 0 <= query[1] < cols):
        raise ValueError(f"layer {layer} or patch {query} is outside {model.config.num_layers} blocks of {rows}x{cols}")
    index, p = analysis.num_prefix_tokens + query[0] * cols + query[1], analysis.num_prefix_tokens
    if analysis.attentions is not None:
        return analysis.attentions[layer][0, :, index, p:].reshape(-1, rows, cols).clone()  # not a view of the block
    found = []

    def sink(block: int, weights: torch.Tensor) -> None:
        if progress is not None:
            progress(block)
        if block == layer:
            found.append(weights[0, :, index, p:].float().reshape(-1, rows, cols).clone())
            raise _Enough

    try:
        with torch.inference_mode(), autocast(analysis.precision, analysis.pixel_values.device.type):
            model(analysis.pixel_values, attention_sink=sink)
    except _Enough:
        pass
    return found[0]


def class_maps(
    model: ViT,
    analysis: ImageAnalysis,
    target: int,
    precision: Precision = "fp32",
    methods: Sequence[str] = ("relevance", "grad-rollout"),
) -> dict[str, np.ndarray]:
    """The class-specific maps of ``methods`` (any of explain.CLASS_SPECIFIC) for ``target``, each (rows, cols).
    They need gradients, so they run their own passes (explain.method_maps)."""
    result = explain.method_maps(model, analysis.pixel_values, methods, target, precision)
    return {name: m.numpy() for name, m in result.maps.items()}


def logit_lens(
    model: ViT, analysis: ImageAnalysis, target: int, precision: Precision = "fp32"
) -> dict[str, np.ndarray]:
    """The patch-level logit lens for ``target``: "probability" (layers, rows, cols), the class's probability
    read from each patch token; "votes" (layers, rows, cols), each patch's top class; "readout" (layers,), the
    class's probability when the head reads that block's output whole."""
    lens = explain.method_maps(model, analysis.pixel_values, ["lens"], target, precision).lens
    return {
        "probability": lens.probability[:, 0].numpy(),
        "votes": lens.votes[:, 0].numpy(),
        "readout": lens.readout_probability[:, 0].numpy(),
    }


def head_statistics(analysis: ImageAnalysis) -> dict[str, np.ndarray]:
    """Mean attention distance (pixels) and entropy (nats), each (layers, heads), by their names in
    explain.HEAD_STATISTICS (the index's heads table uses the same)."""
    return {"distance_px": analysis.distance_px.numpy(), "entropy": analysis.entropy.numpy()}


def _readout_before_the_pass(model: ViT, grid: tuple[int, int]) -> torch.Tensor | None:
    """The head's token weights (1, T) when they do not depend on the image (every pooling but "map")."""
    if model.config.pooling == "map":
        return None
    tokens = torch.zeros(1, model.config.num_prefix_tokens + grid[0] * grid[1], model.config.hidden_size)
    with torch.inference_mode():
        return model.forward_head(tokens.to(model.patch_embed.proj.weight.dtype), grid).readout.float()


def _streamer(
    model: ViT,
    grid: tuple[int, int],
    readout: explain.Readout,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    start_layer: int = 0,
    progress: Progress | None = None,
) -> explain.StreamingExplainer:
    return explain.StreamingExplainer(
        grid,
        model.config.patch_size,
        model.config.num_prefix_tokens,
        head_fusion,
        discard_ratio,
        start_layer,
        readout=readout,
        progress=progress,
    )


def _stream(model: ViT, pixels: torch.Tensor, precision: str, streamer: explain.StreamingExplainer) -> dict:
    with torch.inference_mode(), autocast(precision, pixels.device.type):
        model(pixels, attention_sink=streamer)
    return streamer.results()
