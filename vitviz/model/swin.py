"""Swin Transformer (Liu et al. 2021, "Hierarchical Vision Transformer using Shifted Windows") and Swin v2 (Liu et
al. 2022, "Scaling Up Capacity and Resolution"), returning every block's window attention.

Top to bottom as data flows: patch embedding (a convolution, then a LayerNorm) -> stages, each a patch merging
(from the second stage on: every 2 x 2 group of tokens concatenated, then a linear map to twice the width) and
blocks that attend inside windows, every other block on a grid rolled by half a window (the cyclic shift) with a
mask that keeps apart the tokens the roll brought together -> final LayerNorm -> mean of the last stage's tokens
-> linear head. Window attention adds a learned relative position bias before its softmax. Swin v2 attends by the
cosine of queries and keys times a learned, clamped scale, takes its bias from a small MLP over log-spaced offsets
(16 sigmoid(.)), normalises each branch's output before the residual sum, and normalises the merging after its
linear map. timm's swinv2_cr is Swin v2 with four changes, each a config field: its position MLP reads unscaled
natural-log offsets and adds its output as is (``position_mlp="cr"``), the merging norms before its map
(``merge_norm="before"``), some blocks norm the main branch after their MLP (``main_norms``: the last block of the
last stage, of every stage in the _ns models, every sixth in the huge and giant ones), and no final norm follows
(``final_norm=False``).

``out.attentions[l]`` is block l's attention as its source computes it, (B * nW, heads, wh * ww, wh * ww), in the
shifted frame for shifted blocks; ``out.layouts[l].windows`` names the token in each window's slot (-1: padding).

Padding (``SwinConfig.padding``): an input whose patch grid is not a multiple of the window gets zero tokens on the
bottom and right of every block's grid. "huggingface" (transformers' Swin and Swin v2) pads before the cyclic
shift, so in shifted blocks the padding wraps round into the top-left windows, and pads the pixels to a multiple
of the patch size; "timm" shifts first and pads after, and takes only multiples of the patch size. Padded slots
take part in the attention in both (only the shift's mask keeps tokens apart); the importers set the field from
the source. ``shift_rule`` "input" follows transformers' Swin (v1), which decides per input that a stage whose
grid fits in one window is not shifted; the others fix each stage's window and shift for ``image_size``.

``head_mask`` (layers, heads) scales each head's output before its block's projection, in every window: 0 knocks
the head out (explain.head_importance on a Swin).

Inference only: no dropout, no stochastic depth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from vitviz.layout import TokenLayout
from vitviz.layout.windows import window_layout
from vitviz.model.layers import activation
from vitviz.model.relevance_rules import LayerNorm, attention_inputs
from vitviz.model.swin_config import CPB_HIDDEN, CR_HIDDEN, SwinConfig
from vitviz.model.windows import (
    Padding,
    Pair,
    from_windows,
    log_spaced_offsets,
    natural_log_offsets,
    relative_position_index,
    shift_mask,
    to_windows,
    window_tokens,
)

if TYPE_CHECKING:
    from vitviz.preprocessing import Preprocessing


# The caches outlive the call that fills them: their tensors are made outside inference mode, since an inference
# tensor cached by a torch.inference_mode() forward cannot be saved for backward by a later one (relevance).
@lru_cache(maxsize=256)
def _cached_mask(grid: Pair, window: Pair, shift: Pair, value: float) -> torch.Tensor | None:
    with torch.inference_mode(False):
        return shift_mask(grid, window, shift, value)


@lru_cache(maxsize=64)
def _cached_index(window: Pair) -> torch.Tensor:
    with torch.inference_mode(False):
        return relative_position_index(window)


@lru_cache(maxsize=64)
def _cached_offsets(window: Pair, pretrained: Pair, kind: str) -> torch.Tensor:
    with torch.inference_mode(False):
        return natural_log_offsets(window) if kind == "cr" else log_spaced_offsets(window, pretrained)


class WindowAttention(nn.Module):
    """Multi-head attention inside each window, with a relative position bias (v1: a learned table; v2: an MLP over
    log-spaced offsets) added before the softmax; v2 scores by cosine similarity times a learned scale, clamped at
    100 (swinv2_cr's too: its per-head ``logit_scale`` is this one, shaped (heads,) there)."""

    def __init__(self, config: SwinConfig, dim: int, heads: int, window: Pair, pretrained_window: int):
        super().__init__()
        self.heads, self.window, self.version, self.position_mlp = heads, window, config.version, config.position_mlp
        self.pretrained_window = (pretrained_window, pretrained_window)
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=config.qkv_bias)
        self.proj = nn.Linear(dim, dim)
        if config.version == 1:
            offsets = (2 * window[0] - 1) * (2 * window[1] - 1)
            self.relative_position_bias_table = nn.Parameter(torch.zeros(offsets, heads))
        else:
            self.logit_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(10.0)))
            if config.position_mlp == "cr":  # timm swinv2_cr's meta network, biased at both layers
                self.meta_mlp = nn.ModuleDict(dict(fc1=nn.Linear(2, CR_HIDDEN), fc2=nn.Linear(CR_HIDDEN, heads)))
            else:
                self.cpb_mlp = nn.Sequential(
                    nn.Linear(2, CPB_HIDDEN), nn.ReLU(), nn.Linear(CPB_HIDDEN, heads, bias=False)
                )

    def position_bias(self) -> torch.Tensor:
        """(heads, N, N), N = wh * ww: what each head adds to the score of slot i attending to slot j."""
        if self.version == 1:
            table = self.relative_position_bias_table  # (offsets, heads)
        else:
            offsets = _cached_offsets(self.window, self.pretrained_window, self.position_mlp)
            offsets = offsets.to(self.logit_scale.device, self.logit_scale.dtype)
            if self.position_mlp == "cr":  # the MLP's output as is
                table = self.meta_mlp.fc2(F.relu(self.meta_mlp.fc1(offsets)))  # (offsets, heads)
            else:
                table = 16 * torch.sigmoid(self.cpb_mlp(offsets))  # (offsets, heads)
        index = _cached_index(self.window).to(table.device)
        return table[index.view(-1)].view(*index.shape, self.heads).permute(2, 0, 1)  # (heads, N, N)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool, head_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B * nW, N, C), mask (nW, N, N) or None -> (B * nW, N, C), and the weights (B * nW, heads, N, N) if
        asked. ``head_mask`` (B * nW, heads) scales each head's output before the projection (0: knocked out)."""
        BW, N, C = x.shape
        q, k, v = self.qkv(x).view(BW, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # (BW, heads, N, hd)
        if self.version == 2:  # cosine attention: the scale is clamped at 100, as trained
            scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()  # (heads, 1, 1)
            q, k, scale = F.normalize(q, dim=-1) * scale, F.normalize(k, dim=-1), 1.0
        else:
            scale = self.scale
        q, k, v = attention_inputs(q, k, v)  # as they are, unless relevance rules are on
        bias = self.position_bias()[None]  # (1, heads, N, N)
        if mask is not None:  # (nW, N, N), the same for every image of the batch
            nW = mask.shape[0]
            bias = (bias.unsqueeze(1) + mask.to(bias)[:, None]).expand(BW // nW, -1, -1, -1, -1)  # (B, nW, heads, N, N)
            bias = bias.reshape(BW, self.heads, N, N)
        if need_weights:
            scores = (q * scale) @ k.transpose(-2, -1) + bias  # (BW, heads, N, N)
            weights = scores.softmax(dim=-1, dtype=torch.float32)
            out = weights.to(v.dtype) @ v
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)
        if head_mask is not None:
            out = out * head_mask[:, :, None, None].to(out.dtype)
        return self.proj(out.transpose(1, 2).reshape(BW, N, C)), weights


class SwinBlock(nn.Module):
    """Window attention then an MLP, each on a residual branch: pre-norm (v1) or normed after the branch (v2); with
    ``main_norm`` (swinv2_cr), the sum is normed too (``norm3``)."""

    def __init__(
        self, config: SwinConfig, dim: int, heads: int, window: Pair, pretrained_window: int, main_norm: bool = False
    ):
        super().__init__()
        self.config = config
        self.norm1 = LayerNorm(dim, eps=config.layer_norm_eps)
        self.attn = WindowAttention(config, dim, heads, window, pretrained_window)
        self.norm2 = LayerNorm(dim, eps=config.layer_norm_eps)
        hidden = int(dim * config.mlp_ratio)
        self.mlp = nn.ModuleDict(dict(fc1=nn.Linear(dim, hidden), fc2=nn.Linear(hidden, dim)))
        self.norm3 = LayerNorm(dim, eps=config.layer_norm_eps) if main_norm else None

    def forward(
        self, x: torch.Tensor, shift: Pair, need_weights: bool, head_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, H, W, C) -> (B, H, W, C), and the attention weights (B * nW, heads, N, N) if asked; ``head_mask``
        (B, heads) scales each head's output in every window of its image."""
        c, window = self.config, self.attn.window
        B, H, W, C = x.shape
        y = self.norm1(x) if c.version == 1 else x
        windows = to_windows(y, window, shift, c.padding)  # (B * nW, N, C)
        mask = _cached_mask((H, W), window, shift, c.mask_value)
        if head_mask is not None:  # windows are listed image by image: each image's row for each of its windows
            head_mask = head_mask.repeat_interleave(windows.shape[0] // B, dim=0)
        out, weights = self.attn(windows, mask, need_weights, head_mask)
        y = from_windows(out, window, shift, c.padding, (H, W))  # (B, H, W, C)
        mlp = lambda t: self.mlp.fc2(activation(self.mlp.fc1(t), c.activation))  # noqa: E731
        if c.version == 1:
            x = x + y
            x = x + mlp(self.norm2(x))
        else:
            x = x + self.norm1(y)
            x = x + self.norm2(mlp(x))
        return (x if self.norm3 is None else self.norm3(x)), weights


class PatchMerging(nn.Module):
    """Each 2 x 2 group of tokens becomes one of twice the width: their features concatenated in the order
    (top-left, bottom-left, top-right, bottom-right), normed and mapped (v1, swinv2_cr) or mapped and normed (v2)."""

    def __init__(self, dim: int, norm_first: bool):
        super().__init__()
        self.norm_first = norm_first
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = LayerNorm(4 * dim if norm_first else 2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))  # an odd grid gets a zero row or column
        H, W = x.shape[1:3]
        # (B, H/2, 2, W/2, 2, C) -> (B, H/2, W/2, col offset, row offset, C): the row offset varies fastest
        x = x.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).reshape(B, H // 2, W // 2, 4 * C)
        return self.reduction(self.norm(x)) if self.norm_first else self.norm(self.reduction(x))


class SwinStage(nn.Module):
    def __init__(self, config: SwinConfig, stage: int):
        super().__init__()
        dim = config.width(stage)
        self.merge = PatchMerging(dim // 2, config.merge_norm_first) if stage else None
        pretrained = config.pretrained_windows[stage] if config.pretrained_windows else 0
        window, first = config.windows[stage], sum(config.depths[:stage])
        self.blocks = nn.ModuleList(
            SwinBlock(config, dim, config.num_heads[stage], window, pretrained, first + i in config.main_norms)
            for i in range(config.depths[stage])
        )


@dataclass
class SwinOutput:
    logits: torch.Tensor | None  # (B, num_classes), None for a backbone
    pooled: torch.Tensor  # (B, D) the mean of the last stage's tokens after the final norm: what the head reads
    last_hidden_state: torch.Tensor  # (B, T, D) the last stage's tokens after the final norm (if any), row-major
    attentions: tuple[torch.Tensor, ...] | None  # per block (B * nW, heads, wh * ww, wh * ww), rows sum to 1
    grid_size: tuple[int, int]  # the first stage's patch grid (rows, cols) of this input
    num_prefix_tokens: int  # 0: Swin has no [CLS] or registers
    readout: torch.Tensor  # (B, T) how much of each last-stage token the head reads (1 / T each)
    stage_grids: tuple[tuple[int, int], ...]  # per stage, its grid (rows, cols)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # per block, its output (B, T_stage, D_stage), on request
    layout: TokenLayout | None = None  # the first block's tokens: what maps are drawn on
    layouts: tuple[TokenLayout, ...] | None = None  # per block: its stage's tokens and its windows


@lru_cache(maxsize=256)
def _block_layout(
    grid: Pair, window: Pair, shift: Pair, padding: Padding, token_size: int, image_size: Pair
) -> TokenLayout:
    tokens = window_tokens(grid, window, shift, padding).numpy()
    return window_layout(grid, token_size, tokens, image_size)


class Swin(nn.Module):
    """Swin or Swin v2 returning logits and, on request, every block's window attention (module docstring).

    Like ``ViT`` it carries what a loader knows: ``class_names``, ``transform``, ``text_tower`` (always None) and
    ``text_tower_note``, ``training_info``.
    """

    def __init__(self, config: SwinConfig):
        super().__init__()
        self.config = config
        D = config.embed_dim
        self.patch_embed = nn.ModuleDict(
            dict(proj=nn.Conv2d(config.num_channels, D, config.patch_size, config.patch_size), norm=LayerNorm(D))
        )
        rows, cols = config.grid_size
        self.pos_embed = nn.Parameter(torch.zeros(1, rows * cols, D)) if config.absolute_positions else None
        self.stages = nn.ModuleList(SwinStage(config, stage) for stage in range(len(config.depths)))
        # swinv2_cr has no final norm (its last block norms the main branch): an identity, so model.norm still reads
        self.norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.final_norm else nn.Identity()
        self.head = nn.Linear(config.hidden_size, config.num_classes) if config.num_classes else None
        self.attn_implementation = "sdpa"  # the kernel when no weights are asked for: "sdpa" or "eager"
        self.class_names: list[str] = [f"class {i}" for i in range(config.num_classes)]
        self.transform: Preprocessing | None = None
        self.text_tower = None
        self.text_tower_note: str | None = None
        self.training_info: dict = {}

    @property
    def blocks(self) -> list[SwinBlock]:
        """Every block, stage after stage: ``attentions[l]`` is ``blocks[l]``'s."""
        return [block for stage in self.stages for block in stage.blocks]

    def embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> the first stage's tokens (B, rows, cols, D)."""
        c = self.config
        if pixel_values.ndim != 4 or pixel_values.shape[1] != c.num_channels:
            raise ValueError(
                f"expected pixel_values of shape (B, {c.num_channels}, H, W), got {tuple(pixel_values.shape)}"
            )
        H, W = pixel_values.shape[-2:]
        if c.padding == "huggingface":  # transformers pads the pixels to whole patches
            pixel_values = F.pad(pixel_values, (0, -W % c.patch_size, 0, -H % c.patch_size))
        elif H % c.patch_size or W % c.patch_size:
            raise ValueError(
                f"image {H}x{W} is not a multiple of the patch size {c.patch_size} (timm's Swin takes only those); "
                f"resize or crop it, e.g. to {max(1, round(H / c.patch_size)) * c.patch_size}x"
                f"{max(1, round(W / c.patch_size)) * c.patch_size}"
            )
        x = self.patch_embed.proj(pixel_values).permute(0, 2, 3, 1)  # (B, rows, cols, D)
        x = self.patch_embed.norm(x)
        if self.pos_embed is not None:
            x = x + self._positions(*x.shape[1:3]).to(x.dtype)
        return x

    def _positions(self, rows: int, cols: int) -> torch.Tensor:
        """The position table (1, rows, cols, D), resized bicubically from the training grid as transformers does."""
        train_rows, train_cols = self.config.grid_size
        table = self.pos_embed.view(1, train_rows, train_cols, -1)
        if (rows, cols) != (train_rows, train_cols):
            table = F.interpolate(table.permute(0, 3, 1, 2), size=(rows, cols), mode="bicubic", align_corners=False)
            table = table.permute(0, 2, 3, 1)
        return table

    def block_shift(self, stage: int, index: int, grid: Pair) -> Pair:
        """The cyclic shift of the block ``index`` of ``stage`` on an input whose stage grid is ``grid``."""
        c = self.config
        window = c.windows[stage]
        if index % 2 == 0:
            return (0, 0)
        if c.shift_rule == "input" and min(grid) <= max(window):
            if min(grid) < max(window):  # transformers cannot run it either: its bias table is for the whole window
                raise ValueError(
                    f"stage {stage + 1}'s grid {grid[0]}x{grid[1]} is smaller than its {window[0]}x{window[1]} "
                    f"window, which transformers' Swin cannot run; give an input of at least "
                    f"{max(window) * c.patch_size * 2**stage} px on each side"
                )
            return (0, 0)
        return c.shifts[stage]

    def input_layouts(self, image_size: Pair | None = None) -> tuple[TokenLayout, ...]:
        """Every block's layout for an input of ``image_size`` (height, width; the config's by default), without a
        pass: what ``out.layouts`` will be (its stage grids, windows and shifts), for code that must know before
        running the model whether its blocks attend in windows (``vitviz.layout.is_hierarchical``)."""
        c = self.config
        height, width = image_size or c.image_hw
        grid = (math.ceil(height / c.patch_size), math.ceil(width / c.patch_size))
        layouts = []
        for s, stage in enumerate(self.stages):
            if s:
                grid = (math.ceil(grid[0] / 2), math.ceil(grid[1] / 2))
            for i, block in enumerate(stage.blocks):
                shift = self.block_shift(s, i, grid)
                layouts.append(
                    _block_layout(grid, block.attn.window, shift, c.padding, c.patch_size * 2**s, (height, width))
                )
        return tuple(layouts)

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        attention_sink=None,
        head_mask: torch.Tensor | None = None,
    ) -> SwinOutput:
        """Classify a batch (B, C, H, W). ``attention_sink(block_index, weights)``, if given, receives each block's
        weights as soon as they exist (kept only with ``output_attentions``); ``output_hidden_states`` keeps every
        block's output tokens (B, T_stage, D_stage). ``head_mask`` (layers, heads) or (B, layers, heads), heads the
        most of any block (a block reads its own first ones): each head's output is multiplied by its entry before
        the block's projection, so 0 knocks the head out (``head_mask_of`` builds one)."""
        c = self.config
        head_mask = self._checked_head_mask(head_mask, pixel_values.shape[0])
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', not {self.attn_implementation!r}")
        explicit = output_attentions or attention_sink is not None or self.attn_implementation == "eager"
        image_size = tuple(pixel_values.shape[-2:])
        x = self.embed(pixel_values)  # (B, rows, cols, D)
        attentions, hidden_states, layouts, grids = [], [], [], []
        for s, stage in enumerate(self.stages):
            if stage.merge is not None:
                x = stage.merge(x)  # (B, ceil(rows / 2), ceil(cols / 2), 2 D)
            grid = tuple(x.shape[1:3])
            grids.append(grid)
            for i, block in enumerate(stage.blocks):
                shift = self.block_shift(s, i, grid)
                index = len(layouts)  # the block's index over every stage
                mask = None if head_mask is None else head_mask[:, index, : block.attn.heads]
                x, weights = block(x, shift, explicit, mask)
                layouts.append(
                    _block_layout(grid, block.attn.window, shift, c.padding, c.patch_size * 2**s, image_size)
                )
                if attention_sink is not None:
                    attention_sink(index, weights)
                if output_attentions:
                    attentions.append(weights)
                if output_hidden_states:
                    hidden_states.append(x.flatten(1, 2))
        out = self.forward_head(x.flatten(1, 2))
        out.attentions = tuple(attentions) if output_attentions else None
        out.hidden_states = tuple(hidden_states) if output_hidden_states else None
        out.grid_size, out.stage_grids = grids[0], tuple(grids)
        out.layout, out.layouts = layouts[0], tuple(layouts)
        return out

    def _checked_head_mask(self, head_mask: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """``head_mask`` as (B, layers, heads), or a one-line error naming the shape it must have."""
        if head_mask is None:
            return None
        c = self.config
        shape = (c.num_layers, max(c.num_heads))
        if head_mask.shape == shape:
            head_mask = head_mask.expand(batch, *shape)
        if head_mask.shape != (batch, *shape):
            raise ValueError(
                f"head_mask must be (layers, heads) = {shape} or (B, layers, heads) with B = {batch} (heads: the most "
                f"of any block); got {tuple(head_mask.shape)}"
            )
        return head_mask

    def forward_head(self, tokens: torch.Tensor) -> SwinOutput:
        """Final norm (an identity for swinv2_cr), mean pooling and head on the last stage's tokens (B, T, D); given
        another block's output of the last stage, it reads that block as if it were the last (the logit lens)."""
        x = self.norm(tokens)  # (B, T, D)
        pooled = x.mean(dim=1)
        B, T = x.shape[:2]
        readout = x.new_full((B, T), 1 / T, dtype=torch.promote_types(x.dtype, torch.float32))
        logits = self.head(pooled) if self.head is not None else None
        return SwinOutput(logits, pooled, x, None, (0, 0), 0, readout, ())

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits (..., classes) -> softmax probabilities in at least fp32."""
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(dim=-1)
