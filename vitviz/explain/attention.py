"""Maps from attention alone: rollout, what [CLS] / a patch / the head's tokens attend to, and the
streaming explainer that folds them in during the forward pass."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

from vitviz.explain.common import (
    HEAD_FUSIONS,
    HeadFusion,
    Readout,
    _as_map,
    _check_attentions,
    _check_choice,
    _check_readout,
    _check_start_layer,
    _read_out,
)
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.statistics import attention_entropy, mean_attention_distance


def fuse_heads(attention: torch.Tensor, head_fusion: HeadFusion = "mean") -> torch.Tensor:
    """(B, heads, T, T) -> (B, T, T) by the mean, max or min over heads."""
    _check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    if head_fusion == "mean":
        return attention.mean(dim=1)
    return attention.amax(dim=1) if head_fusion == "max" else attention.amin(dim=1)


def discard_weakest(fused: torch.Tensor, discard_ratio: float, num_prefix_tokens: int) -> torch.Tensor:
    """Zero the ``discard_ratio`` fraction of the weakest patch-to-patch weights of each image.

    Attention to or from prefix tokens is never discarded ([CLS] included): only the
    (N x N) patch block competes. Returns a new tensor (B, T, T).
    """
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1); got {discard_ratio}")
    if discard_ratio == 0.0:
        return fused
    p = num_prefix_tokens
    patches = fused[:, p:, p:]  # (B, N, N)
    flat = patches.reshape(patches.shape[0], -1)
    k = int(flat.shape[1] * discard_ratio)
    if k == 0:
        return fused
    # Exactly the k weakest, as topk(k, largest=False) picks them, but through the k-th smallest
    # value: about 3x faster than topk on a CPU. Everything below it goes, and of the weights equal
    # to it, the first ones (by position) until k are gone; topk leaves the choice among ties open.
    threshold = flat.kthvalue(k, dim=1, keepdim=True).values  # (B, 1)
    below = flat < threshold
    tied = flat == threshold
    drop = below | (tied & (tied.cumsum(1) <= k - below.sum(1, keepdim=True)))
    out = fused.clone()
    out[:, p:, p:] = flat.masked_fill(drop, 0.0).reshape_as(patches)
    return out


def _residual_step(fused: torch.Tensor) -> torch.Tensor:
    """One rollout factor: add the identity for the skip connection, then make every row sum to 1."""
    with_residual = fused + torch.eye(fused.shape[-1], dtype=fused.dtype, device=fused.device)
    return with_residual / with_residual.sum(dim=-1, keepdim=True)  # keepdim: each row by its own sum


def _rollout(fused: Sequence[torch.Tensor], start_layer: int, readout: Readout, num_prefix_tokens: int) -> torch.Tensor:
    """Shared rollout loop: R = prod_l normalize_rows(A_l + I), later layers on the left; (B, N)."""
    _check_start_layer(start_layer, len(fused))
    _check_readout(readout)
    B, T, _ = fused[0].shape
    rollout = torch.eye(T, dtype=fused[0].dtype, device=fused[0].device).expand(B, T, T)
    for matrix in fused[start_layer:]:
        rollout = _residual_step(matrix) @ rollout  # (B, T, T), later layers on the left
    return _read_out(rollout, readout, num_prefix_tokens)


def attention_rollout(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how much each patch flows into the output.

    Per block: fuse heads, optionally discard the weakest patch-to-patch weights, add the
    identity for the residual path, renormalise rows; multiply from ``start_layer`` to the last
    block. Returns the [CLS] row over the patches, (B, rows, cols) or (B, N). For models pooled
    by the mean patch token (``readout="mean"``, e.g. no [CLS] token) the rows of all patch
    queries are averaged instead, since that mean is what the head sees; ``readout=output.readout``
    reads exactly what any model's head reads (DeiT's two tokens, SigLIP's pooling weights).
    """
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    fused = torch.stack([fuse_heads(a, head_fusion) for a in attentions])  # (L, B, T, T)
    L, B, T, _ = fused.shape  # discard in all blocks at once: one call instead of L
    fused = discard_weakest(fused.reshape(L * B, T, T), discard_ratio, num_prefix_tokens).reshape(L, B, T, T)
    return _as_map(_rollout(list(fused), start_layer, readout, num_prefix_tokens), grid_size)


def cls_attention(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    *,
    layer: int,
    head: int | HeadFusion = "mean",
) -> torch.Tensor:
    """What [CLS] attends to in one block: one head's row, or the heads fused; (B, rows, cols).

    Token 0 must be the [CLS] token: for a model without one there is no [CLS] row to show.
    """
    if num_prefix_tokens == 0:
        raise ValueError("this model has no [CLS] token (num_prefix_tokens=0); use query_attention on a patch")
    return query_attention(attentions, num_prefix_tokens, grid_size, layer=layer, query=0, head=head)


def query_attention(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    *,
    layer: int,
    query: int | tuple[int, int],
    head: int | HeadFusion = "mean",
) -> torch.Tensor:
    """What one token attends to in one block, over the patches; (B, rows, cols) or (B, N).

    ``query`` is a token index (0 is [CLS]) or a patch position (row, col), which needs the grid.
    """
    T = _check_attentions(attentions, num_prefix_tokens, grid_size)
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(f"layer must be in [0, {len(attentions) - 1}]; got {layer}")
    if isinstance(query, tuple):
        if grid_size is None:
            raise ValueError("a (row, col) query needs grid_size")
        row, col = query
        if not (0 <= row < grid_size[0] and 0 <= col < grid_size[1]):
            raise ValueError(f"patch ({row}, {col}) is outside the {grid_size[0]}x{grid_size[1]} grid")
        query = num_prefix_tokens + row * grid_size[1] + col
    if not 0 <= query < T:
        raise ValueError(f"query token must be in [0, {T - 1}]; got {query}")
    attention = attentions[layer]  # (B, heads, T, T)
    if isinstance(head, str):
        rows = fuse_heads(attention[:, :, query : query + 1], head)[:, 0]  # (B, T)
    else:
        if not 0 <= head < attention.shape[1]:
            raise ValueError(f"head must be in [0, {attention.shape[1] - 1}] or one of {HEAD_FUSIONS}; got {head}")
        rows = attention[:, head, query]  # (B, T)
    return _as_map(rows[:, num_prefix_tokens:], grid_size)


def cls_attention_all(
    attentions: Sequence[torch.Tensor], num_prefix_tokens: int = 1, grid_size: tuple[int, int] | None = None
) -> torch.Tensor:
    """Every block's and head's [CLS] row over the patches: (B, layers, heads, rows, cols)."""
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    if num_prefix_tokens == 0:
        raise ValueError("this model has no [CLS] token (num_prefix_tokens=0)")
    rows = torch.stack([a[:, :, 0, num_prefix_tokens:] for a in attentions], dim=1)  # (B, L, heads, N)
    return _as_map(rows, grid_size)


def readout_attention_all(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: int = 1,
    grid_size: tuple[int, int] | None = None,
    *,
    readout: Readout = "cls",
) -> torch.Tensor:
    """What the tokens the head reads attend to, in every block and head: (B, layers, heads, rows, cols).

    With ``readout="cls"`` this is ``cls_attention_all``; with "mean", the mean of the patch rows;
    with ``readout=output.readout``, the rows weighted as the head weights the final tokens (DeiT's two
    tokens, SigLIP's pooling weights), so models without a [CLS] token get this view too.
    """
    _check_attentions(attentions, num_prefix_tokens, grid_size)
    rows = torch.stack(
        [
            _read_out(a.flatten(0, 1), _per_head(readout, a.shape[1]), num_prefix_tokens).unflatten(0, a.shape[:2])
            for a in attentions
        ],
        dim=1,
    )  # (B, L, heads, N)
    return _as_map(rows, grid_size)


def _per_head(readout: Readout, heads: int) -> Readout:
    """A (B, T) readout repeated for each head, to match attention flattened to (B * heads, T, T)."""
    return readout.repeat_interleave(heads, dim=0) if isinstance(readout, torch.Tensor) else readout


def _rollout_map(inputs: MapInputs) -> MethodOutput:
    options = inputs.options
    return MethodOutput(
        attention_rollout(
            inputs.attentions,
            **inputs.layout,
            readout=inputs.readout,
            start_layer=options.start_layer,
            head_fusion=options.head_fusion,
            discard_ratio=options.discard_ratio,
        )
    )


def _cls_map(inputs: MapInputs) -> MethodOutput:
    return MethodOutput(cls_attention(inputs.attentions, **inputs.layout, layer=-1, head="mean"))


ROLLOUT = Method(
    name="rollout",
    description="attention rollout over every block",
    paper="Abnar & Zuidema 2020",
    compute=_rollout_map,
    class_specific=False,
    cost="forward",
    cost_note="",
    caption="Bright: patches whose information flows most into what the head reads, through every block.",
)
CLS = Method(
    name="cls",
    description="the last block's [CLS] attention, mean over heads",
    compute=_cls_map,
    class_specific=False,
    cost="forward",
    cost_note="",
    caption="Bright: patches the [CLS] token attends to most in the last block.",
)


class StreamingExplainer:
    """Rollout, the head's readout rows, prefix shares and head statistics, computed block by block
    during the forward pass.

    Pass it as ``model(x, attention_sink=explainer)``: each block's (B, heads, T, T) weights are
    upcast to at least fp32 (fp64 stays fp64) and folded, with autocast off, into a running rollout
    (B, T, T), the readout rows (B, layers, heads, N), the prefix shares (B, layers, heads, P + 1) and
    the mean-distance and entropy tables, then dropped. Peak memory holds one block's attention
    instead of all of them. Every result is fp32 (fp64 for a float64 model), also when the model runs
    under ``vitviz.autocast("bf16")``, and equals the keep-everything functions applied to the
    ``output_attentions=True`` weights (upcast with ``.float()``) to float precision.

    ``readout`` is what the head reads, as in the rest of the package: "cls", "mean", or the (B, T)
    readout weights ``output.readout``. The readout rows are folded in block by block, so a tensor must
    be known before the pass: it is fixed for [CLS], mean, cls+mean and DeiT models, but for "map"
    pooling it depends on the image, so take it from an earlier pass of the same images. The rollout
    is kept whole (B, T, T) and read out only by ``results()``, with ``self.readout`` as it is then.

    One explainer serves any number of passes: block 0 starts a new pass and clears what the last one
    left, so ``results()`` describes the latest pass; blocks must then come in order (0, 1, 2, ...).
    ``progress``, if given, is called with each block's index once that block is folded in.
    """

    def __init__(
        self,
        grid_size: tuple[int, int],
        patch_size: int,
        num_prefix_tokens: int = 1,
        head_fusion: HeadFusion = "mean",
        discard_ratio: float = 0.0,
        start_layer: int = 0,
        readout: Readout = "cls",
        progress: Callable[[int], None] | None = None,
    ):
        _check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
        _check_readout(readout)
        if start_layer < 0:  # the block count is unknown until the forward pass, so only the sign is checked here
            raise ValueError(f"start_layer must be in [0, number of blocks - 1]; got {start_layer}")
        if isinstance(readout, str) and readout == "cls" and num_prefix_tokens == 0:
            raise ValueError("readout='cls' needs a [CLS] token (num_prefix_tokens >= 1); use readout='mean'")
        self.readout = readout.detach() if isinstance(readout, torch.Tensor) else readout  # "cls", "mean" or (B, T)
        self.grid_size, self.patch_size, self.num_prefix_tokens = grid_size, patch_size, num_prefix_tokens
        self.head_fusion, self.discard_ratio, self.start_layer = head_fusion, discard_ratio, start_layer
        self.progress = progress
        self._reset()

    def _reset(self) -> None:
        """Forget the last pass: block 0 of the next one starts from here."""
        self._num_blocks = 0  # blocks folded in so far in this pass; the next one expected
        self._rollout: torch.Tensor | None = None  # (B, T, T), from start_layer on
        self._readout_rows: list[torch.Tensor] = []  # per block (B, heads, N)
        self._prefix_shares: list[torch.Tensor] = []  # per block (B, heads, P + 1)
        self._distance: list[torch.Tensor] = []  # per block (B, heads)
        self._entropy: list[torch.Tensor] = []  # per block (B, heads)

    def __call__(self, layer: int, attention: torch.Tensor) -> None:
        from vitviz.explain.tokens import attention_to_prefix_tokens  # here: tokens imports this module

        if layer == 0:
            self._reset()
        elif layer != self._num_blocks:
            expected = "0" if self._num_blocks == 0 else f"{self._num_blocks}, or 0 to start a new pass"
            raise ValueError(f"blocks must be streamed in order: expected block {expected}; got block {layer}")
        # at least fp32 before any arithmetic: bf16/fp16 weights would keep the running product in half precision
        attention = attention.detach().to(torch.promote_types(attention.dtype, torch.float32))  # (B, heads, T, T)
        blocks = [attention]
        T = _check_attentions(blocks, self.num_prefix_tokens, self.grid_size)
        readout, p = self.readout, self.num_prefix_tokens
        if isinstance(readout, torch.Tensor) and readout.shape != (attention.shape[0], T):
            raise ValueError(
                f"readout weights {tuple(readout.shape)} do not match (B, T) = ({attention.shape[0]}, {T})"
            )
        # the sink runs inside the model's forward: under its autocast the products below would run in bf16
        with _autocast_off(attention.device):
            # what the tokens the head reads attend to, as readout_attention_all; clone: a slice would keep
            # this block's whole (B, heads, T, T) storage alive
            rows = _read_out(attention.flatten(0, 1), _per_head(readout, attention.shape[1]), p)  # (B * heads, N)
            self._readout_rows.append(rows.unflatten(0, attention.shape[:2]).clone())  # (B, heads, N)
            self._prefix_shares.append(attention_to_prefix_tokens(blocks, p)[:, 0])  # (B, heads, P + 1)
            self._distance.append(mean_attention_distance(blocks, self.grid_size, self.patch_size, p)[:, 0])
            self._entropy.append(attention_entropy(blocks)[:, 0])
            if layer >= self.start_layer:
                step = _residual_step(discard_weakest(fuse_heads(attention, self.head_fusion), self.discard_ratio, p))
                self._rollout = step if self._rollout is None else step @ self._rollout  # (B, T, T)
        self._num_blocks = layer + 1
        if self.progress is not None:
            self.progress(layer)

    def results(self) -> dict[str, torch.Tensor]:
        """The latest pass, fp32 (fp64 for a float64 model): rollout (B, rows, cols); readout_attention
        (B, layers, heads, rows, cols), what the tokens the head reads attend to ([CLS]'s row, the mean
        patch row or the readout-weighted rows); prefix_shares (B, layers, heads, P + 1) as
        attention_to_prefix_tokens; mean_distance and entropy (B, layers, heads)."""
        if not self._readout_rows:
            raise ValueError("no attention was streamed: pass the explainer as model(x, attention_sink=...)")
        _check_start_layer(self.start_layer, self._num_blocks)  # past the last block, nothing was rolled out
        with _autocast_off(self._rollout.device):
            rollout = _read_out(self._rollout, self.readout, self.num_prefix_tokens).clone()  # (B, N)
        return {
            "rollout": _as_map(rollout, self.grid_size),
            "readout_attention": _as_map(torch.stack(self._readout_rows, dim=1), self.grid_size),
            "prefix_shares": torch.stack(self._prefix_shares, dim=1),
            "mean_distance": torch.stack(self._distance, dim=1),
            "entropy": torch.stack(self._entropy, dim=1),
        }


def _autocast_off(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast disabled on ``device`` (a no-op where the device has no autocast)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
