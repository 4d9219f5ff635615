"""V-JEPA 2's attentive pooler (Assran et al. 2025; transformers' ``VJEPA2AttentivePooler``): what its video classifier
reads, with the weights transformers computes and never returns.

``pool_layers`` pre-norm self-attention blocks run over every token of the encoder's normed output (vitviz's own
``Block``, with biased q/k/v and no rotary embedding); then one learned query attends to the normed tokens
(``PoolerCrossAttention``: q, k and v projections, no output projection, the query itself not normed) and its result,
with a residual onto the query and a pre-norm MLP, is the pooled vector the classifier reads.

What the ViT returns from it (``ViTOutput``, pooling "attentive"):

    pool_attention     (B, heads, T) the query's weights over the tokens of the pooler's last block
    pooler_attentions  per pooler block (B, heads, T, T), with ``output_attentions``
    readout            (B, T) the query's head-mean weights carried back through the pooler's blocks by attention
                       rollout's rule, ``r <- 0.5 r + 0.5 r @ mean_h(A)``: how much of each of the encoder's output
                       tokens the pooled vector reads, so rollout and relevance over the encoder continue from it

A key mask (B, T) (``ViT``'s ``key_mask`` and token knock-outs) takes the tokens marked False out of the pooler too:
out of every pooler block's view and out of the query's, each row renormalised over the rest, so those tokens reach
neither the pooled vector nor the readout.

The readout is computed a few query rows at a time from each block's queries and keys when no weights are asked for,
so a clip of 8,192 tokens never holds a (heads, T, T) matrix for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import torch
from torch import nn

from vitviz.model.config import ViTConfig
from vitviz.model.layers import MLP, AttentionControls, Block, norm_layer, one_query_attention, softmax_fp32

CHUNK_ELEMENTS = 2**24  # score elements (B x heads x query rows x T) computed at once when no weights are kept: 64 MB


class PoolerOutput(NamedTuple):
    pooled: torch.Tensor  # (B, D) what the classifier reads
    cross_attention: torch.Tensor  # (B, heads, T) the query's weights over the last pooler block's tokens
    readout: torch.Tensor  # (B, T) the query's head-mean weights carried back to the encoder's tokens, rows sum to 1
    attentions: tuple[torch.Tensor, ...] | None  # per pooler block (B, heads, T, T), when asked for


def pooler_config(config: ViTConfig) -> ViTConfig:
    """The config of the pooler's blocks and cross-attention: the encoder's width, activation and norms with the
    pooler's heads (``pool_heads``, 0: the encoder's), biased q/k/v, a plain MLP 4 D wide whatever the encoder's
    (transformers builds the pooler's ``VJEPA2MLP`` with its default ratio of 4), and none of the encoder's extras
    (rotary, LayerScale, q/k norms)."""
    return replace(
        config,
        num_heads=config.pool_heads or config.num_heads,
        mlp_size=4 * config.hidden_size,
        qkv_bias=True,
        rotary="none",
        layer_scale=False,
        qk_norm=False,
        attention_norm=False,
        gated_mlp=False,
        mlp_norm=False,
    )


class PoolerCrossAttention(nn.Module):
    """One learned query's cross-attention then an MLP (transformers' ``VJEPA2PoolerCrossAttentionLayer``):
    ``h = query + attend(q(query), k(norm1(x)), v(norm1(x)))``, then ``h + mlp(norm2(h))``."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        D = config.hidden_size
        self.num_heads = config.num_heads
        self.head_dim = D // config.num_heads
        self.scale = self.head_dim**-0.5
        self.norm1 = norm_layer(config, D)
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, D)
        self.v = nn.Linear(D, D)
        self.norm2 = norm_layer(config, D)
        self.mlp = MLP(config)

    def queries_keys(self, query: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The query (1, heads, 1, head_dim) and the keys (B, heads, T, head_dim) of tokens x (B, T, D), without
        attending: softmax(q @ k.T * head_dim**-0.5) is the cross-attention's weights."""
        B, T, D = x.shape
        q = self.q(query).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k(self.norm1(x)).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        return q, k

    def forward(
        self, query: torch.Tensor, x: torch.Tensor, key_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The learned query (1, 1, D) read over tokens x (B, T, D): the pooled vector (B, D) and the query's
        weights (B, heads, T), post-softmax. ``key_mask`` (B, T) booleans: the tokens marked False are not read."""
        B, T, D = x.shape
        q, k = self.queries_keys(query, x)
        v = self.v(self.norm1(x)).reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        attended, weights = one_query_attention(q, k, v, key_mask)  # (B, D), (B, heads, T)
        pooled = query[:, 0] + attended  # (B, D)
        return pooled + self.mlp(self.norm2(pooled)), weights


class AttentivePooler(nn.Module):
    """V-JEPA 2's pooler: ``pool_layers`` blocks over every token, then one learned query's cross-attention."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        inner = pooler_config(config)
        self.query = nn.Parameter(torch.zeros(1, 1, config.hidden_size))  # transformers' query_tokens
        self.blocks = nn.ModuleList(Block(inner) for _ in range(config.pool_layers))
        self.cross = PoolerCrossAttention(inner)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False, key_mask: torch.Tensor | None = None
    ) -> PoolerOutput:
        """Pool the encoder's normed output tokens x (B, T, D). ``need_weights`` keeps every block's (B, heads, T, T)
        weights (the explicit softmax); without it the blocks run the fused kernel and the readout is carried back
        from their queries and keys a few rows at a time. ``key_mask`` (B, T) booleans: the tokens marked False are
        taken out of every block's keys and the query's (see the module's docstring)."""
        carriers: list[torch.Tensor | tuple[torch.Tensor, torch.Tensor]] = []
        controls = AttentionControls(key_mask=key_mask)
        for block in self.blocks:
            x, weights, qkv = block(x, controls, need_weights=need_weights, need_qkv=not need_weights)
            carriers.append(weights if need_weights else (qkv.q, qkv.k))
        pooled, cross = self.cross(self.query, x, key_mask)
        with torch.no_grad():  # token weights to read maps by: no graph (its chunks' softmaxes would be kept)
            readout = pooler_readout(cross, carriers, key_mask)
        attentions = tuple(carriers) if need_weights else None
        return PoolerOutput(pooled, cross, readout, attentions)


def pooler_readout(
    cross_attention: torch.Tensor,
    blocks: Sequence[torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The query's head-mean weights (B, T) carried back through the pooler's blocks, last first, by rollout's rule
    ``r <- 0.5 r + 0.5 r @ mean_h(A)``. Each block is given by its weights (B, heads, T, T) or by its queries and keys
    (each (B, heads, T, head_dim)), whose softmax is then made a few query rows at a time, with the keys ``key_mask``
    (B, T) marks False taken out as the block took them out. fp32 or wider."""
    row = cross_attention.mean(dim=1)
    row = row.to(torch.promote_types(row.dtype, torch.float32))
    for block in reversed(blocks):
        row = 0.5 * row + 0.5 * _row_times_attention(row, block, key_mask)
    return row


def _row_times_attention(
    row: torch.Tensor, block: torch.Tensor | tuple[torch.Tensor, torch.Tensor], key_mask: torch.Tensor | None
) -> torch.Tensor:
    """row (B, T) @ mean_h(A), A a block's attention given whole (B, heads, T, T) or as its queries and keys."""
    if isinstance(block, torch.Tensor):
        return (row[:, None, None, :] @ block.to(row.dtype)).mean(dim=1)[:, 0]
    q, k = block
    B, heads, T, head_dim = q.shape
    chunk = max(1, CHUNK_ELEMENTS // (B * heads * T))
    total = row.new_zeros(B, heads, 1, T)
    for start in range(0, T, chunk):
        scores = (q[:, :, start : start + chunk] * head_dim**-0.5) @ k.transpose(-2, -1)  # (B, heads, chunk, T)
        if key_mask is not None:
            scores.masked_fill_(~key_mask[:, None, None, :], float("-inf"))
        total += row[:, None, None, start : start + chunk] @ softmax_fp32(scores).to(row.dtype)
    return total.mean(dim=1)[:, 0]
