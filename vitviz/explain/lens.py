"""A patch-level logit lens: every token of every block read by the model's own final LayerNorm and head, as if
that block were the last (nostalgebraist 2020, "interpreting GPT: the logit lens", applied to patches). It shows
where in the image, and from which block on, the class can be read.

A model that attends in windows and merges tokens between stages (Swin) is read the same way where its head can
read: the blocks of its last stage (the earlier stages' tokens are narrower), each token through the final norm and
the head (Swin pools by the mean after its norm, so the mean of these per-token logits is the model's logit), each
block's readout its tokens normed, mean-pooled and classified; the maps are drawn on the first stage's patches,
each patch showing the last-stage token that holds it (``windowed_logit_lens``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitviz.explain.common import LayoutArgument, check_not_windowed, class_probabilities, target_indices, token_grid
from vitviz.explain.method import LogitLens, MapInputs, Method, MethodOutput
from vitviz.explain.stages import first_patch_holders
from vitviz.explain.target import TargetLike, class_target
from vitviz.layout import TokenLayout, same_tokens


def token_logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of each token (..., D) on its own: (..., num_classes).

    The head reads the token as if it were the only one it pools. With [CLS] or mean pooling that is
    head(norm(token)); for mean pooling (without fc_norm) these are exactly the per-patch terms whose mean is
    the model's logit, the head being linear. "cls+mean" reads the token in both halves; "map" (SigLIP) runs
    the attention-pooling head on the token alone, so its one key gets weight 1, and so does V-JEPA 2's attentive
    pooler ("attentive": its blocks and query over that one token); DeiT's two heads both read it
    and are averaged; ``fc_norm`` models normalise after pooling, as they do.
    """
    if model.head is None:
        raise ValueError(
            "the logit lens reads tokens through the classification head; this model is a backbone "
            "(num_classes=0) and has none"
        )
    config = model.config
    x = tokens if config.fc_norm else model.norm(tokens)
    if config.pooling in ("map", "attentive"):
        x = model.attn_pool(x.reshape(-1, 1, x.shape[-1]))[0].reshape(x.shape)
    elif config.pooling == "cls+mean":
        x = torch.cat([x, x], dim=-1)
    if config.fc_norm:
        x = model.norm(x)
    if model.head_dist is not None:
        return (model.head(x) + model.head_dist(x)) / 2
    return model.head(x)


def logit_lens(
    model: torch.nn.Module,
    hidden_states: Sequence[torch.Tensor],
    target: TargetLike | Sequence[int] | torch.Tensor,
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
) -> LogitLens:
    """The logit lens over ``hidden_states`` (``model(x, output_hidden_states=True)``, one (B, T, D) per block).

    For every block and patch token: the model's probabilities of ``token_logits`` (softmax, or SigLIP's
    sigmoid), the target's probability and the top class,
    as (layers, B, rows, cols) maps ((layers, B, N) without a grid). ``readout_probability`` reads each block's
    output through the model's own pooling and head (``model.forward_head``): for the last block it is the
    model's probability. ``target`` is one class or one per image. ``num_prefix_tokens``: the token layout
    (``output.layout``), or a plain ViT's prefix count with ``grid_size``.
    """
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    check_not_windowed(model, "the logit lens reads every block's tokens through the one head")
    grid = token_grid(num_prefix_tokens, grid_size, "logit_lens")
    if len(hidden_states) == 0:
        raise ValueError("hidden_states is empty: run the model with output_hidden_states=True")
    B, T, _ = hidden_states[0].shape
    num_prefix_tokens = grid.num_prefix_tokens
    N = T - num_prefix_tokens
    if not 0 <= num_prefix_tokens < T or (grid.shape is not None and grid.num_patches != N):
        raise ValueError(f"{num_prefix_tokens} prefix tokens and a grid of {grid.shape} do not fit {T} tokens")
    probability, votes, readout = [], [], []
    with torch.no_grad():
        for hidden in hidden_states:
            patch_logits = _at_least_fp32(token_logits(model, hidden[:, num_prefix_tokens:]))  # (B, N, classes)
            # forward_head only records the grid in its output, so any grid of N patches does when none is given
            logits = _at_least_fp32(model.forward_head(hidden, grid.shape or (1, N)).logits)
            targets = target_indices(logits, target)
            readout.append(class_probabilities(model, logits).gather(1, targets[:, None])[:, 0])
            probability.append(
                class_probabilities(model, patch_logits).gather(2, targets[:, None, None].expand(B, N, 1))[..., 0]
            )
            votes.append(patch_logits.argmax(dim=-1))
    return LogitLens(
        probability=grid.as_map(torch.stack(probability)),
        votes=grid.as_map(torch.stack(votes)),
        readout_probability=torch.stack(readout),
    )


def windowed_logit_lens(
    model: torch.nn.Module,
    hidden_states: Sequence[torch.Tensor],
    target: TargetLike | Sequence[int] | torch.Tensor,
    layouts: Sequence[TokenLayout],
) -> LogitLens:
    """The logit lens of a model that attends in windows and merges tokens (Swin; the module's docstring): its
    ``layers`` are the blocks of the last stage, the blocks whose tokens are the last block's (their index is
    ``len(hidden_states) - layers`` onwards); maps (layers, B, rows, cols) over the first block's patches."""
    target = class_target(model, target)  # a vitviz.Target or a prompt: its class index
    if model.head is None:
        raise ValueError(
            "the logit lens reads tokens through the classification head; this model is a backbone "
            "(num_classes=0) and has none"
        )
    if len(hidden_states) != len(layouts) or not hidden_states:
        raise ValueError(f"{len(hidden_states)} hidden states for {len(layouts)} layouts: give output.layouts")
    last = [i for i, layout in enumerate(layouts) if same_tokens(layout, layouts[-1])]
    holders = torch.as_tensor(first_patch_holders(layouts), device=hidden_states[-1].device)
    first = layouts[0]
    shape = first.grid[1:] if first.grid is not None and first.grid[0] == 1 else (len(holders),)
    probability, votes, readout = [], [], []
    with torch.no_grad():
        for index in last:
            hidden = hidden_states[index]  # (B, T_last, D)
            token_logits_ = _at_least_fp32(model.head(model.norm(hidden)))  # (B, T_last, classes)
            logits = _at_least_fp32(model.forward_head(hidden).logits)  # (B, classes): normed, mean-pooled, head
            targets = target_indices(logits, target)
            readout.append(class_probabilities(model, logits).gather(1, targets[:, None])[:, 0])
            B, T = token_logits_.shape[:2]
            chosen = class_probabilities(model, token_logits_).gather(2, targets[:, None, None].expand(B, T, 1))
            probability.append(chosen[..., 0][:, holders].reshape(B, *shape))
            votes.append(token_logits_.argmax(dim=-1)[:, holders].reshape(B, *shape))
    return LogitLens(torch.stack(probability), torch.stack(votes), torch.stack(readout))


def _at_least_fp32(logits: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits to fp32 before the probabilities; fp64 ones stay fp64."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _lens_map(inputs: MapInputs) -> MethodOutput:
    with inputs.autocast():
        if inputs.windowed:
            lens = windowed_logit_lens(inputs.model, inputs.hidden_states, inputs.target, inputs.layouts)
        else:
            lens = logit_lens(inputs.model, inputs.hidden_states, inputs.target, **inputs.layout)
    lens = LogitLens(lens.probability.float(), lens.votes, lens.readout_probability.float())
    return MethodOutput(lens.probability[-1], lens)  # the map: the last block's, the tokens the head reads


LENS = Method(
    name="lens",
    description="logit lens: the class's probability read by the head from each patch token of the last block",
    paper="nostalgebraist 2020",
    compute=_lens_map,
    class_specific=True,
    cost="forward",
    cost_note="",
    caption="Bright: patches from which the head, reading them on their own, finds the class likely.",
    needs=("hidden_states",),
    windowed=None,  # Swin: the last stage's blocks, the tokens the head can read (windowed_logit_lens)
)
