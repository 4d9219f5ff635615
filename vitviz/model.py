"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

One file, top to bottom in the order data flows: patch embedding -> prefix tokens ([CLS],
distillation, registers) and position embeddings -> pre-norm encoder blocks -> final LayerNorm ->
pooling -> linear head. The optional parts cover the families people use (DeiT, DINO, DINOv2 with
registers, CLIP, SigLIP, MAE); each is one ``ViTConfig`` field.

Unlike most implementations, the attention weights are *returned* from every block when
asked for (``model(x, output_attentions=True)``) rather than captured with hooks, which
break silently when a library switches to fused attention kernels.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, fields, replace
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


Pooling = Literal["cls", "mean", "cls+mean", "map"]
POOLINGS = ("cls", "mean", "cls+mean", "map")  # "map": a learned query attends to the patches (SigLIP)
Activation = Literal["gelu", "gelu_tanh", "quick_gelu"]
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu")
Probabilities = Literal["softmax", "sigmoid"]
PROBABILITIES = ("softmax", "sigmoid")


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
    pooling: Pooling = "cls"  # what the head reads: [CLS], the mean patch token, both concatenated, or "map"
    class_token: bool = True  # prepend a learnable [CLS] token
    distillation_token: bool = False  # DeiT: a distillation token right after [CLS]
    distillation_head: bool = False  # DeiT: a second head on the distillation token; logits = mean of both heads
    num_register_tokens: int = 0  # extra learnable prefix tokens after [CLS] and distillation (Darcet et al. 2023)
    pos_embed_prefix: bool = True  # position embeddings for prefix tokens too (False: timm's no_embed_class)
    pos_embed_antialias: bool = False  # antialias when resampling position embeddings (timm: True; most HF: False)
    norm_pre: bool = False  # a LayerNorm on the tokens before the first block (CLIP)
    layer_scale: bool = False  # LayerScale: a learned per-channel gain on each residual branch (CaiT, DINOv2)
    activation: Activation = "gelu"  # MLP activation: exact GELU, its tanh approximation, or OpenAI's quick-GELU
    fc_norm: bool = False  # apply the final LayerNorm to the pooled vector instead of every token (timm's fc_norm)
    dropout: float = 0.0  # after position embeddings, attention output and MLP
    attention_dropout: float = 0.0  # on attention weights (the returned weights are pre-dropout)
    drop_path: float = 0.0  # stochastic depth, rising linearly to this rate in the last block
    layer_norm_eps: float = 1e-6  # torchvision uses 1e-6, Hugging Face 1e-12
    qkv_bias: bool = True  # bias in the query/key/value projection
    probabilities: Probabilities = "softmax"  # logits -> probabilities: softmax over classes, or a sigmoid each (SigLIP)

    def __post_init__(self) -> None:
        if isinstance(self.image_size, (list, tuple)):  # lists come back from JSON and checkpoints
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        height, width = self.image_hw
        problems = []
        if self.hidden_size % self.num_heads:
            problems.append(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if height % self.patch_size or width % self.patch_size:
            problems.append(f"image_size {height}x{width} is not a multiple of patch_size {self.patch_size}")
        if self.pooling not in POOLINGS:
            problems.append(f"pooling must be one of {', '.join(POOLINGS)}; got {self.pooling!r}")
        if self.pooling in ("cls", "cls+mean") and not self.class_token:
            problems.append(f"pooling={self.pooling!r} needs class_token=True")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {', '.join(ACTIVATIONS)}; got {self.activation!r}")
        if self.probabilities not in PROBABILITIES:
            problems.append(f"probabilities must be one of {', '.join(PROBABILITIES)}; got {self.probabilities!r}")
        if self.distillation_token and not self.class_token:
            problems.append("distillation_token=True needs class_token=True (it comes right after [CLS])")
        if self.distillation_head and not (self.distillation_token and self.pooling == "cls"):
            problems.append("distillation_head=True needs distillation_token=True and pooling='cls'")
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
        """Tokens before the patch tokens: [CLS], the distillation token, then the registers (each if any)."""
        return int(self.class_token) + int(self.distillation_token) + self.num_register_tokens

    @property
    def prefix_positions(self) -> int:
        """Prefix tokens that have a position embedding: all of them, or none without ``pos_embed_prefix``."""
        return self.num_prefix_tokens if self.pos_embed_prefix else 0

    @property
    def pooled_size(self) -> int:
        """Width of the vector the head reads: D, or 2D for pooling="cls+mean"."""
        return 2 * self.hidden_size if self.pooling == "cls+mean" else self.hidden_size

    @property
    def num_parameters(self) -> int:
        """The model's parameter count, from these numbers alone (nothing is built): loaders check it against the
        memory before allocating anything."""
        D, M, L = self.hidden_size, self.mlp_size, self.num_layers
        rows, cols = self.grid_size
        linear = lambda fan_in, fan_out, bias=True: fan_in * fan_out + (fan_out if bias else 0)  # noqa: E731
        mlp = linear(D, M) + linear(M, D)
        block = 2 * D + linear(D, 3 * D, self.qkv_bias) + linear(D, D) + 2 * D + mlp + (2 * D if self.layer_scale else 0)
        count = self.num_channels * self.patch_size**2 * D + D  # the patch convolution
        count += self.num_prefix_tokens * D + (self.prefix_positions + rows * cols) * D  # tokens and positions
        count += (2 * D if self.norm_pre else 0) + L * block + 2 * D  # the blocks and the final norm
        if self.pooling == "map":  # query, q, kv, proj, norm, MLP
            count += D + linear(D, D) + linear(D, 2 * D) + linear(D, D) + 2 * D + mlp
        if self.num_classes:
            count += linear(self.pooled_size, self.num_classes)
            count += linear(D, self.num_classes) if self.distillation_head else 0
        return count

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

    Whether it is faster depends on the CPU (about 2x faster on an AMD EPYC here, 1.7x slower on an Intel Xeon
    without AMX): ``vitviz.precision.measure_precision`` times both. Returned attentions stay fp32.
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
    readout: torch.Tensor  # (B, T) how much of each token's final state the head reads; rows sum to 1
    pool_attention: torch.Tensor | None = None  # (B, heads, N) the pooling head's weights over patches ("map")
    hidden_states: tuple[torch.Tensor, ...] | None = None  # per block, its output (B, T, D), on request


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
            # runs in at least fp32 (fp64 for a float64 model), so under bf16/fp16 the returned rows
            # still sum to 1 to fp32 precision; they are cast back to the values' dtype for the product.
            # One expression, so the pre-softmax scores are freed at once: keeping them alive
            # makes the allocator hand back and re-fault memory, slowing the whole block.
            weights = _softmax((q * self.scale) @ k.transpose(-2, -1))  # (B, heads, T, T)
            out = F.dropout(weights, dropout_p, self.training).to(v.dtype) @ v  # (B, heads, T, head_dim)
        else:
            # fast path: fused kernel, never materialises the T x T matrix
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(B, T, D)  # heads back side by side
        return self.proj(out), weights


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis in fp32 or wider: fp32 for bf16/fp16 scores, fp64 for a float64 model."""
    return scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))


def activation(x: torch.Tensor, kind: Activation) -> torch.Tensor:
    if kind == "quick_gelu":  # OpenAI CLIP: x * sigmoid(1.702 x)
        return x * torch.sigmoid(1.702 * x)
    return F.gelu(x, approximate="tanh" if kind == "gelu_tanh" else "none")


class MLP(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.activation = config.activation
        self.fc1 = nn.Linear(config.hidden_size, config.mlp_size)
        self.fc2 = nn.Linear(config.mlp_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.dropout(activation(self.fc1(x), self.activation))))


class LayerScale(nn.Module):
    """A learned per-channel gain on a residual branch (Touvron et al. 2021)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(config.hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


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
        self.ls1 = LayerScale(config) if config.layer_scale else nn.Identity()
        self.ls2 = LayerScale(config) if config.layer_scale else nn.Identity()

    def forward(
        self, x: torch.Tensor, need_weights: bool = False, normed: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``normed``, if given, stands in for norm1(x): Grad-CAM differentiates with respect to it."""
        attended, weights = self.attn(self.norm1(x) if normed is None else normed, need_weights)
        x = x + self.drop_path(self.ls1(self.dropout(attended)))  # (B, T, D)
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # (B, T, D)
        return x, weights


class AttentionPool(nn.Module):
    """Attention pooling, SigLIP's "map" head: one learned query attends to the patch tokens, then an MLP
    with a residual refines the result. Returns the pooled vector and the query's weights over patches."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        D = config.hidden_size
        self.num_heads, self.head_dim = config.num_heads, D // config.num_heads
        self.query = nn.Parameter(torch.zeros(1, 1, D))  # timm's "latent", Hugging Face's "probe"
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.proj = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, D = x.shape
        q = self.q(self.query).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (1, heads, 1, hd)
        k, v = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        # one query row: the explicit softmax costs nothing, and its weights are what the page shows
        weights = _softmax((q * self.head_dim**-0.5) @ k.transpose(-2, -1))  # (B, heads, 1, N)
        pooled = self.proj((weights.to(v.dtype) @ v).transpose(1, 2).reshape(B, D))  # (B, D)
        pooled = pooled + self.mlp(self.norm(pooled))
        return pooled, weights[:, :, 0]


class ViT(nn.Module):
    """Vision Transformer returning logits and, on request, every block's attention weights."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        D = config.hidden_size
        self.patch_embed = PatchEmbedding(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distillation_token else None
        self.register_tokens = (
            nn.Parameter(torch.zeros(1, config.num_register_tokens, D)) if config.num_register_tokens else None
        )
        rows, cols = config.grid_size
        self.pos_embed = nn.Parameter(torch.zeros(1, config.prefix_positions + rows * cols, D))
        self.pos_dropout = nn.Dropout(config.dropout)
        self.norm_pre = nn.LayerNorm(D, eps=config.layer_norm_eps) if config.norm_pre else nn.Identity()
        rates = [config.drop_path * i / max(1, config.num_layers - 1) for i in range(config.num_layers)]
        self.blocks = nn.ModuleList(Block(config, rate) for rate in rates)
        self.norm = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.attn_pool = AttentionPool(config) if config.pooling == "map" else None
        self.head = nn.Linear(config.pooled_size, config.num_classes) if config.num_classes > 0 else None
        self.head_dist = nn.Linear(D, config.num_classes) if config.distillation_head and self.head else None
        # Which attention kernel runs when no weights are asked for: "sdpa" (the fused
        # scaled_dot_product_attention) or "eager" (the explicit softmax path). Same maths; on a
        # CPU with short sequences "eager" is faster to train (bench/bench_train_step.py).
        self.attn_implementation = "sdpa"
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal for tokens and linear layers, as in the ViT paper's reference code;
        # a zero head so training starts from uniform predictions
        for param in (self.cls_token, self.dist_token, self.register_tokens, self.pos_embed):
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
        if self.attn_pool is not None:
            nn.init.trunc_normal_(self.attn_pool.query, std=0.02)
        for head in (self.head, self.head_dist):
            if head is not None:
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)

    def position_embeddings(self, rows: int, cols: int) -> torch.Tensor:
        """Position embeddings for a rows x cols patch grid, (1, prefix + rows * cols, D).

        At another grid than the training one, the patch part is resized with bicubic interpolation
        (align_corners=False, antialiased if ``pos_embed_antialias``, as in timm and Hugging Face); prefix
        tokens keep theirs. Without ``pos_embed_prefix`` there are none: (1, rows * cols, D).
        """
        train_rows, train_cols = self.config.grid_size
        if (rows, cols) == (train_rows, train_cols):
            return self.pos_embed
        prefix = self.config.prefix_positions
        prefix_pos, patch_pos = self.pos_embed[:, :prefix], self.pos_embed[:, prefix:]
        D = patch_pos.shape[-1]
        patch_pos = patch_pos.reshape(1, train_rows, train_cols, D).permute(0, 3, 1, 2)  # (1, D, r, c)
        patch_pos = F.interpolate(patch_pos, size=(rows, cols), mode="bicubic", align_corners=False,
                                  antialias=self.config.pos_embed_antialias)  # fmt: skip
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, rows * cols, D)  # (1, N, D)
        return torch.cat([prefix_pos, patch_pos], dim=1)

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool = False,
        attention_sink: Callable[[int, torch.Tensor], None] | None = None,
        output_hidden_states: bool = False,
    ) -> ViTOutput:
        """Classify a batch of images, shape (B, C, H, W) with H and W multiples of the patch size.

        Any such size works, non-square too: position embeddings are interpolated to the grid.
        ``attention_sink(block_index, weights)``, if given, receives each block's attention
        weights (B, heads, T, T) as soon as they exist; unless ``output_attentions`` is also set
        they are not kept, so statistics can be streamed without holding every T x T matrix.
        ``output_hidden_states`` keeps every block's output tokens (before the final LayerNorm).
        """
        x, grid = self.embed(pixel_values)
        attentions, hidden_states = [], []
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
            if output_hidden_states:
                hidden_states.append(x)
        return replace(
            self.forward_head(x, grid),
            attentions=tuple(attentions) if output_attentions else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
        )

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits (..., classes) -> probabilities in at least fp32: a softmax over the classes, or for a model trained
        with a sigmoid loss (SigLIP) an independent sigmoid per class, whose values need not sum to 1."""
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return logits.sigmoid() if self.config.probabilities == "sigmoid" else logits.softmax(dim=-1)

    def embed(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Patches, prefix tokens and position embeddings: the first block's input (B, T, D), and the grid."""
        self._check_input(pixel_values)
        B, _, H, W = pixel_values.shape
        grid = (H // self.config.patch_size, W // self.config.patch_size)
        x = self.patch_embed(pixel_values)  # (B, N, D)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.dist_token, self.register_tokens) if t is not None]
        if self.config.pos_embed_prefix:  # concatenate, then add positions to every token
            x = torch.cat([*prefix, x], dim=1) + self.position_embeddings(*grid)  # (B, T, D), T = prefix + N
        else:  # positions for the patches only, then concatenate
            x = torch.cat([*prefix, x + self.position_embeddings(*grid)], dim=1)
        return self.norm_pre(self.pos_dropout(x)), grid

    def forward_head(self, x: torch.Tensor, grid_size: tuple[int, int]) -> ViTOutput:
        """Final LayerNorm, pooling and head on the last block's output tokens (B, T, D).

        ``forward`` ends here. Given an earlier block's output instead, it reads that block as if it were
        the last: the logit lens that LeGrad and ``vitviz.explain.logit_lens`` use.
        """
        if not self.config.fc_norm:
            x = self.norm(x)  # (B, T, D)
        pooled, readout, pool_attention = self._pool(x)
        if self.config.fc_norm:
            pooled = self.norm(pooled)
        if self.head_dist is not None:  # DeiT at inference: the mean of the [CLS] and distillation heads
            logits = (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2
        else:
            logits = self.head(pooled) if self.head is not None else None
        return ViTOutput(
            logits=logits,
            pooled=pooled,
            last_hidden_state=x,
            attentions=None,
            grid_size=grid_size,
            num_prefix_tokens=self.config.num_prefix_tokens,
            readout=readout,
            pool_attention=pool_attention,
        )

    def _pool(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(B, T, D) -> the pooled vector, the weight the head gives each token (B, T), and for "map"
        pooling the pooling head's attention (B, heads, N)."""
        B, T, _ = x.shape
        p = self.config.num_prefix_tokens
        readout = x.new_zeros(B, T, dtype=torch.promote_types(x.dtype, torch.float32))
        patches = x[:, p:]
        pool_attention = None
        if self.config.pooling == "map":
            pooled, pool_attention = self.attn_pool(patches)
            readout[:, p:] = pool_attention.mean(dim=1)
        elif self.config.pooling == "mean":
            pooled = patches.mean(dim=1)
            readout[:, p:] = 1 / (T - p)
        elif self.config.pooling == "cls+mean":  # DINOv2's classifier reads both, side by side
            pooled = torch.cat([x[:, 0], patches.mean(dim=1)], dim=-1)
            readout[:, 0], readout[:, p:] = 0.5, 0.5 / (T - p)
        elif self.config.distillation_head:  # DeiT: both tokens, averaged (timm's pre-logits)
            pooled = (x[:, 0] + x[:, 1]) / 2
            readout[:, :2] = 0.5
        else:
            pooled = x[:, 0]
            readout[:, 0] = 1.0
        return pooled, readout, pool_attention

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
