"""Images through a model once, with every map and statistic vitviz shows of them: the one analysis behind the
Photo page and ``vitviz index``.

``analyse`` runs one batched forward pass. Every block's attention is folded into the small views as it streams past
(explain.StreamingExplainer): what the tokens the head reads attend to per layer and head, the rollout, every head
statistic of explain.HEAD_STATISTICS, and the token norms. The (layers, heads, T, T) attention tensors themselves are
kept only when asked (``keep_attentions``): ViT-L/16 at 512 holds 403 MB of attention per image, DINOv2 at 518 1.08 GB.

    analyse          a batch (B, 3, H, W) -> Analysis; vitviz index stores it (dataset/indexing.py: analyse_batch)
    analyse_image    one photo, preprocessed by the model's own recipe -> ImageAnalysis; the Photo page draws it
    rollout, patch_attention   other settings of one image's views: from its kept attentions, else a streaming pass
    analyse_windowed  a model that attends in windows and merges stages (Swin) -> WindowedAnalysis: its predictions,
                     every block's window attention and layouts, its head statistics measured inside the windows;
                     its maps come from explain.method_maps
    windowed_block_tokens  one block's output tokens of such a model, on its stage's grid (its features)

Class-specific maps and the logit lens need gradients or every block's tokens: explain.method_maps runs their passes
on an analysis's ``pixel_values``.

The head's weights over the tokens (its readout) are known before the pass for every pooling but attention pooling
("map"), whose weights depend on the image: there the readout rows are read again once the pass has given them, from
the kept attentions, from the last block (``readout_blocks="last"``, all the index stores), or by a second streaming
pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from PIL import Image

from vitviz import explain
from vitviz.explain.common import HeadFusion, token_grid
from vitviz.explain.head_statistics import DISTANCE_PATCHES, DISTANCE_PX, ENTROPY, HEAD_STATISTICS, PREFIX_SHARES
from vitviz.explain.statistics import window_head_statistics
from vitviz.layout import TokenLayout
from vitviz.model import Precision, Swin, ViT, autocast

Progress = Callable[[int], None]  # called with each block's index once it has run
ReadoutBlocks = Literal["all", "last"]  # the blocks whose readout rows an analysis holds


@dataclass(frozen=True)
class Analysis:
    """A batch of B images through one model; every tensor on the model's device, maps and statistics in fp32."""

    pixel_values: torch.Tensor  # (B, 3, H, W), the model's input, for the passes that come later
    precision: str  # the precision of the forward pass, and of every later pass for these images
    grid_size: tuple[int, int]  # (rows, cols) of this input
    num_prefix_tokens: int
    probabilities: torch.Tensor | None  # (B, classes); None for a backbone
    readout: torch.Tensor  # (B, T) the weight the head gives each token: every map is read out through it
    pooled: torch.Tensor  # (B, D) what the head reads: the image's embedding
    token_norms: torch.Tensor  # (B, layers, T) the norm of every token after every block
    readout_attention: torch.Tensor  # (B, L, heads, rows, cols), L = layers, or 1 (the last) for readout_blocks="last"
    rollout: torch.Tensor  # (B, rows, cols) the rollout with the default settings (mean fusion, from block 0)
    statistics: dict[str, torch.Tensor]  # every HEAD_STATISTICS record by name: (B, layers, heads[, K])
    pool_attention: torch.Tensor | None = None  # (B, heads, N) the attention-pooling head's weights, if any
    attentions: tuple[torch.Tensor, ...] | None = None  # per block (B, heads, T, T) float32, when kept
    tokens: dict[int, torch.Tensor] = field(default_factory=dict)  # block -> its output (B, T, D), for keep_blocks
    layout: TokenLayout | None = None  # the input's token layout (output.layout): what every map is drawn on

    def image(self, i: int, box: tuple[float, float, float, float]) -> ImageAnalysis:
        """Image ``i`` alone, with ``box``, where in the photo its input came from."""
        one = slice(i, i + 1)  # the fields that keep a batch dimension of 1
        return ImageAnalysis(
            probabilities=self.probabilities[i].cpu().numpy() if self.probabilities is not None else np.zeros(0),
            grid_size=self.grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            box=box,
            pixel_values=self.pixel_values[one],
            precision=self.precision,
            readout=self.readout[one],
            token_norms=self.token_norms[i],
            readout_attention=self.readout_attention[i],
            rollout=self.rollout[i],
            statistics={name: value[i] for name, value in self.statistics.items()},
            pool_attention=self.pool_attention[one] if self.pool_attention is not None else None,
            attentions=tuple(a[one] for a in self.attentions) if self.attentions is not None else None,
            layout=self.layout,
        )


@dataclass(frozen=True)
class ImageAnalysis:
    """One photo's analysis: what the Photo page draws every tab from."""

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
    statistics: dict[str, torch.Tensor]  # every HEAD_STATISTICS record by name: (layers, heads[, K])
    pool_attention: torch.Tensor | None = None  # (1, heads, N) the attention-pooling head's weights, if any
    attentions: tuple[torch.Tensor, ...] | None = None  # per block (1, heads, T, T) float32, when kept whole
    layout: TokenLayout | None = None  # the input's token layout (output.layout): what every map is drawn on

    @property
    def maps_args(self) -> dict:
        """The token layout every map function takes (``f(..., **analysis.maps_args)``): the layout where known,
        else the pair a plain ViT's layout is built from."""
        if self.layout is not None:
            return {"num_prefix_tokens": self.layout}
        return {"num_prefix_tokens": self.num_prefix_tokens, "grid_size": self.grid_size}

    @property
    def readout_args(self) -> dict:
        """maps_args and what the head reads: the arguments of rollout and the class-specific maps."""
        return self.maps_args | {"readout": self.readout}


@dataclass(frozen=True)
class WindowedAnalysis:
    """One photo through a model that attends in windows and merges tokens between stages (Swin): what the Photo page
    draws its tabs from. No readout rows or token norms: those read one set of tokens with one (T, T) attention per
    block, which such a model does not have; its head statistics are measured inside the windows
    (explain.statistics.window_head_statistics). Its window attention is small (linear in the tokens), so it is
    always kept."""

    probabilities: np.ndarray  # (num_classes,); empty for a backbone
    grid_size: tuple[int, int]  # (rows, cols) of the first stage: every map is drawn on it
    box: tuple[float, float, float, float]  # where in the photo the model's input came from
    pixel_values: torch.Tensor  # (1, 3, H, W), the model's input, for the passes that come later
    precision: str  # the precision of the forward pass, and of every later pass for this image
    attentions: tuple[torch.Tensor, ...]  # per block (nW, heads, S, S) float32, in the block's (shifted) frame
    layouts: tuple[TokenLayout, ...]  # per block: its stage's tokens and windows (explain.window_attention_map)
    stage_grids: tuple[tuple[int, int], ...]  # per stage, its grid (rows, cols)
    # every HEAD_STATISTICS record by name (window_statistics), (layers, heads[, 1]), NaN past a stage's heads
    statistics: dict[str, torch.Tensor] = field(default_factory=dict)
    num_prefix_tokens: int = 0  # none: Swin has no [CLS] or registers


def analyse_windowed(
    model: Swin, image: Image.Image, precision: Precision = "fp32", progress: Progress | None = None
) -> WindowedAnalysis:
    """Preprocess with the model's own recipe and run it once, keeping every block's window attention."""
    pixels = model.transform(image)[None].to(next(model.parameters()).device)

    def sink(block: int, weights: torch.Tensor) -> None:
        if progress is not None:
            progress(block)

    with torch.inference_mode(), autocast(precision, pixels.device.type):
        output = model(pixels, output_attentions=True, attention_sink=sink)
    logits = output.logits
    attentions = tuple(a.float() for a in output.attentions)
    return WindowedAnalysis(
        probabilities=model.probabilities(logits.float())[0].cpu().numpy() if logits is not None else np.zeros(0),
        grid_size=output.grid_size,
        box=model.transform.crop_box(*image.size),
        pixel_values=pixels,
        precision=precision,
        attentions=attentions,
        layouts=output.layouts,
        stage_grids=output.stage_grids,
        statistics={
            name: values[0].cpu()
            for name, values in window_statistics(attentions, output.layouts, model.config.patch_size).items()
        },
    )


def window_statistics(
    attentions: Sequence[torch.Tensor], layouts: Sequence[TokenLayout], patch_size: int
) -> dict[str, torch.Tensor]:
    """Every record of HEAD_STATISTICS by name, measured inside the windows (explain.statistics.
    window_head_statistics): (B, layers, heads), NaN past a block's heads; the distance in patches counts the first
    stage's patches; the prefix shares (B, layers, heads, 1) hold only "to_patches" (Swin has no prefix tokens), the
    share of each query's weight on real tokens rather than padding."""
    measured = window_head_statistics(attentions, layouts)
    return {
        ENTROPY.name: measured.entropy,
        DISTANCE_PX.name: measured.distance,
        DISTANCE_PATCHES.name: measured.distance / patch_size,
        PREFIX_SHARES.name: measured.to_tokens[..., None],
    }


def windowed_block_tokens(model: Swin, pixel_values: torch.Tensor, block: int) -> torch.Tensor:
    """Block ``block``'s output tokens (B, T_block, D_block) float32 for a model that attends in windows (Swin): the
    residual stream after the block, before the final norm, row-major on its stage's grid. One pass without
    gradients, in the weights' own precision; a WindowedAnalysis's ``pixel_values`` is the photo's input."""
    layers = model.config.num_layers
    if not -layers <= block < layers:
        raise ValueError(f"block must be in [{-layers}, {layers - 1}]; got {block}")
    with torch.inference_mode():
        out = model(pixel_values, output_hidden_states=True)
    return out.hidden_states[block].float()


def attention_bytes(model: ViT, height: int, width: int) -> int:
    """What every block's fp32 attention takes for one (height, width) input: layers x heads x T x T x 4."""
    c = model.config
    tokens = c.num_prefix_tokens + (height // c.patch_size) * (width // c.patch_size)
    return c.num_layers * c.num_heads * tokens * tokens * 4


def analyse(
    model: ViT,
    pixels: torch.Tensor,
    precision: Precision = "fp32",
    *,
    keep_attentions: bool = False,
    keep_blocks: Sequence[int] = (),
    readout_blocks: ReadoutBlocks = "all",
    progress: Progress | None = None,
) -> Analysis:
    """One forward pass of ``pixels`` (B, 3, H, W), moved to the model's device, under ``precision``; each block's
    attention folded into the views as it streams past. ``keep_attentions`` keeps every block's (B, heads, T, T);
    ``keep_blocks`` keeps those blocks' output tokens; ``readout_blocks="last"`` reads the head's rows of the last
    block only (all the index stores; an attention-pooled model then needs no second pass). ``progress(block)``
    follows the pass."""
    if isinstance(model, Swin):
        raise ValueError(
            "analyse reads one (T, T) attention per block; Swin attends in windows and merges tokens between "
            "stages: use analyse_windowed"
        )
    c = model.config
    pixels = pixels.to(next(model.parameters()).device)
    grid = (pixels.shape[-2] // c.patch_size, pixels.shape[-1] // c.patch_size)
    p = c.num_prefix_tokens
    cheap: explain.Readout = "cls" if p > 0 else "mean"  # a slice or one mean per block: rows read again later
    # None for "map" pooling (its weights depend on the image), and when only the last block's rows are wanted: the
    # streamer then reads the cheap rows, and the last block's are read again with the head's weights after the pass
    known = _readout_before_the_pass(model, grid) if readout_blocks == "all" else None
    if known is not None:
        known = known.to(pixels.device).expand(pixels.shape[0], -1)  # the same weights for every image
    streamer = _streamer(model, grid, known if known is not None else cheap, progress=progress)
    last: list[torch.Tensor] = []  # the last block's weights, when its rows must be read again from them

    def sink(block: int, weights: torch.Tensor) -> None:
        streamer(block, weights)
        if known is None and not keep_attentions and block == c.num_layers - 1:
            last.append(weights.detach().float())  # (B, heads, T, T), one block only

    with torch.inference_mode(), autocast(precision, pixels.device.type):
        output = model(pixels, output_attentions=keep_attentions, output_hidden_states=True, attention_sink=sink)
    readout = output.readout.float()  # (B, T)
    attentions = tuple(a.float() for a in output.attentions) if keep_attentions else None
    streamer.readout = readout  # the rollout is read out at the end, so it uses the head's actual weights
    views = streamer.results()
    readout_attention = views["readout_attention"]  # (B, layers, heads, rows, cols), right when known
    if known is None:  # the head's weights are known now: read the rows again with them
        tokens = (output.layout,) if output.layout is not None else (p, grid)  # the layout, or what it is built from
        if attentions is not None:
            blocks = attentions if readout_blocks == "all" else attentions[-1:]
            readout_attention = explain.readout_attention_all(blocks, *tokens, readout=readout)
        elif readout_blocks == "last":
            readout_attention = explain.readout_attention_all(last, *tokens, readout=readout)
        else:
            again = _streamer(model, grid, readout, progress=progress)
            readout_attention = _stream(model, pixels, precision, again)["readout_attention"]
    elif readout_blocks == "last":
        readout_attention = readout_attention[:, -1:]
    last.clear()
    return Analysis(
        pixel_values=pixels,
        precision=precision,
        grid_size=grid,
        num_prefix_tokens=output.num_prefix_tokens,
        probabilities=model.probabilities(output.logits.float()) if output.logits is not None else None,
        readout=readout,
        pooled=output.pooled.float(),
        token_norms=explain.token_norms(output.hidden_states),
        readout_attention=readout_attention,
        rollout=views["rollout"],
        statistics={statistic.name: views[statistic.name] for statistic in HEAD_STATISTICS},
        pool_attention=output.pool_attention.float() if output.pool_attention is not None else None,
        attentions=attentions,
        tokens={block: output.hidden_states[block] for block in keep_blocks},
        layout=output.layout,
    )


def analyse_image(
    model: ViT,
    image: Image.Image,
    precision: Precision = "fp32",
    max_attention_bytes: int | None = None,
    progress: Progress | None = None,
) -> ImageAnalysis:
    """Preprocess with the model's own recipe and ``analyse`` it. The attention tensors are kept too, unless they
    would take more than ``max_attention_bytes`` (``attention_bytes``)."""
    pixels = model.transform(image)[None]
    keep = max_attention_bytes is None or attention_bytes(model, *pixels.shape[-2:]) <= max_attention_bytes
    result = analyse(model, pixels, precision, keep_attentions=keep, progress=progress)
    return result.image(0, model.transform.crop_box(*image.size))


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
    kept attentions, else by a pass that stops after that block. The patch's token and the map's cells are the
    token layout's (``analysis.layout``, through its ``grid_order``), else the row-major grid's."""
    layout = analysis.layout
    grid = token_grid(
        analysis.num_prefix_tokens if layout is None else layout,
        analysis.grid_size if layout is None else None,
        "patch_attention",
    )
    shape = "x".join(map(str, grid.shape))
    if not (0 <= layer < model.config.num_layers and len(query) == len(grid.shape)) or not all(
        0 <= i < n for i, n in zip(query, grid.shape)
    ):
        raise ValueError(f"layer {layer} or patch {query} is outside {model.config.num_layers} blocks of {shape}")
    index, p = grid.patch_token(tuple(query)), grid.num_prefix_tokens
    if analysis.attentions is not None:
        return grid.as_map(analysis.attentions[layer][0, :, index, p:]).clone()  # not a view of the block
    found = []

    def sink(block: int, weights: torch.Tensor) -> None:
        if progress is not None:
            progress(block)
        if block == layer:
            found.append(grid.as_map(weights[0, :, index, p:].float()).clone())
            raise _Enough

    try:
        with torch.inference_mode(), autocast(analysis.precision, analysis.pixel_values.device.type):
            model(analysis.pixel_values, attention_sink=sink)
    except _Enough:
        pass
    return found[0]


def _readout_before_the_pass(model: ViT, grid: tuple[int, int]) -> torch.Tensor | None:
    """The head's token weights (1, T) when they do not depend on the image (every pooling but "map" and V-JEPA 2's
    "attentive")."""
    if model.config.pooling in ("map", "attentive"):
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
