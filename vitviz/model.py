"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

One file, top to bottom in the order data flows: patch embedding -> [CLS] token and
position embeddings -> pre-norm encoder blocks -> final LayerNorm -> pooling -> linear head.

Unlike most implementations, the attention weights are *returned* from every block when
asked for (``model(x, output_attentions=True)``) rather than captured with hooks, which
break silently when a library switches to fused attention kernels.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, fields
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ViTConfig:
    image_size: int | tuple[int, int] = 224  # training resolution, side or (height, width)
    patch_size: int = 16  # side of each square patch, in pixels
    num_channels: int = 3  # input channels (3 for RGB)
    hidden_size: int = 768  # token width D
    num_layers: int = 12  # encoder blocks
    num_heads: int = 12  # attention heads per block; must divide hidden_size
    mlp_size: int = 3072  # hidden width of each block's MLP
    num_classes: int = 1000  # 0 builds a backbone with no head (logits are None)
    pooling: Literal["cls", "mean"] = "cls"  # classify from [CLS] or from the mean patch token
    class_token: bool = True  # prepend a learnable [CLS] token
    num_register_tokens: int = 0  # extra learnable prefix tokens (Darcet et al. 2023)
    dropout: float = 0.0  # after position embeddings, attention output and MLP
    attention_dropout: float = 0.0  # on attention weights (the returned weights are pre-dropout)
    drop_path: float = 0.0  # stochastic depth, rising linearly to this rate in the last block
    layer_norm_eps: float = 1e-6  # torchvision uses 1e-6, Hugging Face 1e-12
    qkv_bias: bool = True  # bias in the query/key/value projection

    def __post_init__(self) -> None:
        if isinstance(self.image_size, (list, tuple)):  # lists come back from JSON and checkpoints
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        height, width = self.image_hw
        problems = []
        if self.hidden_size % self.num_heads:
            problems.append(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if height % self.patch_size or width % self.patch_size:
            problems.append(f"image_size {height}x{width} is not a multiple of patch_size {self.patch_size}")
        if self.pooling not in ("cls", "mean"):
            problems.append(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")
        if self.pooling == "cls" and not self.class_token:
            problems.append("pooling='cls' needs class_token=True")
        if min(self.patch_size, self.num_channels, self.hidden_size, self.num_layers, self.num_heads, self.mlp_size) < 1:
            problems.append("sizes and counts must be positive")
        if self.num_classes < 0 or self.num_register_tokens < 0:
            problems.append("num_classes and num_register_tokens must be >= 0")
        if problems:
            raise ValueError("invalid ViTConfig: " + "; ".join(problems))

    @property
    def image_hw(self) -> tuple[int, int]:
        size = self.image_size
        return (size, size) if isinstance(size, int) else size

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, cols) at the training resolution."""
        height, width = self.image_hw
        return height // self.patch_size, width // self.patch_size

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: [CLS] (if any) then the registers."""
        return int(self.class_token) + self.num_register_tokens

    @classmethod
    def from_dict(cls, values: dict) -> ViTConfig:
        """Build from a plain dict (a checkpoint's), naming any unknown keys."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown ViTConfig fields {unknown}; known fields are {sorted(known)}")
        return cls(**values)


Precision = Literal["fp32", "bf16"]


def autocast(precision: Precision = "fp32", device_type: str = "cpu") -> contextlib.AbstractContextManager:
    """Context for inference at a precision: "bf16" runs matrix products in bfloat16.

    On CPUs with bf16 units this is several times faster; returned attentions stay fp32.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    raise ValueError(f"precision must be one of 'fp32', 'bf16'; got {precision!r}")


@dataclass
class ViTOutput:
    logits: torch.Tensor | None  # (B, num_classes), None for a backbone
    pooled: torch.Tensor  # (B, D) the representation the head sees
    last_hidden_state: torch.Tensor  # (B, T, D) after the final LayerNorm
    attentions: tuple[torch.Tensor, ...] | None  # per block (B, heads, T, T), rows sum to 1
    grid_size: tuple[int, int]  # patch grid (rows, cols) of this input
    num_prefix_tokens: int  # tokens before the patches; T = num_prefix_tokens + rows * cols


class PatchEmbedding(nn.Module):
    """Cut the image into non-overlapping patches and project each to D dimensions."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.patch_size = config.patch_size
        # kernel = stride = patch size: one linear projection per patch
        self.proj = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size, config.patch_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.proj(pixel_values)  # (B, D, rows, cols)
        return x.flatten(2).transpose(1, 2)  # (B, N, D), patches in row-major order


class Attention(nn.Module):
    """Multi-head self-attention that can return its post-softmax weights."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.qkv_bias)
        self.attention_dropout = config.attention_dropout
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, D = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head_dim)
        dropout_p = self.attention_dropout if self.training else 0.0
        if need_weights:
            # explicit path: the weights exist as a tensor, so they can be returned. The softmax
            # runs in fp32 even under bf16 autocast, so returned rows sum to 1 to fp32 precision.
            # One expression, so the pre-softmax scores are freed at once: keeping them alive
            # makes the allocator hand back and re-fault memory, slowing the whole block.
            weights = ((q * self.scale) @ k.transpose(-2, -1)).float().softmax(dim=-1)  # (B, heads, T, T)
            out = F.dropout(weights, dropout_p, self.training) @ v  # (B, heads, T, head_dim)
        else:
            # fast path: fused kernel, never materialises the T x T matrix
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(B, T, D)  # heads back side by side
        return self.proj(out), weights


class MLP(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.mlp_size)
        self.fc2 = nn.Linear(config.mlp_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.dropout(F.gelu(self.fc1(x)))))


class DropPath(nn.Module):
    """Stochastic depth: during training, skip a block's residual branch for random samples."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty(x.shape[0], 1, 1).bernoulli_(keep)  # one draw per sample
        return x * mask / keep


class Block(nn.Module):
    """Pre-norm encoder block: x + MSA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = MLP(config)
        self.dropout = nn.Dropout(config.dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.attn(self.norm1(x), need_weights)
        x = x + self.drop_path(self.dropout(attended))  # (B, T, D)
        x = x + self.drop_path(self.mlp(self.norm2(x)))  # (B, T, D)
        return x, weights


class ViT(nn.Module):
    """Vision Transformer returning logits and, on request, every block's attention weights."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        D = config.hidden_size
        self.patch_embed = PatchEmbedding(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.register_tokens = (
            nn.Parameter(torch.zeros(1, config.num_register_tokens, D)) if config.num_register_tokens else None
        )
        rows, cols = config.grid_size
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_prefix_tokens + rows * cols, D))
        self.pos_dropout = nn.Dropout(config.dropout)
        rates = [config.drop_path * i / max(1, config.num_layers - 1) for i in range(config.num_layers)]
        self.blocks = nn.ModuleList(Block(config, rate) for rate in rates)
        self.norm = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.head = nn.Linear(D, config.num_classes) if config.num_classes > 0 else None
        # Which attention kernel runs when no weights are asked for: "sdpa" (the fused
        # scaled_dot_product_attention) or "eager" (the explicit softmax path). Same maths; on a
        # CPU with short sequences "eager" is faster to train (bench/bench_train_step.py).
        self.attn_implementation = "sdpa"
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal for tokens and linear layers, as in the ViT paper's reference code;
        # a zero head so training starts from uniform predictions
        for param in (self.cls_token, self.register_tokens, self.pos_embed):
            if param is not None:
                nn.init.trunc_normal_(param, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        fan_in = self.patch_embed.proj.in_channels * self.config.patch_size**2
        nn.init.trunc_normal_(self.patch_embed.proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.patch_embed.proj.bias)
        if self.head is not None:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def position_embeddings(self, rows: int, cols: int) -> torch.Tensor:
        """Position embeddings for a rows x cols patch grid, (1, prefix + rows * cols, D).

        At another grid than the training one, the patch part is resized with bicubic
        interpolation (align_corners=False, as Hugging Face does); prefix tokens keep theirs.
        """
        train_rows, train_cols = self.config.grid_size
        if (rows, cols) == (train_rows, train_cols):
            return self.pos_embed
        prefix = self.config.num_prefix_tokens
        prefix_pos, patch_pos = self.pos_embed[:, :prefix], self.pos_embed[:, prefix:]
        D = patch_pos.shape[-1]
        patch_pos = patch_pos.reshape(1, train_rows, train_cols, D).permute(0, 3, 1, 2)  # (1, D, r, c)
        patch_pos = F.interpolate(patch_pos, size=(rows, cols), mode="bicubic", align_corners=False)
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, rows * cols, D)  # (1, N, D)
        return torch.cat([prefix_pos, patch_pos], dim=1)

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool = False,
        attention_sink: Callable[[int, torch.Tensor], None] | None = None,
    ) -> ViTOutput:
        """Classify a batch of images, shape (B, C, H, W) with H and W multiples of the patch size.

        Any such size works, non-square too: position embeddings are interpolated to the grid.
        ``attention_sink(block_index, weights)``, if given, receives each block's attention
        weights (B, heads, T, T) as soon as they exist; unless ``output_attentions`` is also set
        they are not kept, so statistics can be streamed without holding every T x T matrix.
        """
        self._check_input(pixel_values)
        B, _, H, W = pixel_values.shape
        grid = (H // self.config.patch_size, W // self.config.patch_size)
        x = self.patch_embed(pixel_values)  # (B, N, D)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.register_tokens) if t is not None]
        x = torch.cat([*prefix, x], dim=1)  # (B, T, D), T = prefix + N
        x = self.pos_dropout(x + self.position_embeddings(*grid))

        attentions = []
        need_weights = output_attentions or attention_sink is not None
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"attn_implementation must be 'sdpa' or 'eager', not {self.attn_implementation!r}")
        explicit = need_weights or self.attn_implementation == "eager"
        for index, block in enumerate(self.blocks):
            x, weights = block(x, need_weights=explicit)
            if attention_sink is not None:
                attention_sink(index, weights)
            if output_attentions:
                attentions.append(weights)
        x = self.norm(x)  # (B, T, D)

        if self.config.pooling == "cls":
            pooled = x[:, 0]  # (B, D)
        else:
            pooled = x[:, self.config.num_prefix_tokens :].mean(dim=1)  # (B, D)
        return ViTOutput(
            logits=self.head(pooled) if self.head is not None else None,
            pooled=pooled,
            last_hidden_state=x,
            attentions=tuple(attentions) if output_attentions else None,
            grid_size=grid,
            num_prefix_tokens=self.config.num_prefix_tokens,
        )

    def _check_input(self, pixel_values: torch.Tensor) -> None:
        c = self.config
        if pixel_values.ndim != 4 or pixel_values.shape[1] != c.num_channels:
            raise ValueError(
                f"expected pixel_values of shape (B, {c.num_channels}, H, W), got {tuple(pixel_values.shape)}"
            )
        H, W = pixel_values.shape[-2:]
        if H % c.patch_size or W % c.patch_size or H == 0 or W == 0:
            raise ValueError(
                f"image {H}x{W} is not a positive multiple of the patch size {c.patch_size}; "
                f"resize or crop it, e.g. to {max(1, round(H / c.patch_size)) * c.patch_size}x"
                f"{max(1, round(W / c.patch_size)) * c.patch_size}"
            )
