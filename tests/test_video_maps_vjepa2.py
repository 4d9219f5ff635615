"""Maps over space and time on V-JEPA 2 (3-D rotary encoder, attentive pooler) equal dense computations written here:
the pooler's query weights carried back through the pooler's blocks and then the encoder's by rollout's rule, and
Chefer et al.'s relevance from the query's gradient-weighted cross-attention through every self-attention, with the
pooler re-run by hand from the encoder's output so that its cross-attention's weights have a gradient. A tiny random
model built with transformers' VJEPA2ForVideoClassification."""

import pytest
import torch
from test_import_vjepa2 import clips, convert, hf_model

from vitviz.explain import frame_attention, readout_per_frame, video_patch_attention, video_relevance, video_rollout
from vitviz.model import AttentionControls

ATOL = 1e-5
CHUNK = 4 * 2 * 4 * 32 * 5  # 5 query rows at B = 2, heads = 4, T = 32


def model_and_clip():
    return convert(hf_model()), clips()


def pooler_by_hand(model, encoded: torch.Tensor, key_mask: torch.Tensor | None = None):
    """The attentive pooler from the encoder's normed output (B, T, D), the keys ``key_mask`` marks False left out:
    its blocks' weights, the query's weights (B, heads, 1, T) as a tensor in the graph, and the logits."""
    pooler = model.attn_pool
    blocks = []
    x = encoded
    for block in pooler.blocks:
        x, weights, _ = block(x, AttentionControls(key_mask=key_mask), need_weights=True)
        blocks.append(weights)
    cross = pooler.cross
    q, k = cross.queries_keys(pooler.query, x)
    B, heads, T, head_dim = k.shape
    scores = q @ k.transpose(-2, -1) / head_dim**0.5
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    query_weights = torch.softmax(scores, dim=-1)  # (B, heads, 1, T)
    v = cross.v(cross.norm1(x)).reshape(B, T, heads, head_dim).transpose(1, 2)
    pooled = pooler.query[:, 0] + (query_weights @ v).transpose(1, 2).reshape(B, -1)
    pooled = pooled + cross.mlp(cross.norm2(pooled))
    if model.config.fc_norm:
        pooled = model.norm(pooled)
    return blocks, query_weights, model.head(pooled)


def test_rollout_reads_through_the_pooler_then_the_encoder():
    model, clip = model_and_clip()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
        blocks, query_weights, logits = pooler_by_hand(model, out.last_hidden_state)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=0)
    row = query_weights.mean(dim=1)[:, 0]  # (B, T)
    for weights in [*out.attentions, *blocks][::-1]:
        row = 0.5 * row + 0.5 * torch.einsum("bi,bij->bj", row, weights.mean(dim=1))
    result = video_rollout(model, clip, chunk_bytes=CHUNK)
    assert result.values.shape == (2, 32)
    torch.testing.assert_close(result.values, row, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("knocked_out", [(), (3, 17)])
def test_relevance_starts_at_the_query_and_goes_through_every_self_attention(knocked_out):
    """Also with tokens knocked out: the encoder's and the pooler's attentions (its query's too) leave them out."""
    model, clip = model_and_clip()
    model = model.knock_out(tokens=knocked_out)
    key_mask = torch.ones(2, 32, dtype=torch.bool)
    key_mask[:, list(knocked_out)] = False
    result = video_relevance(model, clip, target=1, chunk_bytes=CHUNK)
    out = model(clip, output_attentions=True)
    blocks, query_weights, logits = pooler_by_hand(model, out.last_hidden_state, key_mask)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=0)
    attentions = [*out.attentions, *blocks]
    *gradients, query_gradient = torch.autograd.grad(logits[:, 1].sum(), [*attentions, query_weights])
    relevance = torch.eye(32).repeat(2, 1, 1)
    for weights, gradient in zip(attentions, gradients, strict=True):
        relevance = relevance + (gradient * weights).clamp(min=0).mean(dim=1) @ relevance
    start = (query_gradient * query_weights).clamp(min=0).mean(dim=1)  # (B, 1, T)
    expected = (start @ relevance)[:, 0].detach()
    torch.testing.assert_close(result.values, expected, atol=ATOL, rtol=1e-4)


def test_per_block_views_are_the_encoder_rows():
    model, clip = model_and_clip()
    with torch.no_grad():
        out = model(clip, output_attentions=True)
    attention = out.attentions[1]  # (B, heads, 32, 32): 2 token frames of 16
    rows = video_patch_attention(model, clip, layer=1, token=20)
    torch.testing.assert_close(rows, attention[:, :, 20], atol=ATOL, rtol=1e-4)
    expected = attention.reshape(2, 4, 2, 16, 2, 16).sum(dim=-1).mean(dim=3)
    torch.testing.assert_close(frame_attention(model, clip, layer=1, chunk_bytes=CHUNK), expected, atol=ATOL, rtol=1e-4)
    readout = torch.einsum("bt,bhts->bhs", out.readout, attention).reshape(2, 4, 2, 16).sum(dim=-1)
    torch.testing.assert_close(readout_per_frame(model, clip, layer=1), readout, atol=ATOL, rtol=1e-4)
