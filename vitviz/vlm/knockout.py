"""Knock-outs: take image tokens out of the answer's view in the order of a map and follow the log-probability of one
answer token or of the whole answer, a faithfulness curve with its area (vitviz/explain/faithfulness.py's fractions
and area).

What is masked. Knocking out a set of image tokens blocks attention, in every language-model layer, from the
query positions of the ``view`` to the key positions of those image tokens (their weights become 0 and each row's
softmax spreads over the keys left):

- ``view="after_image"`` (the default): every position after the last image token, that is the text that follows
  the image (the rest of the question, the generation prompt) and the answer's rows. Nothing read after the image
  can then take information from a removed token, directly or through an earlier text token. The image tokens
  themselves (and any text before or between them) still attend to one another as before: the removed tokens'
  content can reach the answer only through the image tokens left in view.
- ``view="answer"``: only the rows that predict the answer's tokens (from the position just before the first answer
  token).

Image-newline tokens (LLaVA-NeXT) are not image tokens and are never removed.

What is measured (``token``). One pass per step, teacher-forced (SDPA with the edited mask, handed to the pass through
``passes.intercepted``), gives log p(token | the tokens before it) for every answer token; a curve follows either
one chosen answer token's log-probability (``token=t``: the map to order it by is that token's own map) or the whole
answer's, the sum over its tokens (``token=None``: ordered by the whole answer's map). Both run the same loop.

At each fraction f of the steps (by default Chefer et al.'s 0, 0.1, ..., 0.9), the round(N * f) image tokens that
rank first are removed: most relevant first (a faithful map makes the log-probability fall fast: a low area) or
least relevant first (a high area). The area is the trapezoid over the fractions, as ``chefer_auc`` integrates,
in the log-probability's own units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from vitviz.explain.faithfulness import CHEFER_FRACTIONS, chefer_auc
from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.passes import AttentionCall, intercepted

View = Literal["after_image", "answer"]
Order = Literal["most", "least"]
VIEWS = ("after_image", "answer")
MAX_STEPS = 101  # fractions of one curve (each one forward pass)


@dataclass(frozen=True)
class KnockoutCurve:
    """The log-probability (float64 (S,)) of answer token ``token``, or of the whole answer (None: the sum over its
    tokens), with ``removed`` (int64 (S,)) image tokens knocked out at each of the ``fractions`` (float64 (S,)), in
    ``order`` of the map; ``area`` under it."""

    order: Order
    view: View
    token: int | None
    fractions: np.ndarray
    removed: np.ndarray
    logprob: np.ndarray
    area: float


def _view_start(answer: Answer, view: View) -> int:
    """The first query position whose view is edited."""
    if view not in VIEWS:
        raise VLMError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")
    if view == "answer":
        return answer.answer_start - 1
    return int(answer.image_positions.max()) + 1 if len(answer.image_positions) else answer.answer_start - 1


class _Mask:
    """The layer masks of one pass: the layer's own mask with (view rows x removed columns) blocked."""

    def __init__(self, start: int, columns: torch.Tensor):
        self.start = start
        self.columns = columns
        self.made: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}  # id(base mask) -> (base, edited)

    def edited(self, call: AttentionCall) -> torch.Tensor:
        base = call.attention_mask
        key = id(base)
        if key not in self.made:
            self.made[key] = (base, self.edit(call))
        return self.made[key][1]

    def edit(self, call: AttentionCall) -> torch.Tensor:
        q_length, kv_length = call.query.shape[2], call.key.shape[2]
        device = call.query.device
        rows = torch.arange(kv_length - q_length, kv_length, device=device)  # the queries' positions
        blocked = torch.zeros(q_length, kv_length, dtype=torch.bool, device=device)
        blocked[:, self.columns.to(device)] = True
        blocked &= (rows >= self.start)[:, None]
        base = call.attention_mask
        if base is None:
            causal = call.is_causal if call.is_causal is not None else getattr(call.module, "is_causal", True)
            keys = torch.arange(kv_length, device=device)
            visible = keys[None, :] <= rows[:, None] if causal else torch.ones_like(blocked)
            return (visible & ~blocked)[None, None]
        base = base[..., :kv_length]
        if base.dtype == torch.bool:
            return base & ~blocked
        return base.masked_fill(blocked, torch.finfo(base.dtype).min)

    def __call__(self, call: AttentionCall) -> torch.Tensor:
        return call.output(self.edited(call), replace_mask=True)


def token_logprobs(answer: Answer, removed: Sequence[int] | np.ndarray, view: View = "after_image") -> np.ndarray:
    """Each answer token's log-probability (float64 (T,), teacher-forced, log p(token | the tokens before it)) with
    the image tokens ``removed`` (indices into the image tokens, 0 to N - 1) knocked out of ``view``'s sight."""
    start = _view_start(answer, view)
    count = len(answer.image_positions)
    removed = np.asarray(removed, dtype=np.int64).reshape(-1)
    if removed.size and (removed.min() < 0 or removed.max() >= count):
        raise VLMError(f"removed image tokens must be indices 0 to {count - 1}")
    vlm = answer.model
    columns = torch.as_tensor(answer.image_positions[removed], dtype=torch.long)
    length = int(answer.input_ids.shape[1])
    first = answer.answer_start - 1
    with torch.inference_mode(), intercepted(vlm, _Mask(start, columns)):
        logits = vlm.model(**answer.inputs, use_cache=False, logits_to_keep=length - first).logits
    ids = torch.as_tensor(answer.token_ids, device=logits.device)
    logprobs = torch.log_softmax(logits[0, : len(ids)].float(), dim=-1)
    return logprobs[torch.arange(len(ids), device=logits.device), ids].double().cpu().numpy()


def _measured(answer: Answer, token: int | None) -> int | None:
    """``token`` checked: an answer token's index (0 to T - 1), or None for the whole answer."""
    if token is None:
        return None
    count = len(answer.token_ids)
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < count:
        raise VLMError(f"token must be an answer token's index, 0 to {count - 1}, or None for the whole answer")
    return int(token)


def answer_logprob(
    answer: Answer, removed: Sequence[int] | np.ndarray, view: View = "after_image", token: int | None = None
) -> float:
    """The log-probability of answer token ``token`` (None: the whole answer's, the sum over its tokens),
    teacher-forced, with the image tokens ``removed`` (indices 0 to N - 1) knocked out of ``view``'s sight."""
    token = _measured(answer, token)
    logprobs = token_logprobs(answer, removed, view)
    return float(logprobs.sum() if token is None else logprobs[token])


def _fractions(fractions: Sequence[float]) -> np.ndarray:
    values = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if not 1 <= values.size <= MAX_STEPS or not np.isfinite(values).all():
        raise VLMError(f"fractions must be 1 to {MAX_STEPS} numbers from 0 to 1; got {len(values)}")
    if values.min() < 0 or values.max() > 1 or (np.diff(values) <= 0).any():
        raise VLMError("fractions must increase, each from 0 to 1")
    return values


def knockout_curve(
    answer: Answer,
    scores: np.ndarray,
    order: Order = "most",
    fractions: Sequence[float] = CHEFER_FRACTIONS,
    view: View = "after_image",
    token: int | None = None,
) -> KnockoutCurve:
    """The log-probability of answer token ``token`` (None: of the whole answer, summed over its tokens) as image
    tokens are knocked out in the order of ``scores`` (one per image token: that token's map, or the whole answer's
    for None), ``order="most"`` (highest first) or ``"least"``, at each of ``fractions``."""
    if order not in ("most", "least"):
        raise VLMError(f"order must be 'most' or 'least'; got {order!r}")
    _view_start(answer, view)
    token = _measured(answer, token)
    count = len(answer.image_positions)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (count,) or not np.isfinite(scores).all():
        raise VLMError(f"scores must be {count} finite numbers, one per image token; got shape {scores.shape}")
    steps = _fractions(fractions)
    ranking = np.argsort(-scores if order == "most" else scores, kind="stable")
    removed = np.array([round(count * f) for f in steps], dtype=np.int64)
    logprob = np.array([answer_logprob(answer, ranking[:k], view, token) for k in removed])
    area = chefer_auc(torch.from_numpy(logprob), tuple(steps)) / 100 if len(steps) > 1 else 0.0
    return KnockoutCurve(order, view, token, steps, removed, logprob, area)


def knockout_curves(
    answer: Answer,
    scores: np.ndarray,
    fractions: Sequence[float] = CHEFER_FRACTIONS,
    view: View = "after_image",
    token: int | None = None,
) -> dict[Order, KnockoutCurve]:
    """Both curves of a map, by order: "most" (most relevant first) and "least" (least relevant first), following
    answer token ``token``'s log-probability (None: the whole answer's)."""
    return {order: knockout_curve(answer, scores, order, fractions, view, token) for order in ("most", "least")}
