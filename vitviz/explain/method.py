"""The record every map method declares in its own file, and what its ``compute`` receives and returns.

    RELEVANCE = Method(name="relevance", description=..., compute=relevance_map, class_specific=True, ...)
    RELEVANCE.compute(inputs)      # MapInputs -> MethodOutput, one signature for every method

``vitviz.explain.registry`` collects the records; the CLI, the benchmark and the dashboard read them from there.

A model that attends in windows and merges tokens between stages (Swin) is no one set of tokens with one (T, T)
attention per block: a method that can read it declares ``windowed=None`` and routes on ``MapInputs.windowed`` to
the rules of ``vitviz.explain.stages``; every other method declares, in ``windowed``, why it cannot, and the
registry refuses it with that reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

import torch

from vitviz.explain.common import HeadFusion
from vitviz.layout import TokenLayout, is_hierarchical
from vitviz.model import Precision, autocast

# What a method costs beyond the one forward pass every method shares, cheapest first (the registry's order)
Cost = Literal["forward", "backward", "backward per block", "repeated passes"]
COSTS: tuple[Cost, ...] = get_args(Cost)
# What a method reads from the shared forward pass besides the attentions: the gradient of the target logit
# w.r.t. every block's attention (one backward pass serves every method that asks), or every block's output
Need = Literal["attention_gradients", "hidden_states"]


# what most methods need and a windowed model (Swin) lacks
WINDOWED_REFUSAL = (
    "needs global attention over one set of tokens; Swin attends in windows and merges tokens between stages"
)


# The options of the sampling and perturbation methods (baselines.py, rise.py) and of attention flow, by the names
# method_maps and the CLI take them; MapOptions says what each is for, and docs/methods.md states their defaults.
METHOD_OPTIONS = ("steps", "samples", "noise", "window", "stride", "cells", "keep", "batch", "seed", "flow_limit")


@dataclass(frozen=True)
class MapOptions:
    precision: Precision = "fp32"  # autocast of the passes a method runs itself
    head_fusion: HeadFusion = "mean"  # rollout: how the heads are fused
    discard_ratio: float = 0.0  # rollout: the fraction of the weakest patch-to-patch weights dropped
    start_layer: int = 0  # rollout, LeGrad and TAM: the first block included
    steps: int = 32  # Integrated Gradients: the Riemann steps from the baseline (Gauss-Legendre, Captum's default)
    samples: int | None = None  # SmoothGrad 32, KernelSHAP 512, RISE 2000 (None: each method's own default)
    noise: float = 0.15  # SmoothGrad: the noise's standard deviation, a fraction of the input's range (Smilkov 2017)
    window: int | None = None  # occlusion: the square's side in pixels (None: the patch)
    stride: int | None = None  # occlusion: its step in pixels (None: the window, so squares do not overlap)
    cells: int = 7  # RISE: the coarse mask is cells x cells before upsampling (Petsiuk 2018's s)
    keep: float = 0.5  # RISE: the probability that a cell is kept (the paper's p)
    batch: int = 16  # the sampling methods: images per forward pass
    seed: int = 0  # the sampling methods: their random numbers (the global generator is left alone)
    flow_limit: int = 1_500_000  # attention flow: the most edges (blocks x tokens^2) its graph may have

    def __post_init__(self) -> None:
        def whole(name: str, low: int) -> None:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be a whole number >= {low}; got {value!r}")

        for name in ("steps", "samples", "window", "stride", "cells", "batch", "flow_limit"):
            whole(name, 1)
        whole("seed", 0)
        for name, low, high in (("noise", 0.0, 10.0), ("keep", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
                raise ValueError(f"{name} must be a number in ({low:g}, {high:g}]; got {value!r}")


@dataclass(frozen=True)
class MapInputs:
    """One image, the class explained and the forward pass every method shares."""

    model: torch.nn.Module
    pixels: torch.Tensor  # (1, 3, H, W)
    target: int  # the class the class-specific maps explain
    attentions: tuple[torch.Tensor, ...]  # per block (1, heads, T, T) float32, detached; (nW, heads, S, S) windowed
    readout: torch.Tensor  # (1, T) float32: what the head reads of each token's final state (output.readout)
    num_prefix_tokens: int
    grid_size: tuple[int, int]
    options: MapOptions = MapOptions()
    attention_gradients: tuple[torch.Tensor, ...] | None = None  # per block (1, heads, T, T) float32, if needed
    hidden_states: tuple[torch.Tensor, ...] | None = None  # per block (1, T, D) detached, if needed
    layouts: tuple[TokenLayout, ...] | None = None  # per block, its tokens and windows (output.layouts)
    token_layout: TokenLayout | None = None  # the tokens maps are drawn on (output.layout)

    @property
    def layout(self) -> dict:
        """The token layout every map function takes: ``f(..., **inputs.layout)``: ``token_layout`` where it is
        given (``num_prefix_tokens`` is the parameter's name), else the pair a plain ViT's layout is built from."""
        if self.token_layout is not None:
            return {"num_prefix_tokens": self.token_layout}
        return {"num_prefix_tokens": self.num_prefix_tokens, "grid_size": self.grid_size}

    @property
    def windowed(self) -> bool:
        """Whether the blocks attend in windows or merge tokens (Swin): the maps must go through stages.py."""
        return is_hierarchical(self.layouts)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's autocast on the device the model runs on, for the passes a method runs itself."""
        return autocast(self.options.precision, self.pixels.device.type)


@dataclass(frozen=True)
class LogitLens:
    probability: torch.Tensor  # (layers, B, rows, cols) the target's probability read from each patch token
    votes: torch.Tensor  # (layers, B, rows, cols) the class each patch token's reading ranks first
    readout_probability: torch.Tensor  # (layers, B) the target's probability from the head reading the block whole


class MethodOutput(NamedTuple):
    map: torch.Tensor  # (1, rows, cols) float32
    lens: LogitLens | None = None  # the logit lens's every block (its map is the last block's)
    pixels: torch.Tensor | None = None  # (1, H, W) float32: a pixel-level map's every pixel (its map sums patches)


@dataclass(frozen=True)
class Method:
    name: str  # the key of the CLI's --methods, the benchmark's rows and the dashboard's picker
    description: str  # what it is, in a line (without the paper)
    compute: Callable[[MapInputs], MethodOutput]
    class_specific: bool  # does the map depend on the class explained?
    cost: Cost
    cost_note: str  # the cost in words, for people ("" when the shared forward pass is all it takes)
    caption: str  # how to read the map, in a sentence (the dashboard's caption under it)
    paper: str | None = None  # "Chefer et al. 2021"
    needs: tuple[Need, ...] = ()
    # why it cannot explain a model that attends in windows and merges tokens between stages (Swin): the rest of a
    # line that starts with its quoted name; None: it can (its compute routes on MapInputs.windowed)
    windowed: str | None = WINDOWED_REFUSAL

    def __post_init__(self) -> None:
        if self.cost not in COSTS:
            raise ValueError(f"cost must be one of {', '.join(map(repr, COSTS))}; got {self.cost!r}")
        unknown = [need for need in self.needs if need not in get_args(Need)]
        if unknown:
            raise ValueError(f"needs must be among {', '.join(map(repr, get_args(Need)))}; got {unknown}")

    @property
    def summary(self) -> str:
        """The description with its paper: "gradient-weighted attention relevance (Chefer et al. 2021)"."""
        return f"{self.description} ({self.paper})" if self.paper else self.description
