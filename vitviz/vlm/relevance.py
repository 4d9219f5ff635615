"""Class-specific relevance of one answer token over the image tokens: Chefer et al. 2021b's rules for
self-attention ("Generic Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers",
hila-chefer/Transformer-MM-Explainability), computed memory-light.

The rules. The relevance matrix starts as the identity, R = I (T x T). For each layer l, first to last,
Ā_l = mean over heads of (∇A_l ⊙ A_l)⁺, where A_l is the layer's attention (heads, T, T), ∇A_l the gradient of the
answer token's logit with respect to it and ⁺ clamps at 0; then R ← R + Ā_l R. The relevance of the token is the row
of the final R at the position that predicts it, read over the image tokens' columns.

Memory-light. The final R is (I + Ā_L)(I + Ā_{L-1})...(I + Ā_1), so its row i is eᵢᵀ(I + Ā_L)...(I + Ā_1): a row
vector multiplied by (I + Ā_l) in reverse layer order, which is the order in which the backward pass reaches the
layers. The attention output per head is O = A V, so ∇A = ∇O Vᵀ. One forward pass (SDPA) keeps each layer's query,
key and value; a hook on each layer's attention output receives ∇O during the backward pass, re-forms A and ∇A for
the rows where the vector is not zero, RELEVANCE_BLOCK_ROWS rows at a time (heads x rows x T, never T x T per layer),
and multiplies the vector. Nothing of a layer is kept once its hook has run.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.maps import answer_token
from vitviz.vlm.passes import AttentionCall, hooked, intercepted
from vitviz.vlm.recording import row_probabilities

RELEVANCE_BLOCK_ROWS = 256  # query rows whose attention is re-formed at once during the backward pass


class _Propagation:
    """The row vector v of R, multiplied by (I + Ā_l) as the backward pass reaches each layer l."""

    def __init__(self, length: int, row: int, device: torch.device):
        self.vector = torch.zeros(length, dtype=torch.float64, device=device)
        self.vector[row] = 1.0
        self.saved: dict[int, AttentionCall] = {}  # layer -> its call, detached, until its hook has run
        self.outputs: list[torch.Tensor] = []
        self.order: list[int] = []  # the layers in the order the backward pass reached them
        self.mask: tuple[torch.Tensor, torch.Tensor] | None = None  # (a boolean mask, its additive form)

    def forward(self, call: AttentionCall) -> torch.Tensor:
        """The layer's output (SDPA's), its inputs kept detached and a hook put on it. Soft-capped logits are
        computed here block by block, whose probabilities autograd would keep for every layer: that output is
        checkpointed (formed again in the backward pass, one layer at a time)."""
        if call.softcap is None:
            output = call.output(self.additive(call.attention_mask, call.query.dtype), replace_mask=True)
        else:
            output = checkpoint(call.output, use_reentrant=False)
        if not output.requires_grad:
            raise VLMError(f"layer {call.layer}'s attention output carries no gradient, so relevance cannot be formed")
        kept = AttentionCall(
            call.module,
            call.layer,
            call.query.detach(),
            call.key.detach(),
            call.value.detach(),
            call.attention_mask,
            call.scaling,
            call.softcap,
            call.is_causal,
        )
        self.saved[call.layer] = kept
        layer = call.layer
        output.register_hook(lambda grad: self.backward(layer, grad))
        self.outputs.append(output)
        return output

    def additive(self, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
        """A boolean mask as one additive mask shared by the layers: SDPA's backward keeps the mask it was given,
        and would otherwise keep a (T, T) float copy of a boolean one for every layer."""
        if mask is None or mask.dtype != torch.bool:
            return mask
        if self.mask is None or self.mask[0] is not mask:
            self.mask = (
                mask,
                torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min),
            )
        return self.mask[1]

    def backward(self, layer: int, grad: torch.Tensor) -> None:
        """v ← v + v Ā_l, with Ā_l's rows re-formed block by block where v is not zero."""
        self.order.append(layer)
        call = self.saved.pop(layer)
        heads, kv_heads = call.query.shape[1], call.key.shape[1]
        group = heads // kv_heads
        value = call.value[0].float().transpose(-1, -2)  # (kv heads, d, T)
        rows = self.vector.nonzero().flatten()
        change = torch.zeros_like(self.vector)
        for start in range(0, rows.numel(), RELEVANCE_BLOCK_ROWS):
            block = rows[start : start + RELEVANCE_BLOCK_ROWS]
            probs = row_probabilities(
                call.module,
                call.query,
                call.key,
                call.attention_mask,
                block,
                call.scaling,
                call.softcap,
                call.is_causal,
            )[0]  # (heads, b, T)
            grad_output = grad[0, block].float().transpose(0, 1)  # (heads, b, d)
            grad_output = grad_output.reshape(kv_heads, group * block.numel(), -1)
            grad_probs = torch.matmul(grad_output, value).reshape(heads, block.numel(), -1)  # ∇A = ∇O Vᵀ
            cam = (grad_probs * probs).clamp(min=0).mean(0).double()  # Ā_l's rows (b, T)
            change += self.vector[block] @ cam
        self.vector = self.vector + change


def relevance_row(answer: Answer, token: int | None) -> np.ndarray:
    """The row of Chefer et al.'s R for answer token ``token`` (its logit, at the position that predicts it):
    float32 (T,) over every position of the sequence. ``token=None``: the mean of every answer token's row (one
    backward pass each)."""
    token = answer_token(answer, token)
    if token is None:
        rows = [_token_row(answer, index) for index in range(len(answer.token_ids))]
        return np.mean(rows, axis=0, dtype=np.float64).astype(np.float32)
    return _token_row(answer, token)


def _token_row(answer: Answer, token: int) -> np.ndarray:
    vlm = answer.model
    inputs = answer.inputs
    length = int(inputs["input_ids"].shape[1])
    row = int(answer.rows[token])
    target = int(answer.token_ids[token])
    propagation = _Propagation(length, row, vlm.device)
    embeddings = vlm.language_model.get_input_embeddings()
    # the residual stream must carry a gradient even where the weights are frozen (in this thread's pass only)
    carry = hooked(embeddings, lambda _m, _a, out: out if out.requires_grad else out.requires_grad_())
    with torch.enable_grad(), carry, intercepted(vlm, propagation.forward):
        output = vlm.model(**inputs, use_cache=False, logits_to_keep=length - row)
        logit = output.logits[0, 0, target]
        torch.autograd.grad(logit, propagation.outputs, allow_unused=True)
    expected = list(range(vlm.num_layers - 1, -1, -1))
    if propagation.order != expected:
        raise VLMError(
            f"the backward pass reached the layers in the order {propagation.order}, not {expected}: relevance "
            "cannot be formed for this model"
        )
    return propagation.vector.float().cpu().numpy()


def image_relevance(answer: Answer, token: int | None) -> np.ndarray:
    """Chefer et al.'s relevance of answer token ``token``'s logit over the image tokens: float32 (N,), in the
    order of ``answer.image_token_grid`` (``token=None``: the mean over the answer's tokens)."""
    return relevance_row(answer, token)[answer.image_positions]
