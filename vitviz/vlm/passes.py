"""Passes that change or watch a VLM's attention layer by layer: relevance (relevance.py) and knock-outs (knockout.py).

A ``VLM`` runs its language model's attention through ``rows_attention`` (recording.py). The methods here need more
than a recording: relevance keeps each layer's queries, keys and values to re-form its attention during the
backward pass, and knock-outs mask image columns in every layer. Both go through ``pass_attention``, an attention
function registered with transformers' ``AttentionInterface`` under ``PASS_ATTENTION`` (with SDPA's mask function):

- while no ``intercepted(vlm, handler)`` block is active in this thread, or for a module that is not one of the VLM's
  language-model attention modules, it is exactly ``rows_attention``;
- inside the block, each language-model layer's call goes to ``handler(AttentionCall)``, which returns the layer's
  attention output (batch, T, heads, d) as an attention function does.

``intercepted`` switches the text config's attention implementation to ``PASS_ATTENTION`` for the duration (counted
per model, so concurrent blocks on one model switch it once and restore it after the last); a thread that asks the
model for an answer meanwhile runs ``rows_attention`` through ``pass_attention`` and gets the same result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from vitviz.vlm.recording import rows_attention

if TYPE_CHECKING:
    from vitviz.vlm.model import VLM

PASS_ATTENTION = "vitviz_pass"  # the name pass_attention and its mask function are registered under


@dataclass
class AttentionCall:
    """One language-model layer's attention call: the module, its layer index, and the attention function's
    arguments (query (batch, heads, T, d) and key, value (batch, kv heads, T, d) after the rotary embedding, the mask
    transformers built for the layer, the scaling, the logit soft-cap, whether the module is causal)."""

    module: torch.nn.Module
    layer: int
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float | None
    softcap: float | None
    is_causal: bool | None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def output(self, attention_mask: torch.Tensor | None = None, replace_mask: bool = False) -> torch.Tensor:
        """The layer's attention output (batch, T, heads, d), as ``rows_attention`` computes it (SDPA, or blocks of
        rows for soft-capped logits); with ``replace_mask``, under ``attention_mask`` in place of the layer's own."""
        mask = attention_mask if replace_mask else self.attention_mask
        extra = dict(self.kwargs)
        if self.softcap is not None:
            extra["softcap"] = self.softcap
        output, _ = rows_attention(
            self.module,
            self.query,
            self.key,
            self.value,
            mask,
            scaling=self.scaling,
            is_causal=self.is_causal,
            **extra,
        )
        return output


Handler = Callable[[AttentionCall], torch.Tensor]


@dataclass(frozen=True)
class _Active:
    layers: dict[int, int]  # id(attention module) -> layer index
    handler: Handler


_ACTIVE: ContextVar[_Active | None] = ContextVar("vitviz_vlm_pass", default=None)
_LOCK = threading.Lock()
_SWITCHED: dict[int, tuple[int, Any]] = {}  # id(text config) -> (active blocks, the implementation to restore)


def pass_attention(
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
    """transformers' attention-function signature: the active handler's output for a watched layer, else
    ``rows_attention``'s."""
    active = _ACTIVE.get()
    if active is None or id(module) not in active.layers:
        return rows_attention(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    softcap = kwargs.pop("softcap", None)
    call = AttentionCall(
        module, active.layers[id(module)], query, key, value, attention_mask, scaling, softcap, is_causal, kwargs
    )
    return active.handler(call), None


def register_pass_attention() -> None:
    """Register ``pass_attention`` with transformers under PASS_ATTENTION, with SDPA's mask function (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PASS_ATTENTION, pass_attention)
    AttentionMaskInterface.register(PASS_ATTENTION, sdpa_mask)


@contextmanager
def intercepted(vlm: VLM, handler: Handler) -> Iterator[None]:
    """Inside this block (this thread only), every language-model attention call of ``vlm`` goes to ``handler``."""
    register_pass_attention()
    config = vlm.text_config
    with _LOCK:
        count, previous = _SWITCHED.get(id(config), (0, None))
        if count == 0:
            previous = config._attn_implementation_internal
            config._attn_implementation_internal = PASS_ATTENTION
        _SWITCHED[id(config)] = (count + 1, previous)
    layers = {id(module): index for index, module in enumerate(vlm.attention_modules)}
    token = _ACTIVE.set(_Active(layers, handler))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        with _LOCK:
            count, previous = _SWITCHED.pop(id(config))
            if count > 1:
                _SWITCHED[id(config)] = (count - 1, previous)
            else:
                config._attn_implementation_internal = previous
