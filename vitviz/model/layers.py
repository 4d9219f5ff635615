"""The layers of vitviz's ViT, in the order data flows through them: patch embedding, attention (which returns its
weights; ``AttentionControls`` carries its rotary embedding and interventions), MLP, LayerScale, stochastic depth,
the pre-norm block, and SigLIP's attention-pooling head."""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from vitviz.model.config import Activation, ViTConfig
from vitviz.model.relevance_rules import LayerNorm, RMSNorm, attention_inputs, gated, nonlinearity
from vitviz.model.rotary import Rope, rotate

Ablation = Literal["zero", "mean"]  # what a removed head's output becomes: zeros, or its mean over the batch


def norm_layer(config: ViTConfig, width: int, eps: float | None = None) -> nn.Module:
    """The model's kind of norm over ``width`` features: LayerNorm, or RMSNorm (AIMv2), with its epsilon (or eps);
    torch's own, which hold their standard deviation constant under relevance rules (relevance_rules.py)."""
    eps = eps or config.layer_norm_eps
    if config.norm == "rmsnorm":
        return RMSNorm(width, eps=eps)
    return LayerNorm(width, eps=eps)


class PatchEmbedding(nn.Module):
    """Cut the image into non-overlapping patches and project each to D dimensions (then norm them, for AIMv2).

    A clip (B, frames, C, H, W) is cut into tubelets of ``tubelet_size`` frames by a Conv3d when that is above 1
    (VideoMAE, ViViT), else each frame into patches; the tokens are listed time-major: frame group, row, column; or
    with ``patch_major`` patch-major: row, column, frame (TimeSformer's token 1 + n * frames + t)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.patch_size = config.patch_size
        # kernel = stride = patch size (and tubelet): one linear projection per patch
        if config.tubelet_size > 1:
            size = (config.tubelet_size, config.patch_size, config.patch_size)
            self.proj = nn.Conv3d(config.num_channels, config.hidden_size, size, size)
        else:
            self.proj = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size, config.patch_size)
        self.norm = norm_layer(config, config.hidden_size) if config.patch_norm else nn.Identity()
        self.patch_major = config.patch_major

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.ndim == 5 and isinstance(self.proj, nn.Conv3d):  # (B, frames, C, H, W)
            x = self.proj(pixel_values.transpose(1, 2))  # (B, D, frames / tubelet, rows, cols)
        elif pixel_values.ndim == 5:  # one frame at a time, then the frames side by side
            B = pixel_values.shape[0]
            x = self.proj(pixel_values.flatten(0, 1))  # (B * frames, D, rows, cols)
            x = x.unflatten(0, (B, -1)).transpose(1, 2)  # (B, D, frames, rows, cols)
        else:
            x = self.proj(pixel_values)  # (B, D, rows, cols)
        if x.ndim == 5 and self.patch_major:
            x = x.permute(0, 1, 3, 4, 2)  # (B, D, rows, cols, frames): each patch's frames side by side
        return self.norm(x.flatten(2).transpose(1, 2))  # (B, N, D), patches in (frame,) row-major order


class QKV(NamedTuple):
    """One block's queries, keys and values as its attention uses them (after the query/key norms and the rotary
    embedding), each (B, heads, T, head_dim): softmax(q @ k.T * head_dim**-0.5) is the block's attention."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


class AttentionControls(NamedTuple):
    """What one pass asks of a block's attention beyond its input: the rotary embedding of this input's grid and the
    interventions. ``ViT.block_arguments`` makes one per block; the defaults leave the attention as trained."""

    rope: Rope | None = None  # the patch tokens' rotary embedding (``ViT.rotary_embeddings``), for a rotary model
    head_mask: torch.Tensor | None = None  # (B or 1, heads): scales each head's weights before they reach the values
    key_mask: torch.Tensor | None = None  # (B, T) booleans: a key marked False gets no attention
    ablation: Ablation = "zero"  # what a head masked to 0 outputs: zeros, or its mean over the batch


class AttentionOutput(NamedTuple):
    out: torch.Tensor  # (B, T, D) what the attention adds to the residual stream (before LayerScale)
    weights: torch.Tensor | None  # (B, heads, T, T) post-softmax, when asked for
    qkv: QKV | None  # when asked for


class Attention(nn.Module):
    """Multi-head self-attention that can return its post-softmax weights and its queries, keys and values."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.qkv_bias)
        self.attention_dropout = config.attention_dropout
        # EVA-02's CLIP towers (scale_attn_inner): a LayerNorm on the heads' joined output, before the projection
        self.norm = norm_layer(config, config.hidden_size) if config.attention_norm else nn.Identity()
        # per-head norms on queries and keys (qk_norm), before any rotation
        self.q_norm = norm_layer(config, self.head_dim) if config.qk_norm else nn.Identity()
        self.k_norm = norm_layer(config, self.head_dim) if config.qk_norm else nn.Identity()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.num_prefix_tokens = config.num_prefix_tokens  # not rotated by rotary embeddings

    def queries_keys_values(self, x: torch.Tensor, rope: Rope | None = None) -> QKV:
        """The queries, keys and values of a normed input x (B, T, D), each (B, heads, T, head_dim), after the query
        and key norms and the rotary embedding: what ``forward`` attends with, without attending (a bounded-memory
        map computes the softmax a few query rows at a time from these)."""
        B, T, _ = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head_dim)
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:  # the patch tokens' queries and keys turned by their positions
            q, k = rotate(q, rope, self.num_prefix_tokens), rotate(k, rope, self.num_prefix_tokens)
        return QKV(q, k, v)

    def forward(
        self,
        x: torch.Tensor,
        controls: AttentionControls = AttentionControls(),
        need_weights: bool = False,
        need_qkv: bool = False,
    ) -> AttentionOutput:
        """``controls.head_mask`` (B or 1, heads) scales each head's weights before they reach the values: 0 removes
        the head's output (``ablation`` "zero"), or replaces it with its mean over the batch ("mean"); the returned
        weights stay the softmax. ``controls.key_mask`` (B, T) booleans: a key marked False gets no attention, each
        row renormalised over the others (the returned weights are those rows)."""
        rope, head_mask, key_mask, ablation = controls
        B, T, D = x.shape
        q, k, v = attention_inputs(*self.queries_keys_values(x, rope))  # as they are, unless relevance rules are on
        dropout_p = self.attention_dropout if self.training else 0.0
        keys = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, T): True takes part
        if need_weights:
            # explicit path: the weights exist as a tensor, so they can be returned. The softmax
            # runs in at least fp32 (fp64 for a float64 model), so under bf16/fp16 the returned rows
            # still sum to 1 to fp32 precision; they are cast back to the values' dtype for the product.
            # The pre-softmax scores are freed as soon as the softmax exists: keeping them alive
            # makes the allocator hand back and re-fault memory, slowing the whole block.
            scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, heads, T, T)
            if keys is not None:
                scores.masked_fill_(~keys, float("-inf"))  # in place: no second T x T tensor
            weights = softmax_fp32(scores)
            del scores
            out = F.dropout(weights, dropout_p, self.training).to(v.dtype) @ v  # (B, heads, T, head_dim)
        else:
            # fast path: fused kernel, never materialises the T x T matrix
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)
        if head_mask is not None:  # scaling a head's weights scales its output: the same on both paths
            mask = head_mask[:, :, None, None].to(out.dtype)  # (B or 1, heads, 1, 1)
            removed = 0.0 if ablation == "zero" else out.mean(dim=0, keepdim=True)  # "mean": over the batch
            out = mask * out + (1 - mask) * removed
        out = out.transpose(1, 2).reshape(B, T, D)  # heads back side by side
        return AttentionOutput(self.proj(self.norm(out)), weights, QKV(q, k, v) if need_qkv else None)


def softmax_fp32(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis in fp32 or wider: fp32 for bf16/fp16 scores, fp64 for a float64 model."""
    return scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))


def one_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One learned query's attention (a pooling head's): q (1 or B, heads, 1, head_dim) over keys and values k, v (B,
    heads, T, head_dim) -> the heads' outputs side by side (B, heads * head_dim) and the weights (B, heads, T),
    post-softmax, fp32 or wider: the very tensor the values are read with, so gradients with respect to it exist
    (relevance). ``key_mask`` (B, T) booleans: a key marked False gets no weight, the rest renormalised. One query
    row: the explicit softmax costs nothing."""
    q, k, v = attention_inputs(q, k, v)  # as they are, unless relevance rules are on
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, heads, 1, T)
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    weights = softmax_fp32(scores)[:, :, 0]  # (B, heads, T)
    out = weights[:, :, None].to(v.dtype) @ v  # (B, heads, 1, head_dim)
    return out.flatten(1), weights


def activation(x: torch.Tensor, kind: Activation) -> torch.Tensor:
    """The element-wise non-linearity ``kind`` (by the identity rule under relevance rules)."""
    if kind == "quick_gelu":  # OpenAI CLIP: x * sigmoid(1.702 x)
        return nonlinearity(lambda t: t * torch.sigmoid(1.702 * t), x)
    approximate = "tanh" if kind == "gelu_tanh" else "none"
    return nonlinearity(lambda t: F.gelu(t, approximate=approximate), x)


class MLP(nn.Module):
    """fc2(act(fc1(x))); gated (SwiGLU, ``gated_mlp``): fc2(silu(gate(x)) * fc1(x)), optionally with a LayerNorm on
    the hidden units before fc2 (``mlp_norm``, EVA-02's scale_mlp)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.activation = config.activation
        self.fc1 = nn.Linear(config.hidden_size, config.mlp_size)
        self.gate = nn.Linear(config.hidden_size, config.mlp_size) if config.gated_mlp else None
        self.norm = norm_layer(config, config.mlp_size) if config.mlp_norm else nn.Identity()
        self.fc2 = nn.Linear(config.mlp_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc1(x)  # (B, T, mlp_size)
        hidden = gated(self.gate(x), hidden) if self.gate is not None else activation(hidden, self.activation)
        return self.dropout(self.fc2(self.norm(self.dropout(hidden))))


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


class BlockOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) the block's output tokens
    weights: torch.Tensor | None  # (B, heads, T, T) its attention, when asked for
    qkv: QKV | None  # its queries, keys and values, when asked for


class Block(nn.Module):
    """Pre-norm encoder block: x + MSA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0):
        super().__init__()
        self.norm1 = norm_layer(config, config.hidden_size)
        self.attn = Attention(config)
        self.norm2 = norm_layer(config, config.hidden_size)
        self.mlp = MLP(config)
        self.dropout = nn.Dropout(config.dropout)
        self.drop_path = DropPath(drop_path)
        self.ls1 = LayerScale(config) if config.layer_scale else nn.Identity()
        self.ls2 = LayerScale(config) if config.layer_scale else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        controls: AttentionControls = AttentionControls(),
        need_weights: bool = False,
        need_qkv: bool = False,
        normed: torch.Tensor | None = None,
    ) -> BlockOutput:
        """``controls``: this block's rotary embedding and interventions, from ``ViT.block_arguments``. ``normed``, if
        given, stands in for norm1(x): Grad-CAM differentiates with respect to it."""
        attended = self.attn(self.norm1(x) if normed is None else normed, controls, need_weights, need_qkv)
        x = x + self.drop_path(self.ls1(self.dropout(attended.out)))  # (B, T, D)
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))  # (B, T, D)
        return BlockOutput(x, attended.weights, attended.qkv)


class AttentionPool(nn.Module):
    """Attention pooling, SigLIP's "map" head: one learned query attends to the patch tokens, then an MLP
    with a residual refines the result. Returns the pooled vector and the query's weights over patches."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        D = config.hidden_size
        self.num_heads = config.pool_heads or config.num_heads
        self.head_dim = D // self.num_heads
        self.query = nn.Parameter(torch.zeros(1, 1, D))  # timm's "latent", Hugging Face's "probe"
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.proj = nn.Linear(D, D)
        self.norm = norm_layer(config, D)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``key_mask`` (B, N) booleans: the tokens marked False (knocked out) get no weight."""
        B, N, D = x.shape
        q = self.q(self.query).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (1, heads, 1, hd)
        k, v = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attended, weights = one_query_attention(q, k, v, key_mask)  # (B, D), (B, heads, N): what the page shows
        pooled = self.proj(attended)  # (B, D)
        pooled = pooled + self.mlp(self.norm(pooled))
        return pooled, weights
