"""Answer-token attention, memory-light: an attention function for transformers' ``AttentionInterface``.

The language model of a VLM runs ``rows_attention`` (registered as ``ROWS_ATTENTION``) in place of SDPA. Its output
is SDPA's (or, for a family with logit soft-capping, the same softmax(QKᵀ)V computed a block of query rows at a
time). While a ``Recording`` is active (``recording(...)``, a context variable, so concurrent threads never mix),
each language-model layer also forms softmax(QKᵀ · scale + mask) for the requested query rows only, over every key
(rows x T per head, never T x T), and keeps:

- its weights on the image tokens' columns, (rows, heads, image tokens) in float32;
- per row and head, the shares of attention on the image tokens, on the first token that is not an image token
  (the attention sink: <bos> or the chat template's first token; PaliGemma's prompt starts with the image), and
  on the other text tokens, so image-share statistics need no second pass;
- the whole rows (rows, heads, T) when ``keep_rows`` is set, for methods that need the text columns too;
- the rows' weights on any other ``columns`` asked for (rows, heads, C): the question's words for an answer token,
  the patches a click chose for every text token (attention_rows.py), never the whole rows.

The function receives queries and keys after the family's rotary embedding (Qwen's M-RoPE included), the mask
transformers built for the layer (causal, sliding window, PaliGemma's prefix and Gemma 3's image blocks), and the
layer's ``scaling`` and ``softcap``; grouped-query heads are matched to their key/value head without copying keys.
The vision tower keeps its own attention: only the text config's implementation is set (by ``VLM``, once, at load).

One model serves every session of the dashboard, each in its own thread, so nothing of a call is kept on the model:
a pass that takes the layers' calls over (relevance, knock-outs: ``taken_over``, used by passes.py) is found, like
the Recording, in a context variable of the thread that runs it. The model's attention implementation never
changes after load, and a generation beside such a pass runs plain ``rows_attention``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

ROWS_ATTENTION = "vitviz_rows"  # the name the attention function and its mask function are registered under
SOFTCAP_BLOCK_ROWS = 256  # query rows per block when the output is computed here (soft-capped families)


@dataclass
class Recording:
    """What one recorded forward pass keeps: the query rows asked for, the image columns, and per layer the rows'
    attention on them. ``layers`` maps each language-model attention module (by id) to its layer index."""

    rows: torch.Tensor  # (R,) positions of the query rows in the sequence
    image_columns: torch.Tensor  # (N,) positions of the image tokens, in sequence order
    layers: dict[int, int]
    sink: int = 0  # position of the first token that is not an image token
    keep_rows: bool = False
    columns: torch.Tensor | None = None  # (C,) positions of other key columns whose weights are kept
    image_weights: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (R, heads, N) float32
    image_share: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (R, heads)
    first_share: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (R, heads): the sink's
    full_rows: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (R, heads, T), with keep_rows
    column_weights: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (R, heads, C), with columns

    def missing_layers(self) -> list[int]:
        """The layers whose attention never reached ``rows_attention`` during the pass."""
        return sorted(set(self.layers.values()) - set(self.image_weights))

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(image weights (R, layers, heads, N), image share (R, layers, heads), first-token share (R, layers,
        heads)), layers in order."""
        order = sorted(self.image_weights)
        return (
            torch.stack([self.image_weights[layer] for layer in order], dim=1),
            torch.stack([self.image_share[layer] for layer in order], dim=1),
            torch.stack([self.first_share[layer] for layer in order], dim=1),
        )


# A layer's call handed to the pass that took it over: (module, layer index, query, key, value, attention mask,
# scaling, softcap, is_causal, the other keyword arguments) -> the attention output (batch, T, heads, d).
LayerHandler = Callable[..., torch.Tensor]

_ACTIVE: ContextVar[Recording | None] = ContextVar("vitviz_vlm_recording", default=None)
# the pass that takes over this thread's layer calls: id(attention module) -> layer index, and its handler
_TAKEN: ContextVar[tuple[dict[int, int], LayerHandler] | None] = ContextVar("vitviz_vlm_taken", default=None)


@contextmanager
def recording(record: Recording) -> Iterator[Recording]:
    """Record the attention of ``record.rows`` during the forward passes inside this block (this thread only)."""
    token = _ACTIVE.set(record)
    try:
        yield record
    finally:
        _ACTIVE.reset(token)


@contextmanager
def taken_over(layers: dict[int, int], handler: LayerHandler) -> Iterator[None]:
    """Inside this block (this thread only), the call of each attention module in ``layers`` (id -> layer index)
    goes to ``handler`` in place of ``layer_output``."""
    token = _TAKEN.set((layers, handler))
    try:
        yield
    finally:
        _TAKEN.reset(token)


def row_probabilities(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    scaling: float | None,
    softcap: float | None = None,
    is_causal: bool | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ · scaling (soft-capped) + mask) in float32 for the query ``rows`` (absolute positions), over all
    keys: (batch, heads, R, Tk). ``query`` is (batch, heads, Tq, d) and ``key`` (batch, kv heads, Tk, d); the last
    query is the last key's position. Without a mask, a causal module sees keys up to its own position."""
    batch, heads, q_length, dim = query.shape
    kv_heads, kv_length = key.shape[1], key.shape[2]
    offset = kv_length - q_length  # position of query 0 (keys cached before this call)
    local = rows.to(query.device) - offset
    count = local.numel()
    q = query[:, :, local, :].float()  # (B, H, R, d)
    group = heads // kv_heads  # a key/value head serves ``group`` consecutive query heads (repeat_kv's order)
    q = q.reshape(batch, kv_heads, group * count, dim)
    scores = torch.matmul(q, key.float().transpose(-1, -2)).reshape(batch, heads, count, kv_length)
    scores = scores * (dim**-0.5 if scaling is None else scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[:, :, local, :kv_length]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    elif is_causal if is_causal is not None else getattr(module, "is_causal", True):
        future = torch.arange(kv_length, device=scores.device)[None, :] > rows.to(scores.device)[:, None]
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _softcapped_output(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    softcap: float,
    is_causal: bool | None,
) -> torch.Tensor:
    """softmax(QKᵀ) V with soft-capped logits (which SDPA cannot do), SOFTCAP_BLOCK_ROWS query rows at a time:
    (batch, Tq, heads, d) as SDPA's output is returned."""
    batch, heads, q_length, _ = query.shape
    kv_heads, kv_length = key.shape[1], key.shape[2]
    group = heads // kv_heads
    offset = kv_length - q_length
    blocks = []
    for start in range(0, q_length, SOFTCAP_BLOCK_ROWS):
        rows = torch.arange(start, min(start + SOFTCAP_BLOCK_ROWS, q_length), device=query.device) + offset
        probs = row_probabilities(module, query, key, attention_mask, rows, scaling, softcap, is_causal)
        probs = probs.to(value.dtype).reshape(batch, kv_heads, group * rows.numel(), kv_length)
        blocks.append(torch.matmul(probs, value).reshape(batch, heads, rows.numel(), -1))
    return torch.cat(blocks, dim=2).transpose(1, 2).contiguous()


def _record(record: Recording, layer: int, probs: torch.Tensor) -> None:
    """Keep one layer's rows (batch 1): image weights, shares, and the whole rows when asked."""
    probs = probs[0].transpose(0, 1)  # (R, H, Tk)
    columns = record.image_columns.to(probs.device)
    on_image = probs[:, :, columns]
    record.image_weights[layer] = on_image.detach().float().cpu()
    record.image_share[layer] = on_image.sum(-1).detach().float().cpu()
    record.first_share[layer] = probs[:, :, record.sink].detach().float().cpu()
    if record.keep_rows:
        record.full_rows[layer] = probs.detach().float().cpu()
    if record.columns is not None:
        record.column_weights[layer] = probs[:, :, record.columns.to(probs.device)].detach().float().cpu()


def rows_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature, the one the language model runs: the output of the pass that
    took the layer over in this thread (``taken_over``), else ``layer_output``'s."""
    taken = _TAKEN.get()
    if taken is not None and id(module) in taken[0]:
        layers, handler = taken
        softcap = kwargs.pop("softcap", None)
        output = handler(
            module, layers[id(module)], query, key, value, attention_mask, scaling, softcap, is_causal, kwargs
        )
        return output, None
    return layer_output(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def layer_output(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA's output (or softmax(QKᵀ)V in blocks of rows for soft-capped logits), and the recorded rows while a
    Recording is active in this thread and ``module`` is one of its language-model layers."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    softcap = kwargs.pop("softcap", None)
    record = _ACTIVE.get()
    if record is not None and id(module) in record.layers:
        if query.shape[0] != 1:
            raise ValueError("attention rows are recorded for a batch of one sequence only")
        probs = row_probabilities(module, query, key, attention_mask, record.rows, scaling, softcap, is_causal)
        _record(record, record.layers[id(module)], probs)
    if softcap is not None:
        return _softcapped_output(module, query, key, value, attention_mask, scaling, softcap, is_causal), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def register_rows_attention() -> None:
    """Register ``rows_attention`` with transformers under ROWS_ATTENTION, with SDPA's mask function (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ROWS_ATTENTION, rows_attention)
    AttentionMaskInterface.register(ROWS_ATTENTION, sdpa_mask)
