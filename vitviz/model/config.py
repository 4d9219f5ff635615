"""``ViTConfig``: every architectural choice of vitviz's ViT, one field each, with a line on what it does."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Integral, Real
from typing import Any, Literal

from vitviz.messages import clip_text, echo
from vitviz.model.rotary import ROTARIES, Rotary

Pooling = Literal["cls", "mean", "cls+mean", "map", "attentive"]
# "map": a learned query attends to the patches (SigLIP); "attentive": V-JEPA 2's pooler (model/attentive_pooler.py)
POOLINGS = ("cls", "mean", "cls+mean", "map", "attentive")
Activation = Literal["gelu", "gelu_tanh", "quick_gelu"]
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu")
Probabilities = Literal["softmax", "sigmoid"]
PROBABILITIES = ("softmax", "sigmoid")
Norm = Literal["layernorm", "rmsnorm"]
NORMS = ("layernorm", "rmsnorm")
SpaceTime = Literal["joint", "divided"]
SPACE_TIME = ("joint", "divided")  # "divided": TimeSformer's blocks, attention over time then over space


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
    probabilities: Probabilities = (
        "softmax"  # logits -> probabilities: softmax over classes, or a sigmoid each (SigLIP)
    )
    absolute_positions: bool = True  # a learned position table added to the tokens (DINOv3 has none: rotary only)
    rotary: Rotary = "none"  # rotary embeddings on the patch tokens' queries and keys: dinov3, eva, mixed, vjepa2 (3-D)
    rotary_temperature: float = 100.0  # the base of the rotary periods (DINOv3: 100; EVA: 10000)
    rotary_reference_grid: tuple[int, int] | None = None  # EVA: positions rescaled onto this (pretraining) grid
    rotary_column_first: bool = False  # EVA, mixed: the column's frequencies before the row's (timm's "xy")
    rotary_offset: float = 0.0  # EVA: added to the integer patch positions before rescaling (Perception Encoder: 1)
    pool_heads: int = 0  # heads of the attention-pooling head ("map"); 0: as many as the blocks have
    pool_prefix: bool = False  # the attention-pooling head reads the prefix tokens too (Perception Encoder)
    pool_layers: int = 0  # "attentive" pooling: self-attention blocks over every token before its query (V-JEPA 2: 3)
    final_norm: bool = True  # a norm after the last block (or on the pooled vector, fc_norm); PE-Spatial has none
    gated_mlp: bool = False  # SwiGLU: fc2(silu(gate(x)) * fc1(x)) instead of fc2(act(fc1(x))) (EVA-02, DINOv3 S+/H+)
    mlp_norm: bool = False  # a norm on the MLP's hidden units before fc2 (EVA-02's scale_mlp)
    attention_norm: bool = False  # a norm on the heads' joined output before the projection (scale_attn_inner)
    qk_norm: bool = False  # per-head norms on queries and keys before attention (and before any rotation)
    norm: Norm = "layernorm"  # every norm's kind: LayerNorm, or RMSNorm (AIMv2); layer_norm_eps is its epsilon
    patch_norm: bool = False  # a norm on the patch embeddings, before anything is added (AIMv2)
    num_frames: int = 1  # frames of an input clip, (B, frames, C, H, W); 1: an image, (B, C, H, W)
    tubelet_size: int = 1  # frames per token: > 1 embeds each (tubelet, patch, patch) block with a Conv3d (VideoMAE)
    sinusoidal_positions: bool = False  # a fixed sine-cosine table over the patch tokens, not a learned one (VideoMAE)
    final_norm_eps: float = 0.0  # the final norm's epsilon where it differs from layer_norm_eps (VideoMAE's fc_norm)
    attention: SpaceTime = "joint"  # a clip's blocks: every token attends to every token, or "divided" (TimeSformer)
    time_embeddings: bool = False  # a learned table per frame added to the patches, the position table per patch
    patch_major: bool = False  # a clip's tokens listed patch by patch, each patch's frames together (TimeSformer)

    def __post_init__(self) -> None:
        problems = _field_problems(self)  # types and ranges first: the checks below do arithmetic on them
        if problems:
            raise ValueError("invalid ViTConfig: " + "; ".join(problems))
        if isinstance(self.image_size, (list, tuple)):  # lists come back from JSON and checkpoints
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        if isinstance(self.rotary_reference_grid, (list, tuple)):
            self.rotary_reference_grid = (int(self.rotary_reference_grid[0]), int(self.rotary_reference_grid[1]))
        height, width = self.image_hw
        if self.hidden_size % self.num_heads:
            problems.append(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if height % self.patch_size or width % self.patch_size:
            problems.append(f"image_size {height}x{width} is not a multiple of patch_size {self.patch_size}")
        for name, choices in [
            ("pooling", POOLINGS),
            ("activation", ACTIVATIONS),
            ("rotary", ROTARIES),
            ("norm", NORMS),
            ("probabilities", PROBABILITIES),
            ("attention", SPACE_TIME),
        ]:
            if getattr(self, name) not in choices:
                problems.append(f"{name} must be one of {', '.join(choices)}; got {echo(getattr(self, name))}")
        if self.pooling in ("cls", "cls+mean") and not self.class_token:
            problems.append(f"pooling={self.pooling!r} needs class_token=True")
        if self.rotary in ("dinov3", "eva", "mixed") and (self.hidden_size // self.num_heads) % 4:  # V-JEPA 2's: any
            problems.append(
                f"rotary embeddings need a head width divisible by 4; got {self.hidden_size // self.num_heads}"
            )
        if self.pool_heads and self.hidden_size % self.pool_heads:
            problems.append(f"pool_heads {self.pool_heads} must be 0 or divide hidden_size {self.hidden_size}")
        if self.distillation_token and not self.class_token:
            problems.append("distillation_token=True needs class_token=True (it comes right after [CLS])")
        if self.distillation_head and not (self.distillation_token and self.pooling == "cls"):
            problems.append("distillation_head=True needs distillation_token=True and pooling='cls'")
        if self.final_norm_eps < 0:
            problems.append(f"final_norm_eps must be >= 0 (0: layer_norm_eps); got {self.final_norm_eps}")
        if self.num_frames % self.tubelet_size:
            problems.append(f"num_frames {self.num_frames} is not a multiple of tubelet_size {self.tubelet_size}")
        if self.is_video and self.rotary not in ("none", "vjepa2"):
            problems.append(f"rotary={self.rotary!r} is for images: a video (num_frames or tubelet_size > 1) has none")
        if self.pool_layers and self.pooling != "attentive":
            problems.append(f"pool_layers={self.pool_layers} needs pooling='attentive' (V-JEPA 2's pooler)")
        problems += _space_time_problems(self)
        if self.sinusoidal_positions and (self.num_prefix_tokens or not self.absolute_positions):
            problems.append("sinusoidal_positions needs absolute_positions=True and no prefix tokens (as VideoMAE)")
        if problems:
            raise ValueError("invalid ViTConfig: " + "; ".join(problems))

    @property
    def is_video(self) -> bool:
        """Whether the model reads clips (B, frames, C, H, W) rather than images (B, C, H, W)."""
        return self.num_frames > 1 or self.tubelet_size > 1

    @property
    def token_frames(self) -> int:
        """Tokens along time at the training length: num_frames // tubelet_size (1 for an image)."""
        return self.num_frames // self.tubelet_size

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

        def linear(fan_in: int, fan_out: int, bias: bool = True) -> int:
            return fan_in * fan_out + (fan_out if bias else 0)

        def norm(width: int) -> int:
            return width * (2 if self.norm == "layernorm" else 1)

        mlp = linear(D, M) + linear(M, D) + (linear(D, M) if self.gated_mlp else 0) + (norm(M) if self.mlp_norm else 0)
        attention = linear(D, 3 * D, self.qkv_bias) + linear(D, D) + (norm(D) if self.attention_norm else 0)
        attention += 2 * norm(D // self.num_heads) if self.qk_norm else 0
        block = norm(D) + attention + norm(D) + mlp + (2 * D if self.layer_scale else 0)
        block += norm(D) + attention + linear(D, D) if self.attention == "divided" else 0  # the temporal half
        count = (
            self.num_channels * self.tubelet_size * self.patch_size**2 * D + D + (norm(D) if self.patch_norm else 0)
        )  # patches
        count += self.num_prefix_tokens * D  # the prefix tokens
        learned = self.absolute_positions and not self.sinusoidal_positions
        per_frame = 1 if self.time_embeddings else self.token_frames  # factorised: a table per patch, one per frame
        count += (self.prefix_positions + per_frame * rows * cols) * D if learned else 0  # the position table
        count += self.token_frames * D if self.time_embeddings else 0
        count += L * D if self.rotary == "mixed" else 0  # learned rotary frequencies: 2 axes x heads x head_dim / 2
        count += (norm(D) if self.norm_pre else 0) + L * block + (norm(D) if self.final_norm else 0)  # blocks, norm
        if self.pooling == "attentive":  # query; pool_layers blocks (biased q/k/v); cross-attention: norms, q/k/v, MLP
            pool_mlp = linear(D, 4 * D) + linear(4 * D, D)  # V-JEPA 2's pooler MLP is 4 D wide (attentive_pooler.py)
            count += D + self.pool_layers * (2 * norm(D) + linear(D, 3 * D) + linear(D, D) + pool_mlp)
            count += 2 * norm(D) + 3 * linear(D, D) + pool_mlp
        if self.pooling == "map":  # query, q, kv, proj, norm, MLP
            count += D + linear(D, D) + linear(D, 2 * D) + linear(D, D) + norm(D) + mlp
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
            # the known names joined and cut too: a message of one readable line however many fields either side has
            known_names = clip_text(", ".join(sorted(known)), 500)
            raise ValueError(f"unknown ViTConfig fields {echo(unknown)}; known fields are {known_names}")
        return cls(**values)


_POSITIVE = (
    "patch_size",
    "num_channels",
    "num_frames",
    "tubelet_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "mlp_size",
    "layer_norm_eps",
    "rotary_temperature",
)
_RATES = ("dropout", "attention_dropout", "drop_path")  # probabilities: from 0 to 1


def _field_problems(config: ViTConfig) -> list[str]:
    """Each field of the wrong type (that of its default: true or false, an integer, a finite number, a name) or out
    of range, so a hostile config (a patch size of 0, an infinite or empty image size, a string epsilon) is refused
    with a message, never a ZeroDivisionError or a model that fails at its first image."""
    problems = []
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name in ("image_size", "rotary_reference_grid"):
            pair = isinstance(value, (list, tuple)) and len(value) == 2
            sides = value if pair else [value] if field.name == "image_size" and _is_integer(value) else None
            ok = (value is None and field.name == "rotary_reference_grid") or (
                sides is not None and all(_is_integer(side) and side > 0 for side in sides)
            )
            kind = "a side or (height, width), in pixels (positive integers)"
        else:
            ok, kind = {
                bool: (isinstance(value, bool), "true or false"),
                int: (_is_integer(value), "an integer"),
                float: (_is_number(value), "a finite number"),
                str: (isinstance(value, str), "a name"),
            }[type(field.default)]
            if ok and field.name in _POSITIVE and not value > 0:
                ok, kind = False, "positive"
            elif ok and field.name in _RATES and not 0 <= value <= 1:
                ok, kind = False, "from 0 to 1"
            elif ok and isinstance(field.default, int) and not isinstance(field.default, bool) and value < 0:
                ok, kind = False, ">= 0"
        if not ok:
            problems.append(f"{field.name} must be {kind}; got {echo(value)}")
    return problems


def _space_time_problems(config: ViTConfig) -> list[str]:
    """TimeSformer's choices, each with what it needs: divided blocks read patch-major clips of one-frame patches
    with [CLS] alone before them (its copies per frame are averaged back), as transformers' model lays them out."""
    problems = []
    if (config.attention == "divided" or config.time_embeddings or config.patch_major) and not config.is_video:
        problems.append("attention='divided', time_embeddings and patch_major are for clips (num_frames > 1)")
    if config.attention == "divided" and not (
        config.patch_major and config.tubelet_size == 1 and config.class_token and config.num_prefix_tokens == 1
    ):
        problems.append(
            "attention='divided' needs patch_major=True, tubelet_size=1 and [CLS] as the only prefix token "
            "(TimeSformer's layout)"
        )
    if config.time_embeddings and (config.sinusoidal_positions or not config.absolute_positions):
        problems.append("time_embeddings needs a learned position table (absolute_positions, not sinusoidal)")
    return problems


def _is_integer(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
