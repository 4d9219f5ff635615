"""Maps over space and time for video ViTs: rollout, relevance, a token's attention over every frame, and the
frames x frames view, each computed in bounded memory (long_sequences.py: never a block's whole (heads, T, T)).

    video_rollout(model, clip)              the readout's rollout over every tubelet token (SpaceTimeMap)
    video_relevance(model, clip, target)    Chefer et al. 2021a's class-specific relevance (SpaceTimeMap)
    video_patch_attention(model, clip, layer=l, token=i)   (B, heads, N): token i's attention row over the patches
    frame_attention(model, clip, layer=l)   (B, heads, F', F'): how much each frame's tokens attend to each frame
    readout_per_frame(model, clip, layer=l) (B, heads, F'): the readout's attention summed per frame

``clip`` is (B, frames, C, H, W) as the model takes it. Maps are one value per patch token in the layout's order
(``SpaceTimeMap.layout.paint(values[b].numpy(), frame=f)`` draws frame f; TimeSformer's order is patch-major, and the
layout says so); F' is the number of token frames (a tubelet of 2 frames is one token frame). The readout is what the
model's head reads (``output.readout``): [CLS] (ViViT, TimeSformer), the mean of the tokens (VideoMAE), V-JEPA 2's
pooler query carried back through the pooler's blocks. Joint blocks (VideoMAE, ViViT, V-JEPA 2) attend over every
token; TimeSformer's divided blocks over time, then space, and both are read, embedded in the token space. Each
function equals the dense computation on ``output_attentions`` to float precision (tests/test_video_maps*.py).

Not registered as map methods (registry.py): a method there explains one image through ``MapInputs`` (one
(T, T) attention per block, kept whole); ``method_maps`` refuses a clip in one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from vitviz.explain.long_sequences import (
    CHUNK_BYTES,
    Progress,
    RelevanceRow,
    Site,
    SiteInput,
    VideoMapError,
    capture,
    check_relevance_controls,
    cross_attention_start,
    fold,
    forward_until,
    pooler_sites,
    rollout_row,
    sites,
)
from vitviz.layout import TokenLayout
from vitviz.model import ViT

Part = Literal["spatial", "temporal"]  # which attention of a divided block (TimeSformer) a per-block view reads


@dataclass(frozen=True)
class SpaceTimeMap:
    """One value per patch token of a clip, and the tokens' places in space and time."""

    values: torch.Tensor  # (B, N) fp32: one value per patch token, in the layout's token order (prefix tokens left out)
    layout: TokenLayout  # those tokens' boxes and frames: layout.paint(values[b].numpy(), frame=f) draws frame f
    logits: torch.Tensor | None  # (B, classes) from the same pass, or None for a backbone


def check_video(model: nn.Module, clip: torch.Tensor) -> None:
    """Refuse, in one line, a model that is not a video ViT or a clip that is not (B, frames, C, H, W)."""
    if not isinstance(model, ViT):
        raise VideoMapError(
            f"maps over space and time need a video ViT (VideoMAE, ViViT, TimeSformer, V-JEPA 2); got "
            f"{type(model).__name__}"
        )
    if not model.config.is_video:
        raise VideoMapError("maps over space and time need a video model; this is an image model: use the image maps")
    if not isinstance(clip, torch.Tensor) or clip.ndim != 5:
        shape = tuple(clip.shape) if isinstance(clip, torch.Tensor) else type(clip).__name__
        raise VideoMapError(f"a clip is a tensor (B, frames, C, H, W); got {shape}")


def _check_layer(model: nn.Module, layer: int) -> int:
    blocks = len(model.blocks)
    if not -blocks <= layer < blocks:
        raise VideoMapError(f"layer must be in [0, {blocks - 1}]; got {layer}")
    return layer % blocks


def _block_site(model: nn.Module, layer: int, part: Part) -> Site:
    """Block ``layer``'s attention: a joint block's one; a divided block's spatial or temporal one."""
    if part not in ("spatial", "temporal"):
        raise VideoMapError(f"part must be 'spatial' or 'temporal'; got {part!r}")
    found = [site for site in sites(model) if site.block == _check_layer(model, layer)]
    if len(found) == 1:
        if part == "temporal":
            raise VideoMapError("part='temporal' reads a divided block (TimeSformer); this model's attend jointly")
        return found[0]
    return found[0] if part == "temporal" else found[1]


def _counter(progress: Progress | None, total: int) -> Callable[[int], None]:
    """progress(done, total) once per block processed (the forward pass's, then those walked back)."""
    done = 0

    def step(_index: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(done, total), total)

    return step


def _logits(output) -> torch.Tensor | None:
    return None if output.logits is None else output.logits.detach().float()


def clip_layout(model: nn.Module, clip: torch.Tensor) -> TokenLayout:
    """The clip's token layout without running the blocks (the patch embedding only)."""
    with torch.no_grad():
        return model.token_layout(model.embed(clip)[1])


def video_rollout(
    model: nn.Module,
    clip: torch.Tensor,
    *,
    progress: Progress | None = None,
    start_layer: int = 0,
    chunk_bytes: int = CHUNK_BYTES,
) -> SpaceTimeMap:
    """Attention rollout (Abnar & Zuidema 2020) over every tubelet token, read out as the head reads
    (``output.readout``: [CLS], the mean of the tokens, or V-JEPA 2's pooler carried back through its blocks): per
    block 0.5 mean_h A + 0.5 I (a divided block: (0.5 S + 0.5 I)(0.5 Tm + 0.5 I), long_sequences.py), later blocks
    on the left, from ``start_layer`` to the last. One SDPA forward pass keeping each attention's input, then the
    blocks walked back carrying the readout's row."""
    check_video(model, clip)
    blocks = len(model.blocks)
    if not 0 <= start_layer < blocks:
        raise VideoMapError(f"start_layer must be in [0, {blocks - 1}]; got {start_layer}")
    step = _counter(progress, 2 * blocks - start_layer)
    chosen = sites(model)
    store: dict[Site, SiteInput] = {}
    with torch.no_grad(), capture(chosen, store, on_block=step):
        output = model(clip)
    walked = [site for site in chosen if site.block >= start_layer]
    row = rollout_row(walked, store, output.readout, chunk_bytes=chunk_bytes, on_block=step)
    return SpaceTimeMap(row[:, output.num_prefix_tokens :], output.layout, _logits(output))


def video_relevance(
    model: nn.Module,
    clip: torch.Tensor,
    target: int | None = None,
    *,
    progress: Progress | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> SpaceTimeMap:
    """Class-specific relevance (Chefer, Gur & Wolf 2021a) of class ``target`` (None: each clip's top class) over
    every tubelet token: the readout's row of prod (I + mean_h((∂y/∂A ⊙ A)^+)) over every attention (a divided
    block's two embedded as in rollout; V-JEPA 2: from its pooler's query through the pooler's blocks, then the
    encoder's), folded in during one SDPA forward and backward pass (long_sequences.RelevanceRow), so no block's
    attention or its gradient is ever whole."""
    check_video(model, clip)
    check_relevance_controls(model)
    chosen = sites(model) + pooler_sites(model)
    blocks = len({site.block for site in chosen})
    step = _counter(progress, 2 * blocks)
    relevance = RelevanceRow(chunk_bytes, on_block=step)
    pooler = model.attn_pool if model.config.pooling == "attentive" else None
    start = cross_attention_start(pooler.cross, relevance) if pooler is not None else contextlib.nullcontext()
    leaf = clip.detach().requires_grad_()  # the backward pass reaches every block whatever the parameters require
    with torch.enable_grad(), start:
        with relevance.capturing(chosen, on_block=step):
            output = model(leaf)
        if output.logits is None:
            raise VideoMapError("class-specific relevance needs a classification head; this model is a backbone")
        classes = output.logits.shape[1]
        if target is None:
            targets = output.logits.detach().argmax(dim=1)
        elif not 0 <= target < classes:
            raise VideoMapError(f"target must be in [0, {classes - 1}]; got {target}")
        else:
            targets = torch.full((output.logits.shape[0],), target, device=output.logits.device)
        if pooler is None:
            relevance.row = output.readout.detach().float()
        score = output.logits.gather(1, targets[:, None]).sum()  # clips do not interact: each gets its own gradient
        torch.autograd.grad(score, leaf)
    return SpaceTimeMap(relevance.row[:, output.num_prefix_tokens :], output.layout, _logits(output))


def _one_block(model: nn.Module, clip: torch.Tensor, layer: int, part: Part) -> tuple[Site, SiteInput, TokenLayout]:
    """Block ``layer``'s attention site and its input (the pass stops there), and the clip's layout."""
    check_video(model, clip)
    site = _block_site(model, layer, part)
    layout = clip_layout(model, clip)
    return site, forward_until(model, clip, [site])[site], layout


def video_patch_attention(
    model: nn.Module, clip: torch.Tensor, *, layer: int, token: int, part: Part = "spatial"
) -> torch.Tensor:
    """Token ``token``'s attention row in block ``layer``, every head, over the patch tokens of every frame:
    (B, heads, N) fp32. ``token`` indexes the layout's tokens, prefix included (0 is [CLS] where there is one; the
    n-th patch token is ``layout.patch_indices[n]``). A divided block (TimeSformer) has two attentions: ``part``
    "spatial" (its frame's patches; [CLS]: the mean of its copies' rows, every frame) or "temporal" (its own patch in
    every frame). The pass stops at that block, and only the chunk of query rows holding the token is computed."""
    site, captured, layout = _one_block(model, clip, layer, part)
    if not 0 <= token < len(layout):
        raise VideoMapError(f"token must be in [0, {len(layout) - 1}]; got {token}")
    if part == "temporal" and layout.kinds[token] != "patch":
        raise VideoMapError(
            f"token {token} is a {layout.kinds[token]} token, which takes no part in a divided block's temporal "
            "attention (each patch's frames only): use part='spatial'"
        )
    B = clip.shape[0]
    one = torch.zeros(B, 1, len(layout), device=clip.device)
    one[:, 0, token] = 1.0
    rows = fold(one, site, captured)[:, 0]  # (B, heads, T)
    return rows[:, :, torch.as_tensor(layout.patch_indices, device=rows.device)]


def token_frames(layout: TokenLayout) -> tuple[torch.Tensor, int]:
    """Each token's frame index (T,) int64, -1 for prefix tokens, and the number of token frames F': tokens covering
    the same span of input frames share one (a tubelet of 2 frames is one token frame)."""
    patches = layout.patch_indices
    spans, index = np.unique(layout.frames[patches], axis=0, return_inverse=True)
    frames = np.full(len(layout), -1, dtype=np.int64)
    frames[patches] = index.reshape(-1)
    return torch.from_numpy(frames), len(spans)


def _frame_onehot(layout: TokenLayout, device: torch.device) -> torch.Tensor:
    """(T, F') fp32: token t's row is one-hot on its token frame; prefix tokens' rows are zero."""
    frames, count = token_frames(layout)
    onehot = torch.zeros(len(frames), count)
    patches = torch.from_numpy(layout.patch_indices)
    onehot[patches, frames[patches]] = 1.0
    return onehot.to(device)


def frame_attention(
    model: nn.Module, clip: torch.Tensor, *, layer: int, chunk_bytes: int = CHUNK_BYTES
) -> torch.Tensor:
    """How much each frame's tokens attend to each frame in block ``layer``: (B, heads, F', F') fp32, row f the mean
    over the patch queries of token frame f of their attention summed over each key frame's patch tokens (what goes
    to prefix tokens is left out, so a row sums to 1 minus that share). A divided block (TimeSformer) attends across
    frames in its temporal attention only (its spatial one stays within a frame): that is the one read. One pass of
    query-row chunks serves every frame's row."""
    check_video(model, clip)
    part: Part = "temporal" if model.config.attention == "divided" else "spatial"
    site, captured, layout = _one_block(model, clip, layer, part)
    onehot = _frame_onehot(layout, clip.device)  # (T, F')
    queries = (onehot / onehot.sum(dim=0)).T.expand(clip.shape[0], -1, -1)  # (B, F', T): each frame's mean
    per_token = fold(queries, site, captured, chunk_bytes=chunk_bytes)  # (B, F', heads, T)
    return (per_token @ onehot).transpose(1, 2)  # (B, heads, query frame, key frame)


def readout_per_frame(
    model: nn.Module, clip: torch.Tensor, *, layer: int, part: Part = "spatial", chunk_bytes: int = CHUNK_BYTES
) -> torch.Tensor:
    """The readout's attention in block ``layer`` summed over each token frame's patch tokens: (B, heads, F') fp32.
    The readout row is what the head reads (``output.readout``: [CLS]'s row, the mean of the patch rows, V-JEPA 2's
    pooler carried back), so the whole forward pass runs; the block's attention is recomputed a chunk of query rows
    at a time. A divided block (TimeSformer): its spatial attention by default, [CLS]'s copies averaged."""
    check_video(model, clip)
    if part == "temporal":
        raise VideoMapError(
            "the readout ([CLS]) takes no part in a divided block's temporal attention (each patch's frames only): "
            "use part='spatial', or frame_attention for the attention between frames"
        )
    site = _block_site(model, layer, part)
    store: dict[Site, SiteInput] = {}
    with torch.no_grad(), capture([site], store):
        output = model(clip)
    row = fold(output.readout.detach().float()[:, None], site, store[site], chunk_bytes=chunk_bytes)[:, 0]
    return row @ _frame_onehot(output.layout, row.device)
