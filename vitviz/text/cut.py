"""Causal text towers run only as far as each batch's prompts reach: exact, and 3-5x faster on prompt sets.

CLIP's text transformer is causal, and its embedding is read at one position (the end-of-text token): what comes
after that position changes nothing. So prompts are sorted by that position, cut into groups, and each group runs
only up to its own longest prompt, with the position table and the causal mask sliced to that length; the rows are
then put back in order. The library's own modules do the work (open_clip's token embedding, transformer blocks,
final norm and projection); only the position table and the mask are sliced.

    causal_parts(clip_model)        the parts of a plain causal open_clip text tower, or None: run it at full length
    encode_cut(parts, tokens)       (N, T) token ids -> (N, E) embeddings, equal to ``encode_text`` to ~1e-6 in fp32
    in_length_groups(lengths, fn)   sort rows by length, run ``fn`` per group at the group's length, un-sort

A tower that reads its padding is never cut: SigLIP (bidirectional attention, pooled at the last position), a text
pool other than argmax, eos or first, an appended class token (CoCa), a padding mask, a Hugging Face text encoder
inside open_clip, or a mask that is not exactly causal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

GROUP_SIZE = 128  # prompts per forward pass after sorting: half a batch (16 or 32 were slower on 2 cores)
POOLS = ("argmax", "eos", "first")  # pooled positions that padding cannot move; "last" and "none" read padding


@dataclass(frozen=True)
class CausalTextParts:
    """Where a causal open_clip text tower's modules live, and how it pools. The modules (``token_embedding``,
    ``positional_embedding`` (T, W), ``transformer``, ``ln_final``, ``text_projection``, the (T, T) ``attn_mask``)
    are read from ``source`` at each call, so a later ``.to(device)`` or ``.half()`` of the model is followed."""

    source: nn.Module  # the open_clip CLIP itself, or a CustomTextCLIP's TextTransformer
    pool_type: str  # one of POOLS
    eos_id: int | None


def causal_parts(clip_model: nn.Module) -> CausalTextParts | None:
    """The text parts of an open_clip ``CLIP`` or ``CustomTextCLIP`` whose ``encode_text`` is open_clip's own, with
    a causal mask and a pool that padding cannot reach; None for anything else (it then runs at full length)."""
    from open_clip.model import CLIP, CustomTextCLIP
    from open_clip.transformer import TextTransformer, Transformer

    encode_text = getattr(type(clip_model), "encode_text", None)
    if encode_text is CLIP.encode_text:
        source, pool_type, eos_id = clip_model, clip_model.text_pool_type, getattr(clip_model, "text_eos_id", None)
    elif encode_text is CustomTextCLIP.encode_text and type(clip_model.text).forward is TextTransformer.forward:
        source, pool_type, eos_id = clip_model.text, clip_model.text.pool_type, clip_model.text.eos_id
        if (
            type(source)._embeds is not TextTransformer._embeds
            or source.cls_emb is not None
            or source.use_pad_mask
            or source.output_tokens
        ):  # a class token after the padding, a padding mask, tokens returned too
            return None
    else:
        return None
    mask, positions = getattr(source, "attn_mask", None), source.positional_embedding
    if mask is None or not isinstance(source.transformer, Transformer) or pool_type not in POOLS:
        return None
    if pool_type == "eos" and eos_id is None:
        return None
    if mask.shape != (positions.shape[0],) * 2 or not torch.equal(mask, torch.full_like(mask, float("-inf")).triu(1)):
        return None
    return CausalTextParts(source, pool_type, eos_id)


def pooled_positions(parts: CausalTextParts, tokens: torch.Tensor) -> torch.Tensor:
    """(N, T) token ids -> (N,) the position each row's embedding is read at (open_clip's ``text_global_pool``)."""
    if parts.pool_type == "argmax":
        return tokens.argmax(dim=-1)
    if parts.pool_type == "eos":
        return (tokens == parts.eos_id).int().argmax(dim=-1)
    return torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)


def forward_cut(parts: CausalTextParts, tokens: torch.Tensor) -> torch.Tensor:
    """(N, L) token ids, L <= T -> (N, E): open_clip's ``encode_text`` with the position table and mask cut to L."""
    from open_clip.transformer import text_global_pool

    length, text = tokens.shape[1], parts.source
    cast_dtype = text.transformer.get_cast_dtype()
    x = text.token_embedding(tokens).to(cast_dtype) + text.positional_embedding[:length].to(cast_dtype)
    x = text.ln_final(text.transformer(x, attn_mask=text.attn_mask[:length, :length]))
    x = text_global_pool(x, tokens, parts.pool_type, eos_token_id=parts.eos_id)
    if isinstance(text.text_projection, nn.Linear):
        return text.text_projection(x)
    return x if text.text_projection is None else x @ text.text_projection


def in_length_groups(
    lengths: torch.Tensor, run: Callable[[torch.Tensor, int], torch.Tensor], group_size: int | None = None
) -> torch.Tensor:
    """(N,) lengths -> (N, E): ``run(rows, length)`` on groups of ``group_size`` (default GROUP_SIZE) rows sorted by
    length, each at its longest; the results put back in the rows' order."""
    order, size = torch.argsort(lengths, stable=True), group_size or GROUP_SIZE
    parts = []
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        parts.append(run(rows, int(lengths[rows].max())))
    sorted_out = torch.cat(parts)
    out = torch.empty_like(sorted_out)
    out[order] = sorted_out
    return out


def encode_cut(parts: CausalTextParts, tokens: torch.Tensor, group_size: int | None = None) -> torch.Tensor:
    """(N, T) token ids, T the position table's length -> (N, E): sorted by pooled position, each group cut after
    its last pooled position."""
    ends = pooled_positions(parts, tokens) + 1
    return in_length_groups(ends, lambda rows, length: forward_cut(parts, tokens[rows, :length]), group_size)
