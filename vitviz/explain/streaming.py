"""The streaming explainer: rollout, readout attention and per-head statistics folded in block by block during
the forward pass (``model(x, attention_sink=explainer)``), so no block's (B, heads, T, T) attention is kept."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from vitviz.explain.attention import discard_weakest, fuse_heads, per_head, residual_step
from vitviz.explain.common import (
    HEAD_FUSIONS,
    HeadFusion,
    Readout,
    TokenGrid,
    check_attentions,
    check_choice,
    check_readout,
    check_start_layer,
    read_out,
    token_grid,
)
from vitviz.explain.head_statistics import HEAD_STATISTICS, BlockGeometry, block_statistics
from vitviz.layout import TokenLayout


class StreamingExplainer:
    """Rollout, the head's readout rows, prefix shares and head statistics, computed block by block
    during the forward pass.

    Pass it as ``model(x, attention_sink=explainer)``: each block's (B, heads, T, T) weights are
    upcast to at least fp32 (fp64 stays fp64) and folded, with autocast off, into a running rollout
    (B, T, T), the readout rows (B, layers, heads, N) and every per-head statistic of HEAD_STATISTICS
    (head_statistics.py: entropy, distances, prefix shares), then dropped. Peak memory holds one block's attention
    instead of all of them. Every result is fp32 (fp64 for a float64 model), also when the model runs
    under ``vitviz.autocast("bf16")``, and equals the keep-everything functions applied to the
    ``output_attentions=True`` weights (upcast with ``.float()``) to float precision.

    ``readout`` is what the head reads, as in the rest of the package: "cls", "mean", or the (B, T)
    readout weights ``output.readout``. The readout rows are folded in block by block, so a tensor must
    be known before the pass: it is fixed for [CLS], mean, cls+mean and DeiT models, but for "map"
    pooling it depends on the image, so take it from an earlier pass of the same images. The rollout
    is kept whole (B, T, T) and read out only by ``results()``, with ``self.readout`` as it is then.

    One explainer serves any number of passes: block 0 starts a new pass and clears what the last one
    left, so ``results()`` describes the latest pass; blocks must then come in order (0, 1, 2, ...).
    ``progress``, if given, is called with each block's index once that block is folded in.

    The tokens: the token layout (``StreamingExplainer(output.layout)``, or ``model.token_layout(grid)`` before the
    pass; its patch size is read from its boxes, ``patch_size`` and ``num_prefix_tokens`` left out), or a plain ViT's
    ``grid_size`` (rows, cols), ``patch_size`` in pixels and ``num_prefix_tokens`` (1 when left out).
    """

    def __init__(
        self,
        grid_size: tuple[int, int] | TokenLayout,
        patch_size: int | None = None,
        num_prefix_tokens: int | TokenLayout | None = None,
        head_fusion: HeadFusion = "mean",
        discard_ratio: float = 0.0,
        start_layer: int = 0,
        readout: Readout = "cls",
        progress: Callable[[int], None] | None = None,
    ):
        check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
        check_readout(readout)
        if start_layer < 0:  # the block count is unknown until the forward pass, so only the sign is checked here
            raise ValueError(f"start_layer must be in [0, number of blocks - 1]; got {start_layer}")
        self._grid = _streamed_grid(grid_size, patch_size, num_prefix_tokens)
        num_prefix_tokens, grid_size = self._grid.num_prefix_tokens, self._grid.shape
        patch_size = patch_size if self._grid.layout is None else _patch_size(self._grid.layout)
        if isinstance(readout, str) and readout == "cls" and num_prefix_tokens == 0:
            raise ValueError("readout='cls' needs a [CLS] token (num_prefix_tokens >= 1); use readout='mean'")
        self.readout = readout.detach() if isinstance(readout, torch.Tensor) else readout  # "cls", "mean" or (B, T)
        self.grid_size, self.patch_size, self.num_prefix_tokens = grid_size, patch_size, num_prefix_tokens
        self.head_fusion, self.discard_ratio, self.start_layer = head_fusion, discard_ratio, start_layer
        self.progress = progress
        self._reset()

    def _reset(self) -> None:
        """Forget the last pass: block 0 of the next one starts from here."""
        self._num_blocks = 0  # blocks folded in so far in this pass; the next one expected
        self._rollout: torch.Tensor | None = None  # (B, T, T), from start_layer on
        self._readout_rows: list[torch.Tensor] = []  # per block (B, heads, N)
        # per statistic of HEAD_STATISTICS, per block (B, heads) or (B, heads, K)
        self._statistics: dict[str, list[torch.Tensor]] = {s.name: [] for s in HEAD_STATISTICS}

    def __call__(self, layer: int, attention: torch.Tensor) -> None:
        if not isinstance(attention, torch.Tensor):  # a divided block's DividedAttention (vitviz.model.divided)
            raise ValueError(
                "the streaming explainer folds joint attention (B, heads, T, T); this model's divided space-time "
                "blocks (TimeSformer) attend over time and space apart: it cannot stream them"
            )
        if self.grid_size is None or len(self.grid_size) != 2:
            raise ValueError(
                "the streaming explainer measures head statistics on one image's (rows, cols) grid; for video clips "
                "use vitviz.explain.spacetime"
            )
        if layer == 0:
            self._reset()
        elif layer != self._num_blocks:
            expected = "0" if self._num_blocks == 0 else f"{self._num_blocks}, or 0 to start a new pass"
            raise ValueError(f"blocks must be streamed in order: expected block {expected}; got block {layer}")
        # at least fp32 before any arithmetic: bf16/fp16 weights would keep the running product in half precision
        attention = attention.detach().to(torch.promote_types(attention.dtype, torch.float32))  # (B, heads, T, T)
        blocks = [attention]
        T = check_attentions(blocks, self._grid, function="StreamingExplainer")
        readout, p = self.readout, self.num_prefix_tokens
        if isinstance(readout, torch.Tensor) and readout.shape != (attention.shape[0], T):
            raise ValueError(
                f"readout weights {tuple(readout.shape)} do not match (B, T) = ({attention.shape[0]}, {T})"
            )
        # the sink runs inside the model's forward: under its autocast the products below would run in bf16
        with _autocast_off(attention.device):
            # what the tokens the head reads attend to, as readout_attention_all; clone: a slice would keep
            # this block's whole (B, heads, T, T) storage alive
            rows = read_out(attention.flatten(0, 1), per_head(readout, attention.shape[1]), p)  # (B * heads, N)
            self._readout_rows.append(rows.unflatten(0, attention.shape[:2]).clone())  # (B, heads, N)
            geometry = BlockGeometry(tuple(self.grid_size), self.patch_size, p)
            for name, value in block_statistics(attention, geometry).items():
                self._statistics[name].append(value)
            if layer >= self.start_layer:
                step = residual_step(discard_weakest(fuse_heads(attention, self.head_fusion), self.discard_ratio, p))
                self._rollout = step if self._rollout is None else step @ self._rollout  # (B, T, T)
        self._num_blocks = layer + 1
        if self.progress is not None:
            self.progress(layer)

    def results(self) -> dict[str, torch.Tensor]:
        """The latest pass, fp32 (fp64 for a float64 model): rollout (B, rows, cols); readout_attention
        (B, layers, heads, rows, cols), what the tokens the head reads attend to ([CLS]'s row, the mean
        patch row or the readout-weighted rows); and each statistic of HEAD_STATISTICS under its name, (B, layers,
        heads) or (B, layers, heads, K): entropy, distance_px, distance_patches, prefix_shares (P + 1 columns, as
        attention_to_prefix_tokens)."""
        if not self._readout_rows:
            raise ValueError("no attention was streamed: pass the explainer as model(x, attention_sink=...)")
        check_start_layer(self.start_layer, self._num_blocks)  # past the last block, nothing was rolled out
        with _autocast_off(self._rollout.device):
            rollout = read_out(self._rollout, self.readout, self.num_prefix_tokens).clone()  # (B, N)
        return {
            "rollout": self._grid.as_map(rollout),
            "readout_attention": self._grid.as_map(torch.stack(self._readout_rows, dim=1)),
        } | {name: torch.stack(values, dim=1) for name, values in self._statistics.items()}


def _autocast_off(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast disabled on ``device`` (a no-op where the device has no autocast)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def _streamed_grid(grid_size, patch_size: int | None, num_prefix_tokens) -> TokenGrid:
    """The explainer's tokens as a TokenGrid: from a layout (first or third argument), or the pair and patch size."""
    layout = next((a for a in (grid_size, num_prefix_tokens) if isinstance(a, TokenLayout)), None)
    if layout is None:
        if patch_size is None:
            raise ValueError("StreamingExplainer needs the token layout (output.layout), or grid_size and patch_size")
        grid = token_grid(1 if num_prefix_tokens is None else num_prefix_tokens, grid_size, "StreamingExplainer")
    else:
        if (
            patch_size is not None
            or (grid_size is not layout and grid_size is not None)
            or (num_prefix_tokens is not layout and num_prefix_tokens is not None)
        ):
            raise ValueError("StreamingExplainer takes the token layout alone, or grid_size, patch_size and the prefix")
        grid = token_grid(layout, None, "StreamingExplainer")
    return grid


def _patch_size(layout: TokenLayout) -> int:
    """A layout's patch size in pixels, from its first patch's box: square patches of whole pixels only."""
    x0, y0, x1, y1 = layout.boxes[layout.patch_indices[0]].tolist()
    if x1 - x0 != y1 - y0 or (x1 - x0) != int(x1 - x0):
        raise ValueError(
            f"StreamingExplainer measures distances in square patches; this layout's are {x1 - x0}x{y1 - y0}"
        )
    return int(x1 - x0)
