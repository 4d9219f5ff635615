"""``SwinConfig``: every architectural choice of vitviz's Swin and Swin v2, one field each (see swin.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from vitviz.model.config import ACTIVATIONS, Activation
from vitviz.model.windows import PADDINGS, Padding, Pair

CPB_HIDDEN = 512  # Swin v2's position MLP: 2 -> 512 -> heads
CR_HIDDEN = 384  # timm's swinv2_cr's position MLP (its meta network): 2 -> 384 -> heads, biases on both
POSITION_MLPS = ("swinv2", "cr")
MERGE_NORMS = ("before", "after")


@dataclass
class SwinConfig:
    image_size: int | tuple[int, int] = 224  # the input the windows are laid out for: side or (height, width)
    patch_size: int = 4  # side of each square patch of the first stage, in pixels
    num_channels: int = 3  # input channels
    embed_dim: int = 96  # the first stage's token width; each patch merging doubles it
    depths: tuple[int, ...] = (2, 2, 6, 2)  # blocks per stage
    num_heads: tuple[int, ...] = (3, 6, 12, 24)  # attention heads per stage
    window_size: int | tuple[int, ...] = 7  # the windows' side: one for every stage, or one per stage (swin_s3)
    # per stage, (rows, cols) of the windows as built; None: window_size, cut to a stage grid it exceeds at
    # image_size (timm's rule). The importers give them as the source built them.
    windows: tuple[tuple[int, int], ...] | None = None
    # per stage, the odd blocks' cyclic shift (rows, cols); None: half the window, 0 along an axis one window covers
    shifts: tuple[tuple[int, int], ...] | None = None
    shift_rule: Literal["fixed", "input"] = "fixed"  # "input": no shift where the input's stage grid fits a window
    version: int = 1  # 1: Swin; 2: Swin v2 (cosine attention, position MLP, post-norm, merging normed last)
    pretrained_windows: tuple[int, ...] | None = None  # v2: per stage, the window side its position MLP was trained
    # at (0 or None: its own), which fixes the scale of the offsets the MLP reads
    padding: Padding = "timm"  # where an input that is no multiple of the window is padded (module docstring)
    mask_value: float = -100.0  # added to scores across the shift's seams (transformers' Swin v2 adds it twice)
    absolute_positions: bool = False  # a learned position table on the patches (transformers' use_absolute_embeddings)
    mlp_ratio: float = 4.0  # each block's MLP width over its token width
    qkv_bias: bool = True  # biases on queries, keys and values (Swin v2's key bias is fixed at 0)
    activation: Activation = "gelu"  # the MLP's activation
    layer_norm_eps: float = 1e-5  # the blocks' and the final norm's (the patch and merging norms keep 1e-5)
    num_classes: int = 1000  # 0: a backbone, logits None
    # timm's swinv2_cr (SwinTransformerV2Cr) differs from Swin v2 in four places; the defaults are every other Swin's
    main_norms: tuple[int, ...] = ()  # blocks (indices over all stages) whose output is normed on the main branch
    final_norm: bool = True  # a norm on the last stage's tokens before pooling (swinv2_cr: none, its last block's)
    merge_norm: Literal["before", "after"] | None = None  # the merging's norm before or after its linear map;
    # None: the version's (v1 before, v2 after)
    position_mlp: Literal["swinv2", "cr"] = "swinv2"  # v2's position MLP: "swinv2" 2 -> 512 -> heads over log2
    # offsets scaled to the window, 16 sigmoid(.); "cr" 2 -> 384 -> heads (biased) over sign(d) ln(1 + |d|), as is

    def __post_init__(self) -> None:
        problems = []
        tuples = ("depths", "num_heads", "windows", "shifts", "pretrained_windows", "main_norms")
        for name in (*tuples, "image_size", "window_size"):  # lists come back from JSON and checkpoints
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                setattr(self, name, tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in value))
        stages = len(self.depths) if isinstance(self.depths, tuple) else 0
        if not stages or not all(isinstance(d, int) and d > 0 for d in self.depths):
            problems.append(f"depths must be positive block counts, one per stage; got {self.depths!r}")
        sides = self.image_size if isinstance(self.image_size, tuple) else (self.image_size,)
        if len(sides) not in (1, 2) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sides):
            problems.append(f"image_size must be a side or (height, width) in pixels; got {self.image_size!r}")
        for name in ("patch_size", "num_channels", "embed_dim"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name} must be a positive integer; got {getattr(self, name)!r}")
        if not isinstance(self.num_heads, tuple) or len(self.num_heads) != stages:
            problems.append(f"num_heads needs one count per stage ({stages}); got {self.num_heads!r}")
        elif not problems and any(
            h < 1 or (self.embed_dim * 2**s) % h for s, h in enumerate(self.num_heads) if isinstance(h, int)
        ):
            problems.append(f"num_heads {self.num_heads} must divide each stage's width (embed_dim x 2^stage)")
        for name, choices in (
            ("padding", PADDINGS),
            ("shift_rule", ("fixed", "input")),
            ("version", (1, 2)),
            ("merge_norm", (*MERGE_NORMS, None)),
            ("position_mlp", POSITION_MLPS),
            ("final_norm", (True, False)),
        ):
            if getattr(self, name) not in choices:
                problems.append(f"{name} must be one of {', '.join(map(repr, choices))}; got {getattr(self, name)!r}")
        if self.position_mlp != "swinv2" and self.version != 2:
            problems.append(f"position_mlp {self.position_mlp!r} is a Swin v2 position MLP; version is {self.version}")
        total = sum(self.depths) if stages and all(isinstance(d, int) for d in self.depths) else None
        if not isinstance(self.main_norms, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < (total or 1) for i in self.main_norms
        ):
            problems.append(f"main_norms must be block indices in [0, {total}); got {self.main_norms!r}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {', '.join(ACTIVATIONS)}; got {self.activation!r}")
        if problems:
            raise ValueError("invalid SwinConfig: " + "; ".join(problems))
        self.main_norms = tuple(sorted(set(self.main_norms)))
        if self.windows is None or self.shifts is None:
            windows, shifts = self._fitted_windows()
            self.windows = self.windows or windows
            self.shifts = self.shifts or shifts
        for name in ("windows", "shifts"):
            value = getattr(self, name)
            if len(value) != stages or not all(len(p) == 2 and min(p) >= 0 for p in value):
                problems.append(f"{name} needs one (rows, cols) per stage ({stages}); got {value!r}")
        if not problems and any(min(w) < 1 or s[0] >= w[0] or s[1] >= w[1] for w, s in zip(self.windows, self.shifts)):
            problems.append(
                f"each window must be positive and larger than its shift; got {self.windows}, {self.shifts}"
            )
        if self.pretrained_windows is not None and len(self.pretrained_windows) != stages:
            problems.append(f"pretrained_windows needs one side per stage ({stages}); got {self.pretrained_windows!r}")
        if problems:
            raise ValueError("invalid SwinConfig: " + "; ".join(problems))

    def _fitted_windows(self) -> tuple[tuple[Pair, ...], tuple[Pair, ...]]:
        """timm's rule: along each axis the window is cut to a stage grid smaller than it, and that axis not shifted."""
        sides = self.window_size if isinstance(self.window_size, tuple) else (self.window_size,) * len(self.depths)
        windows, shifts = [], []
        for stage, side in enumerate(sides):
            grid = [math.ceil(g / 2**stage) for g in self.grid_size]
            window = tuple(min(g, side) for g in grid)
            windows.append(window)
            shifts.append(tuple(0 if g <= w else side // 2 for g, w in zip(grid, window)))
        return tuple(windows), tuple(shifts)

    @property
    def image_hw(self) -> tuple[int, int]:
        return (self.image_size, self.image_size) if isinstance(self.image_size, int) else self.image_size

    @property
    def grid_size(self) -> tuple[int, int]:
        """The first stage's patch grid (rows, cols) at image_size."""
        return tuple(math.ceil(side / self.patch_size) for side in self.image_hw)

    @property
    def merge_norm_first(self) -> bool:
        """Whether the patch merging norms its concatenated tokens before its linear map (else after it)."""
        return self.merge_norm == "before" if self.merge_norm else self.version == 1

    @property
    def num_layers(self) -> int:
        """Blocks in all stages."""
        return sum(self.depths)

    def width(self, stage: int) -> int:
        return self.embed_dim * 2**stage

    @property
    def hidden_size(self) -> int:
        """The last stage's token width: what the head reads."""
        return self.width(len(self.depths) - 1)

    @property
    def num_parameters(self) -> int:
        """The parameter count from these numbers alone, so a loader can refuse a model too big before building it."""
        D, p = self.embed_dim, self.patch_size
        count = (
            self.num_channels * p * p * D
            + D
            + 2 * D
            + (math.prod(self.grid_size) * D if self.absolute_positions else 0)
        )
        for stage, (depth, heads, window) in enumerate(zip(self.depths, self.num_heads, self.windows)):
            d = self.width(stage)
            if stage:  # the merging: a map from 4 d/2 to d, normed before (4 d/2 wide) or after (d wide)
                count += 2 * d * d + 2 * (2 * d if self.merge_norm_first else d)
            hidden = int(d * self.mlp_ratio)
            offsets = (2 * window[0] - 1) * (2 * window[1] - 1)
            if self.version == 1:
                bias = offsets * heads
            elif self.position_mlp == "cr":
                bias = heads + 3 * CR_HIDDEN + CR_HIDDEN * heads + heads
            else:
                bias = heads + 3 * CPB_HIDDEN + CPB_HIDDEN * heads
            block = 4 * d + 3 * d * d + 3 * d * self.qkv_bias + d * d + d + 2 * d * hidden + hidden + d + bias
            count += depth * block
        first = 0
        for stage, depth in enumerate(self.depths):  # the main-branch norms
            count += 2 * self.width(stage) * sum(first <= i < first + depth for i in self.main_norms)
            first += depth
        final = 2 * self.hidden_size if self.final_norm else 0
        return count + final + (self.hidden_size + 1) * self.num_classes

    @classmethod
    def from_dict(cls, values: dict) -> SwinConfig:
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(values) - known):
            raise ValueError(f"unknown SwinConfig fields {unknown}; known fields are {sorted(known)}")
        return cls(**values)
