"""Layer-wise relevance propagation rules inside vitviz's own blocks, in the gradient x input framework (LXT's
"efficient" formulation): the forward pass is unchanged, the backward pass is changed so that x * dS/dx at the pixels
is the relevance the rules would propagate.

    with relevance_rules("attnlrp"):      # or "cp-lrp"
        score = model(pixels).logits[0, target]
    (gradient,) = torch.autograd.grad(score, pixels)   # pixels.requires_grad_()
    relevance = (pixels * gradient).sum(1)

The rules, as LXT applies them (Achtibat et al. 2024; Ali et al. 2022 for CP-LRP):
- LayerNorm and RMSNorm: the identity rule on the normalisation, its standard deviation held constant (``norm``);
- GELU, QuickGELU, SiLU and the other element-wise non-linearities: the identity rule, gradient f(x) / x
  (``nonlinearity``);
- attention (AttnLRP): the softmax's own gradient, and the uniform rule on both matmuls: the queries' and keys'
  gradients divided by 4, the values' by 2 (``attention_inputs``); CP-LRP holds the queries and keys constant, so
  no relevance passes through the softmax;
- a gated unit (SwiGLU): the uniform rule on the product, the gate's non-linearity by the identity rule; CP-LRP
  holds the gate constant (``gated``);
- linear layers, convolutions, residual sums, poolings: their plain gradient (LRP-0).

The active rules live in a context variable, so one thread's explanation never changes another's forward pass (the
dashboard's sessions share their models). With no rules active every function here is the plain operation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

Rules = Literal["attnlrp", "cp-lrp"]
RULES: tuple[Rules, ...] = get_args(Rules)
_ACTIVE: ContextVar[Rules | None] = ContextVar("vitviz_relevance_rules", default=None)
IDENTITY_EPSILON = 1e-10  # LXT's: f(x) / (x + 1e-10)


@contextlib.contextmanager
def relevance_rules(rules: Rules) -> Iterator[None]:
    """The forward passes run inside take ``rules``' backward pass (the module's docstring)."""
    if rules not in RULES:
        raise ValueError(f"relevance rules are one of {', '.join(map(repr, RULES))}; got {rules!r}")
    token = _ACTIVE.set(rules)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_rules() -> Rules | None:
    return _ACTIVE.get()


class _IdentityRule(torch.autograd.Function):
    """f(x) forward; backward the gradient times f(x) / (x + eps): the identity rule through gradient x input."""

    @staticmethod
    def forward(ctx, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out = fn(x)
        ctx.save_for_backward(out / (x + IDENTITY_EPSILON))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ratio,) = ctx.saved_tensors
        return None, grad * ratio


class _DivideGradient(torch.autograd.Function):
    """The identity forward; the gradient divided by ``factor`` backward: the uniform rule of a product."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad / ctx.factor, None


def nonlinearity(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn(x), by the identity rule under either set of rules."""
    return fn(x) if active_rules() is None else _IdentityRule.apply(fn, x)


def attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The queries, keys and values an attention attends with: as they are, or with the active rules' gradients."""
    rules = active_rules()
    if rules == "attnlrp":
        return _DivideGradient.apply(q, 4.0), _DivideGradient.apply(k, 4.0), _DivideGradient.apply(v, 2.0)
    if rules == "cp-lrp":
        return q.detach(), k.detach(), v
    return q, k, v


def gated(gate: torch.Tensor, up: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor] = F.silu) -> torch.Tensor:
    """fn(gate) * up, SwiGLU's product, under the active rules."""
    rules = active_rules()
    if rules == "attnlrp":
        return _DivideGradient.apply(_IdentityRule.apply(fn, gate) * up, 2.0)
    if rules == "cp-lrp":
        return fn(gate.detach()) * up
    return fn(gate) * up


class LayerNorm(nn.LayerNorm):
    """torch's LayerNorm (the same parameters and state dict); under relevance rules its standard deviation is held
    constant in the backward pass (the identity rule)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if active_rules() is None:
            return super().forward(x)
        mean = x.mean(dim=-1, keepdim=True)
        std = ((x - mean) ** 2).mean(dim=-1, keepdim=True).add(self.eps).sqrt()
        y = (x - mean) / std.detach()
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class RMSNorm(nn.RMSNorm):
    """torch's RMSNorm; under relevance rules its root mean square is held constant in the backward pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if active_rules() is None:
            return super().forward(x)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps).detach()
        return y * self.weight if self.weight is not None else y
