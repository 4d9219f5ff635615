"""What every explanation shares: argument checks, the token layout's grid (``token_grid``: the one way from a map
function's layout argument to its prefix count and its map's shape), and how the head's reading (``readout``: [CLS],
the mean patch row, or ``output.readout``) is applied."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from vitviz.layout import TokenLayout, is_hierarchical

HeadFusion = Literal["mean", "max", "min"]
# What the classifier reads: for any model, the (B, T) weights it gives each token's final state
# (``output.readout``: DeiT's [CLS] and distillation tokens half each, SigLIP's attention-pooling weights...),
# or, by name, the [CLS] row or the mean of the patch rows. Every map below is read out through it. (The model's
# ``config.pooling`` is how the head pools, "cls+mean" and "map" included; ``output.readout`` is its result.)
Readout = Literal["cls", "mean"] | torch.Tensor
HEAD_FUSIONS = ("mean", "max", "min")


# The layout argument of every map function: the token layout (``output.layout``), or a plain ViT's prefix count
# with its grid (``output.num_prefix_tokens``, ``output.grid_size``), what that layout is built from
LayoutArgument = TokenLayout | int


@dataclass(frozen=True, eq=False)
class TokenGrid:
    """What a map function reads of its layout argument (``token_grid``): the prefix tokens before the patches, the
    map's shape and the order that turns per-patch values into it."""

    num_prefix_tokens: int
    shape: tuple[int, ...] | None  # a map's trailing axes: (rows, cols), a clip's (frames, rows, cols); None: (N,)
    order: np.ndarray | None = None  # int64 (N,): the patch of each map cell (TokenLayout.grid_order); None: in order
    layout: TokenLayout | None = None  # the layout it was read from, if any

    @property
    def num_patches(self) -> int | None:
        """N, the patch tokens the grid holds; None when no grid was given."""
        return None if self.shape is None else int(np.prod(self.shape))

    def check(self, num_tokens: int, function: str = "") -> None:
        """Refuse in one line a token count T the prefix tokens and the grid do not fit."""
        p, where = self.num_prefix_tokens, f"{function}: " if function else ""
        if not 0 <= p < num_tokens:
            raise ValueError(f"{where}num_prefix_tokens={p} must be in [0, T={num_tokens})")
        if self.shape is not None and self.num_patches != num_tokens - p:
            grid = "x".join(map(str, self.shape))
            raise ValueError(
                f"{where}grid {grid} has {self.num_patches} patches, but T - num_prefix_tokens = {num_tokens - p}"
            )

    def as_map(self, values: torch.Tensor) -> torch.Tensor:
        """Per-patch values (..., N) as the map (..., *shape), through the layout's own order (TokenLayout.grid_view):
        TimeSformer's patch-major tokens come back frame by frame. (..., N) unchanged without a grid."""
        if self.shape is None:
            return values
        if self.order is not None:
            values = values[..., torch.tensor(self.order, device=values.device)]  # a copy: the layout's is read-only
        return values.reshape(*values.shape[:-1], *self.shape)

    def patch_token(self, position: tuple[int, ...]) -> int:
        """The token index of the patch at a map position: (row, col), or a clip's (frame, row, col)."""
        if self.shape is None:
            raise ValueError("a patch position needs the grid: give the layout or grid_size")
        if len(position) != len(self.shape) or not all(0 <= i < n for i, n in zip(position, self.shape)):
            raise ValueError(f"patch {tuple(position)} is outside the {'x'.join(map(str, self.shape))} grid")
        cell = int(np.ravel_multi_index(tuple(position), self.shape))
        return self.num_prefix_tokens + (cell if self.order is None else int(self.order[cell]))


def token_grid(
    layout: LayoutArgument | TokenGrid, grid_size: tuple[int, ...] | None = None, function: str = "this function"
) -> TokenGrid:
    """The one reading of a map function's layout argument (the convention of ``vitviz.explain``).

    ``layout`` is the token layout (``output.layout``; ``grid_size`` then stays None): its prefix count, and its
    grid, maps (rows, cols) for an image and (frames, rows, cols) for a clip, filled through the layout's own order
    (``grid_order``). Or it is a plain ViT's prefix count with ``grid_size`` ((rows, cols), a clip's (frames, rows,
    cols), or None for (..., N) values), the tokens then listed frame by frame, row-major. A layout whose block
    attends in windows, or whose tokens form no one grid, is refused in one line naming ``function`` and what to
    use instead."""
    if isinstance(layout, TokenGrid):
        return layout
    if not isinstance(layout, TokenLayout):
        if isinstance(layout, bool) or not isinstance(layout, (int, np.integer)):
            raise ValueError(
                f"{function} takes a token layout (output.layout) or a prefix count (output.num_prefix_tokens); "
                f"got {type(layout).__name__}"
            )
        if grid_size is not None and (len(grid_size) not in (2, 3) or min(grid_size) < 1):
            raise ValueError(f"grid_size must be (rows, cols) or (frames, rows, cols), positive; got {grid_size}")
        return TokenGrid(int(layout), None if grid_size is None else tuple(int(n) for n in grid_size))
    if grid_size is not None:
        raise ValueError(f"{function} takes a token layout or (num_prefix_tokens, grid_size), not both")
    if layout.windows is not None:
        raise ValueError(
            f"{function} reads one global (T, T) attention per block; this layout's block attends in windows (Swin): "
            "use vitviz.explain.stages (rollout_across_stages, relevance_across_stages) with output.layouts"
        )
    p, patches = layout.num_prefix_tokens, layout.patch_indices
    if layout.grid is None or not np.array_equal(patches, np.arange(p, layout.num_tokens)):
        raise ValueError(
            f"{function} draws on one grid of patches after the prefix tokens; this layout's tokens form none: "
            "draw per-token values with layout.paint (vitviz.explain.spacetime for video clips)"
        )
    frames, rows, cols = layout.grid
    shape = (rows, cols) if frames == 1 and layout.num_frames == 1 else (frames, rows, cols)
    return TokenGrid(p, shape, layout.grid_order, layout)


def class_probabilities(model: torch.nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """The model's own probabilities for ``logits`` (vitviz's ``ViT.probabilities``: a softmax over the classes,
    or a sigmoid per class for SigLIP's prompts); a softmax for any other module. At least fp32."""
    if hasattr(model, "probabilities"):
        return model.probabilities(logits)
    return logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(dim=-1)


def model_layouts(model: torch.nn.Module) -> tuple[TokenLayout, ...] | None:
    """The per-block layouts a model gives its configured input before any pass (its ``input_layouts()``, which
    a model whose blocks attend in windows or change their tokens has: Swin), or None for a model that says none
    (a ViT, whose blocks all attend globally over one set of tokens)."""
    layouts = getattr(model, "input_layouts", None)
    return layouts() if callable(layouts) else None


def is_windowed(model: torch.nn.Module) -> bool:
    """Whether ``model``'s blocks attend in windows or merge tokens, as its layouts say (``is_hierarchical``)."""
    return is_hierarchical(model_layouts(model))


def check_not_windowed(model: torch.nn.Module, what: str) -> None:
    """Refuse in one line a model that attends in windows and merges tokens (Swin) where ``what`` (a clause saying
    what the function reads) is written for a ViT's one set of tokens."""
    if is_windowed(model):
        raise ValueError(f"{what}; Swin attends in windows and merges tokens between stages")


def check_not_divided(model: torch.nn.Module, what: str) -> None:
    """Refuse in one line a model whose blocks attend in two parts, space then time (TimeSformer's divided attention),
    where ``what`` (a clause saying what the function reads) needs one (T, T) attention per block."""
    config = getattr(model, "config", None)
    if getattr(config, "attention", "joint") == "divided":
        raise ValueError(
            f"{what}; TimeSformer's blocks attend within each frame, then along time, with no (T, T) matrix: "
            "use vitviz.explain.video_rollout or video_relevance"
        )


def check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")


def fuse_heads(attention: torch.Tensor, head_fusion: HeadFusion = "mean") -> torch.Tensor:
    """(B, heads, T, T) -> (B, T, T) by the mean, max or min over heads."""
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    if head_fusion == "mean":
        return attention.mean(dim=1)
    return attention.amax(dim=1) if head_fusion == "max" else attention.amin(dim=1)


def check_attentions(
    attentions: Sequence[torch.Tensor], num_prefix_tokens: int | TokenGrid, grid_size=None, function: str = ""
) -> int:
    """Validate shapes against the token layout (a ``TokenGrid``, or the pair ``token_grid`` reads); return T."""
    if len(attentions) == 0:
        raise ValueError("attentions is empty: run the model with output_attentions=True")
    for i, a in enumerate(attentions):
        if not isinstance(a, torch.Tensor):  # a divided block's DividedAttention (vitviz.model.divided)
            raise ValueError(
                f"attentions[{i}] is a divided space-time block's (TimeSformer), not one (B, heads, T, T) tensor: "
                "use vitviz.explain.spacetime (video_rollout, video_relevance) for video clips"
            )
    T = attentions[0].shape[-1]
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-2:] != (T, T) or a.shape[:2] != attentions[0].shape[:2]:
            raise ValueError(f"attentions[{i}] has shape {tuple(a.shape)}; expected (B, heads, {T}, {T}) like block 0")
    grid = num_prefix_tokens if isinstance(num_prefix_tokens, TokenGrid) else token_grid(num_prefix_tokens, grid_size)
    grid.check(T, function)
    return T


def check_start_layer(start_layer: int, num_layers: int) -> None:
    """Blocks are counted from 0; a negative start is refused rather than read from the end."""
    if not 0 <= start_layer < num_layers:
        raise ValueError(
            f"start_layer must be in [0, {num_layers - 1}] for a model with {num_layers} blocks; got {start_layer}"
        )


def traced(pixel_values: torch.Tensor) -> torch.Tensor:
    """The pixels as a leaf that asks for its gradient: the attentions and hidden states of a pass over them have a
    gradient whether or not the model's parameters do (a model frozen with ``requires_grad_(False)``)."""
    return pixel_values.detach().requires_grad_(True)


def target_indices(logits: torch.Tensor | None, target: int | Sequence[int] | torch.Tensor) -> torch.Tensor:
    """One class for every image, or one per image, as (B,) indices checked against the head."""
    if logits is None:
        raise ValueError("class-specific maps need a classification head (this model is a backbone)")
    B, num_classes = logits.shape
    targets = torch.as_tensor(target, device=logits.device).long().reshape(-1)
    if targets.numel() == 1:
        targets = targets.expand(B)
    if targets.shape != (B,) or not ((0 <= targets) & (targets < num_classes)).all():
        raise ValueError(f"target must be one class or one per image, each in [0, {num_classes - 1}]; got {target}")
    return targets


def target_score(logits: torch.Tensor | None, target: int | Sequence[int] | torch.Tensor) -> torch.Tensor:
    """The sum over images of each image's target logit: images do not interact, so its gradient gives every
    image its own."""
    targets = target_indices(logits, target)  # first: a backbone's logits are None
    return logits.gather(1, targets[:, None]).sum()


def as_map(values: torch.Tensor, grid_size: tuple[int, ...] | None) -> torch.Tensor:
    """(..., N) -> (..., rows, cols) (or a clip's (..., frames, rows, cols)) when the grid is known: tokens listed
    frame by frame, row-major. A layout's own order is ``TokenGrid.as_map``'s."""
    return values if grid_size is None else values.reshape(*values.shape[:-1], *grid_size)


def check_readout(readout: Readout) -> None:
    if not isinstance(readout, torch.Tensor):
        check_choice("readout", readout, ("cls", "mean"))
    elif readout.ndim != 2:
        raise ValueError(f"a readout tensor holds (B, T) token weights (output.readout); got {tuple(readout.shape)}")


def read_out(matrix: torch.Tensor, readout: Readout, num_prefix_tokens: int) -> torch.Tensor:
    """The row the classifier reads, over the patches: [CLS]'s (token 0), the mean of the patch rows,
    or the rows weighted by a (B, T) readout."""
    check_readout(readout)
    p = num_prefix_tokens
    if isinstance(readout, torch.Tensor):
        if readout.shape != matrix.shape[:2]:
            raise ValueError(f"readout weights {tuple(readout.shape)} do not match (B, T) = {tuple(matrix.shape[:2])}")
        return (readout.to(matrix.dtype)[:, None, :] @ matrix)[:, 0, p:]  # (B, N)
    if readout == "cls":
        if p == 0:
            raise ValueError("readout='cls' needs a [CLS] token (num_prefix_tokens >= 1); use readout='mean'")
        return matrix[:, 0, p:]
    return matrix[:, p:, p:].mean(dim=1)
