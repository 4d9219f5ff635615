"""Direct logit attribution: the target's logit split into what each part of the model wrote to the residual stream.

The last block's output is a sum: the embeddings, plus every head's output (through its slice of the output
projection, times LayerScale) and every MLP's output, plus the projections' biases. With the final norm's scale
frozen at its value in this forward pass, the norm, the pooling and a linear head are linear in that sum, so the
logit splits exactly into one term per part (Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits"; Gandelsman et al. 2024 read CLIP's image tower this way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from vitviz.explain.common import check_not_divided, check_not_windowed, target_indices
from vitviz.explain.target import TargetLike, class_target
from vitviz.model import ViT
from vitviz.model.layers import Block


@dataclass(frozen=True)
class LogitAttribution:
    embeddings: (
        torch.Tensor
    )  # (B,) the patch embeddings, prefix tokens and position embeddings (the first block's input)
    heads: torch.Tensor  # (B, layers, heads) each head's output, through its slice of the projection and LayerScale
    mlps: torch.Tensor  # (B, layers) each MLP's output, LayerScale included
    biases: torch.Tensor  # (B,) the attention projections' biases, the final norm's shift and the head's bias
    logit: torch.Tensor  # (B,) the model's own logit for the target: the sum of every other part, to float precision
    target: torch.Tensor  # (B,) the class explained in each image
    edits: torch.Tensor  # (B,) what edited blocks (vitviz.sae.with_sae) add beyond their heads and MLPs; 0 unedited


def direct_logit_attribution(
    model: ViT, pixel_values: torch.Tensor, target: TargetLike | Sequence[int] | torch.Tensor | None = None
) -> LogitAttribution:
    """The target's logit (default: each image's top prediction) split into the direct contributions of the
    embeddings, each head, each MLP and the biases, with the final norm's scale frozen at its value in this forward
    pass; they sum to the logit (tested to 1e-4). Runs in fp32.

    Refused with a message where the readout is not linear in the last tokens: an attention-pooling head ("map"),
    a norm on the heads' joined output (EVA-02's CLIP towers), a head that is neither linear nor a prompt head, and
    heads replaced by their batch mean (``knock_out(..., ablation="mean")``). A block edited through an SAE
    (``vitviz.sae.with_sae``) adds what its edit writes as a part of its own, ``edits``.
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    check_not_windowed(model, "direct logit attribution splits the residual stream of one set of tokens")
    check_not_divided(model, "direct logit attribution splits each block's one attention into heads")
    c = model.config
    if c.num_classes == 0:
        raise ValueError("direct logit attribution needs a classifier: this model is a backbone (no logits)")
    if c.pooling in ("map", "attentive"):  # SigLIP's head, V-JEPA 2's pooler
        raise ValueError(
            "the attention-pooling head is not linear in the tokens: direct logit attribution cannot split its output"
        )
    if c.attention_norm:
        raise ValueError("a norm on the heads' joined output mixes them: direct logit attribution cannot split it")
    if c.fc_norm and (c.pooling == "cls+mean" or c.distillation_head):
        raise ValueError("a norm on two tokens read side by side is not handled by direct logit attribution")
    if model.interventions.heads and model.interventions.ablation == "mean":
        raise ValueError("heads replaced by their batch mean are not this image's contributions: use zero ablation")
    device = next(model.parameters()).device
    pixel_values = pixel_values.to(device, torch.float32)
    with torch.inference_mode():
        output = model(pixel_values, output_attentions=True, output_qkv=True, output_hidden_states=True)
        targets = target_indices(output.logits, target if target is not None else output.logits.argmax(dim=-1))
        x, grid = model.embed(pixel_values)
        controls = model.block_arguments(grid, x.shape[0])  # a knocked-out model's head masks
        readout, constant = linear_readout(model, output.hidden_states[-1], targets)  # (B, T, D), (B,)
        heads, mlps, biases, edits = [], [], constant, torch.zeros_like(constant)
        embeddings = (x * readout).sum(dim=(1, 2))
        layers = zip(model.blocks, output.attentions, output.qkv, controls, output.hidden_states, strict=True)
        for block, weights, (_, _, v), block_controls, hidden in layers:
            per_head = weights @ v  # (B, heads, T, head_dim): what each head hands to the projection
            if block_controls.head_mask is not None:
                per_head = per_head * block_controls.head_mask[:, :, None, None]
            B, H, T, head_dim = per_head.shape
            gain = getattr(block.ls1, "gamma", None)  # LayerScale's, if the model has it
            through = readout * gain if gain is not None else readout  # what a unit written here adds to the logit
            back = (through @ block.attn.proj.weight).view(B, T, H, head_dim).transpose(1, 2)  # (B, heads, T, hd)
            heads.append((per_head * back).sum(dim=(2, 3)))
            biases = biases + (through * block.attn.proj.bias).sum(dim=(1, 2))
            joined = block.attn.proj(per_head.transpose(1, 2).reshape(B, T, H * head_dim))
            x = x + block.ls1(joined)
            written = block.ls2(block.mlp(block.norm2(x)))
            mlps.append((written * readout).sum(dim=(1, 2)))
            x = x + written
            if type(block) is not Block:  # an edited block (vitviz.sae.with_sae): the rest of its output is the edit's
                edits = edits + ((hidden - x) * readout).sum(dim=(1, 2))
                x = hidden
        logit = output.logits.float().gather(1, targets[:, None])[:, 0]
    return LogitAttribution(
        embeddings.cpu(),
        torch.stack(heads, dim=1).cpu(),
        torch.stack(mlps, dim=1).cpu(),
        biases.cpu(),
        logit.cpu(),
        targets.cpu(),
        edits.cpu(),
    )


def linear_readout(model: ViT, last: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target logit as a linear function of the last block's tokens (B, T, D), its norm's scale frozen:
    (G, k) with logit = sum(tokens * G) + k, G (B, T, D), k (B,)."""
    c = model.config
    B, T, D = last.shape
    p = c.num_prefix_tokens
    # the head: logit = u . pooled + constant, per image
    if c.distillation_head and model.head_dist is not None:  # DeiT: the mean of two heads on [CLS] and distillation
        token_weights = [_one_hot(B, T, 0, last), _one_hot(B, T, 1, last)]
        vectors = [model.head.weight[targets] / 2, model.head_dist.weight[targets] / 2]
        constant = (model.head.bias[targets] + model.head_dist.bias[targets]) / 2
    else:
        pooled = model._pool(model.norm(last) if not c.fc_norm else last)[0]
        if c.fc_norm:
            pooled = model.norm(pooled)
        vector, constant = _head_as_linear(model.head, pooled, targets)  # (B, P), (B,)
        if c.pooling == "cls+mean":  # [CLS] and the mean patch token side by side
            token_weights = [_one_hot(B, T, 0, last), _mean_over_patches(B, T, p, last)]
            vectors = [vector[:, :D], vector[:, D:]]
        elif c.pooling == "mean":
            token_weights, vectors = [_mean_over_patches(B, T, p, last)], [vector]
        else:  # [CLS], or the two tokens averaged (DeiT without its second head)
            token_weights = [
                _one_hot(B, T, 0, last)
                if not c.distillation_head
                else (_one_hot(B, T, 0, last) + _one_hot(B, T, 1, last)) / 2
            ]
            vectors = [vector]
    # the final norm, scale frozen: on every token, or (fc_norm) on the pooled vector
    norm = model.norm
    weight = getattr(norm, "weight", None)
    shift = getattr(norm, "bias", None)
    rms = c.norm == "rmsnorm"
    readout = torch.zeros_like(last)
    for token_weight, vector in zip(token_weights, vectors):
        if isinstance(norm, nn.Identity):
            scale = torch.ones(B, T, 1, device=last.device)
        elif c.fc_norm:
            pooled_raw = (token_weight[..., None] * last).sum(dim=1)  # (B, D)
            scale = _frozen_scale(pooled_raw, norm.eps, rms)[:, None, :].expand(B, T, 1)
        else:
            scale = _frozen_scale(last, norm.eps, rms)  # (B, T, 1)
        gain = vector * weight if weight is not None else vector  # (B, D)
        readout = readout + token_weight[..., None] * gain[:, None, :] / scale
        if shift is not None:
            constant = constant + (vector * shift).sum(dim=-1) * token_weight.sum(dim=1)
    if not rms and not isinstance(norm, nn.Identity):  # LayerNorm subtracts each vector's mean: so does its readout
        readout = readout - readout.mean(dim=-1, keepdim=True)
    return readout, constant


def _frozen_scale(x: torch.Tensor, eps: float, rms: bool) -> torch.Tensor:
    """The divisor the norm applies to each vector (..., D) -> (..., 1): its standard deviation (LayerNorm) or root
    mean square (RMSNorm), with the epsilon, as in this forward pass."""
    if rms:
        return (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
    return (x.var(dim=-1, unbiased=False, keepdim=True) + eps).sqrt()


def _head_as_linear(head: nn.Module, pooled: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's logit as u . pooled + k for this image: a linear head, or a prompt head whose normalisation is
    frozen (``linear_readout``)."""
    if isinstance(head, nn.Linear):
        return head.weight[targets], head.bias[targets] if head.bias is not None else pooled.new_zeros(len(targets))
    if hasattr(head, "linear_readout"):
        return head.linear_readout(pooled, targets)
    raise ValueError(f"a {type(head).__name__} head is not linear: direct logit attribution cannot split it")


def _one_hot(B: int, T: int, index: int, like: torch.Tensor) -> torch.Tensor:
    weights = like.new_zeros(B, T)
    weights[:, index] = 1.0
    return weights


def _mean_over_patches(B: int, T: int, p: int, like: torch.Tensor) -> torch.Tensor:
    weights = like.new_zeros(B, T)
    weights[:, p:] = 1.0 / (T - p)
    return weights
