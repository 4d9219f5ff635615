"""Passes that change or watch a VLM's layers: relevance (relevance.py), knock-outs (knockout.py), the logit lens
(lens.py) and the vision tower's position check (tower.py).

One loaded model serves every session of the dashboard, each in its own thread, so a pass keeps nothing on the
model that another thread's pass could see:

- ``intercepted(vlm, handler)``: inside the block (this thread only), each language-model layer's attention call
  goes to ``handler(AttentionCall)``, which returns the layer's attention output (batch, T, heads, d) as an attention
  function does. ``rows_attention`` (recording.py), the attention function the model always runs, finds the handler
  in a context variable; the model's attention implementation is never switched, and another thread's pass
  (a generation included) meanwhile runs exactly as without the block.
- ``hooked(module, hook)``: a forward hook (or pre-hook) that acts for the passes of this block in this thread only:
  torch's hooks belong to the module, so another thread's pass through it meanwhile meets a hook that does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from vitviz.vlm.recording import layer_output, taken_over

if TYPE_CHECKING:
    from vitviz.vlm.model import VLM

# The attention implementation passes once switched a model to (a switch every thread saw); no model runs under it
# now, and none must be left on it.
PASS_ATTENTION = "vitviz_pass"


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
        """The layer's attention output (batch, T, heads, d), as ``layer_output`` computes it (SDPA, or blocks of
        rows for soft-capped logits); with ``replace_mask``, under ``attention_mask`` in place of the layer's own."""
        mask = attention_mask if replace_mask else self.attention_mask
        extra = dict(self.kwargs)
        if self.softcap is not None:
            extra["softcap"] = self.softcap
        output, _ = layer_output(
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
_HOOKED: ContextVar[frozenset[int]] = ContextVar("vitviz_vlm_hooked", default=frozenset())  # this thread's blocks


@contextmanager
def intercepted(vlm: VLM, handler: Handler) -> Iterator[None]:
    """Inside this block (this thread only), every language-model attention call of ``vlm`` goes to ``handler``."""
    layers = {id(module): index for index, module in enumerate(vlm.attention_modules)}
    with taken_over(layers, lambda *call: handler(AttentionCall(*call))):
        yield


@contextmanager
def hooked(module: torch.nn.Module, hook: Callable[..., Any], pre: bool = False) -> Iterator[None]:
    """``hook`` as a forward hook of ``module`` (``pre``: a forward pre-hook, given the keyword arguments too), for
    the passes inside this block in this thread only; removed at the end."""
    block = object()

    def this_thread(*args: Any) -> Any:
        return hook(*args) if id(block) in _HOOKED.get() else None

    if pre:
        handle = module.register_forward_pre_hook(this_thread, with_kwargs=True)
    else:
        handle = module.register_forward_hook(this_thread)
    token = _HOOKED.set(_HOOKED.get() | {id(block)})
    try:
        yield
    finally:
        _HOOKED.reset(token)
        handle.remove()
