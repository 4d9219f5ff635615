"""Attention maps of long token sequences (a video's 8,192 tubelets) in bounded memory: never a block's (heads, T, T).

The forward pass runs with the fused kernel (SDPA, no weights), keeping only what each attention module received:
its normed input (sequences, L, D) and its controls (rotary embedding, masks), by a pre-hook (``capture``). An
attention is then recomputed from that input through the module's own ``queries_keys_values``, a chunk of query
rows at a time (``row_chunks``: (sequences, heads, c, L) under a byte budget), and folded into a row vector over
the clip's tokens (B, T) at once (``fold``). Nothing larger than a chunk exists.

An attention module's sequences are a clip's tokens, or part of them (``Site``): a joint block's one sequence of T
tokens; a divided block's (TimeSformer) temporal attention, one sequence per patch over its frames, and spatial
attention, one per frame over [CLS] and that frame's patches. Each site maps its sequences' positions to the clip's
tokens (``Site.tokens``), which embeds its attention in the (T, T) token space, as TimeSformer #106 composes them:
[CLS]'s copies in the spatial sequences are averaged back (its row is their mean), and a token a site leaves out
([CLS] in the temporal attention) keeps an identity row.

    rollout     r <- 0.5 r + 0.5 r mean_h(A), sites from the last to the first, r starting at the readout weights:
                the readout's row of prod normalize_rows(mean_h A + I) (Abnar & Zuidema 2020), later sites on the
                left, as ``attention_rollout`` (a divided block: (0.5 S + 0.5 I)(0.5 Tm + 0.5 I)).
    relevance   r <- r + r mean_h((dA ⊙ A)^+), folded in during the backward pass itself (``RelevanceRow``).

Why a row suffices (Chefer et al. 2021a): the relevance is R = (I + Ā_{L-1}) ... (I + Ā_0), Ā_l = mean_h((∂y/∂A_l ⊙
A_l)^+), and the map is the readout's row w^T R. Read from the left, w^T R = ((w^T (I + Ā_{L-1})) (I + Ā_{L-2})) ...:
a (1, T) row times one (T, T) factor per step, last factor first, which is the order in which the backward pass
reaches the blocks. Each row product splits over query rows i, (r Ā)_j = Σ_i r_i Ā_ij, so a chunk of rows at a time
adds its share. The attention's gradient is not formed whole either: a head's output is O = A V, so ∂y/∂A = dO V^T,
with dO = ∂y/∂O the gradient at the heads' joined output before the projection (a hook on that tensor, the input of
the module's ``norm``), and a chunk of its rows is dO[rows] V^T. In a spatial sequence, [CLS]'s copy carries its own
gradient (the average's 1/F is in it), so in relevance the copies' rows are summed, not averaged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, NamedTuple

import torch
from torch import nn

from vitviz.model import AttentionControls

Progress = Callable[[int, int], None]  # progress(done, total): the page's bar
# one chunk of attention rows (sequences, heads, c, L) in fp32: 32 MB, glibc's largest mmap threshold, so that a chunk
# freed and allocated again comes back from the heap instead of being mapped and page-faulted anew
CHUNK_BYTES = 32 * 2**20
SiteKind = Literal["joint", "temporal", "spatial"]


class VideoMapError(ValueError):
    """A map over space and time that cannot be computed for this model or input: one line that says why."""


class Site(NamedTuple):
    """One attention module and how its sequences sit among a clip's tokens."""

    attention: nn.Module  # a vitviz Attention (``queries_keys_values``)
    kind: SiteKind  # joint: (B, T); temporal: (B * HW, frames); spatial: (B * frames, 1 + HW)
    block: int  # the index of the block it belongs to
    frames: int = 1  # token frames (divided blocks)

    def tokens(self, batch: int, count: int, device: torch.device) -> torch.Tensor:
        """int64 (sequences, L): the flat index b * T + t of the clip token at each position of each sequence."""
        if self.kind == "joint":
            return torch.arange(batch * count, device=device).reshape(batch, count)
        F = self.frames
        N = (count - 1) // F  # patches per frame; [CLS] first, then token 1 + n * F + t (patch-major)
        start = torch.arange(batch, device=device)[:, None, None] * count
        n, t = torch.arange(N, device=device), torch.arange(F, device=device)
        patches = start + 1 + n[:, None] * F + t[None, :]  # (B, N, F)
        if self.kind == "temporal":  # sequence b * N + n: patch n's frames
            return patches.reshape(batch * N, F)
        frame_patches = patches.transpose(1, 2)  # (B, F, N): sequence b * F + t: [CLS], then frame t's patches
        cls = start.expand(batch, F, 1)
        return torch.cat([cls, frame_patches], dim=2).reshape(batch * F, 1 + N)

    def query_scale(self, length: int, rule: Literal["rollout", "relevance"], device: torch.device) -> torch.Tensor:
        """(L,) what each position's query row counts for in the token space: 1, but a spatial sequence's [CLS] copy
        counts 1 / frames in rollout (its row is the copies' mean; relevance's gradients carry that factor)."""
        scale = torch.ones(length, device=device)
        if self.kind == "spatial" and rule == "rollout":
            scale[0] = 1.0 / self.frames
        return scale


class SiteInput(NamedTuple):
    """What one attention module received in the forward pass."""

    normed: torch.Tensor  # (sequences, L, D) detached
    controls: AttentionControls


class _Stop(Exception):
    """Raised by a pre-hook once the block asked for has its inputs: the rest of the pass is not needed."""


def sites(model: nn.Module) -> list[Site]:
    """Every attention module of the model's blocks in forward order (a divided block: temporal, then spatial)."""
    found = []
    frames = model.config.token_frames
    for index, block in enumerate(model.blocks):
        if hasattr(block, "temporal_attn"):  # model/divided.py
            found += [Site(block.temporal_attn, "temporal", index, frames), Site(block.attn, "spatial", index, frames)]
        else:
            found.append(Site(block.attn, "joint", index))
    return found


def pooler_sites(model: nn.Module) -> list[Site]:
    """The self-attention blocks of an attentive pooler (V-JEPA 2), numbered after the model's blocks."""
    pooler = getattr(model, "attn_pool", None)
    blocks = getattr(pooler, "blocks", ())
    return [Site(block.attn, "joint", len(model.blocks) + i) for i, block in enumerate(blocks)]


@contextmanager
def capture(
    chosen: list[Site],
    store: dict[Site, SiteInput],
    *,
    stop: bool = False,
    on_block: Callable[[int], None] | None = None,
):
    """While open, each chosen site's input goes into ``store``; ``on_block(index)`` is called as each block's last
    site receives its input; with ``stop`` the pass stops once every chosen site has (``_Stop``, caught by
    ``forward_until``)."""
    last = {site.block: site for site in chosen}

    def hook(site: Site):
        def pre_hook(module, args, kwargs):
            normed = args[0] if args else kwargs["x"]
            controls = args[1] if len(args) > 1 else kwargs.get("controls", AttentionControls())
            store[site] = SiteInput(normed.detach(), controls)
            if last[site.block] is site and on_block is not None:
                on_block(site.block)
            if stop and len(store) == len(chosen):
                raise _Stop

        return pre_hook

    handles = [site.attention.register_forward_pre_hook(hook(site), with_kwargs=True) for site in chosen]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


def forward_until(model: nn.Module, clip: torch.Tensor, chosen: list[Site]) -> dict[Site, SiteInput]:
    """The chosen sites' inputs for ``clip``: the forward pass (SDPA) until the last of them and no further."""
    store: dict[Site, SiteInput] = {}
    with torch.no_grad(), capture(chosen, store, stop=True):
        try:
            model(clip)
        except _Stop:
            pass
    return store


def row_chunks(sequences: int, heads: int, length: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[slice]:
    """Slices of query rows such that one chunk of fp32 weights (sequences, heads, rows, length) fits
    ``chunk_bytes`` (at least one row a chunk)."""
    rows = max(1, chunk_bytes // (4 * sequences * heads * length))
    for start in range(0, length, rows):
        yield slice(start, min(start + rows, length))


def attention_rows(q: torch.Tensor, k: torch.Tensor, rows: slice, key_mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q[rows] k^T / sqrt(head_dim)) over the keys, (S, heads, c, L) in at least fp32: rows of the module's
    attention weights (what ``output_attentions`` returns), a key masked False getting none."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = (q[:, :, rows].to(dtype) * q.shape[-1] ** -0.5) @ k.to(dtype).transpose(-2, -1)  # (S, heads, c, L)
    if key_mask is not None:
        scores.masked_fill_(~key_mask[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1)


def fold(
    rows: torch.Tensor,
    site: Site,
    captured: SiteInput,
    *,
    rule: Literal["rollout", "relevance"] = "rollout",
    gradient: torch.Tensor | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> torch.Tensor:
    """Row vectors (B, K, T) times the site's attention embedded in the token space, per head: (B, K, heads, T) fp32,
    the heads not yet averaged. With ``gradient`` (the heads' joined output's, (S, L, D)), the attention is replaced
    by (dO V^T ⊙ A)^+ (relevance). Tokens outside every sequence get nothing here (their identity is the caller's);
    chunks of query rows that no vector reads are skipped (one token's row costs one chunk)."""
    normed, controls = captured
    B, K, T = rows.shape
    with torch.no_grad():
        q, k, v = site.attention.queries_keys_values(normed, controls.rope)
        S, heads, L, head_dim = q.shape
        dtype = torch.promote_types(q.dtype, torch.float32)
        tokens = site.tokens(B, T, rows.device)  # (S, L)
        flat = rows.float().transpose(0, 1).reshape(K, B * T)
        queries = flat[:, tokens] * site.query_scale(L, rule, rows.device)  # (K, S, L)
        if gradient is not None:
            d_out = gradient.reshape(S, L, heads, head_dim).transpose(1, 2).to(dtype)  # (S, heads, L, head_dim)
            if controls.head_mask is not None:  # out = mask * (A V): the weights' gradient is mask * dO V^T
                d_out = d_out * controls.head_mask[:, :, None, None].to(dtype)
            v_t = v.to(dtype).transpose(-2, -1)
        total = torch.zeros(K, S, heads, L, dtype=torch.float32, device=rows.device)
        for chunk in row_chunks(S, heads, L, chunk_bytes):
            if not queries[:, :, chunk].any():
                continue
            weights = attention_rows(q, k, chunk, controls.key_mask)  # (S, heads, c, L)
            if gradient is not None:
                weights = (d_out[:, :, chunk] @ v_t).mul_(weights).clamp_(min=0)
            # (S, 1, K, c) @ (S, heads, c, L): a batched matrix product (an einsum here ran 8x slower on a CPU)
            total += torch.matmul(queries[:, :, chunk].permute(1, 0, 2)[:, None], weights).permute(2, 0, 1, 3)
        out = torch.zeros(K, heads, B * T, dtype=torch.float32, device=rows.device)
        out.index_add_(2, tokens.reshape(-1), total.permute(0, 2, 1, 3).reshape(K, heads, S * L))
    return out.reshape(K, heads, B, T).permute(2, 0, 1, 3)


def covered(site: Site, batch: int, count: int, device: torch.device) -> torch.Tensor:
    """(B, T) booleans: the tokens some sequence of the site holds ([CLS] is outside a temporal attention)."""
    mask = torch.zeros(batch * count, dtype=torch.bool, device=device)
    mask[site.tokens(batch, count, device).reshape(-1)] = True
    return mask.reshape(batch, count)


def rollout_step(row: torch.Tensor, site: Site, captured: SiteInput, chunk_bytes: int = CHUNK_BYTES) -> torch.Tensor:
    """r (0.5 mean_h A + 0.5 I) for one site, A embedded in the token space (an identity row for a token outside it)."""
    attended = fold(row[:, None], site, captured, chunk_bytes=chunk_bytes)[:, 0].mean(dim=1)
    outside = ~covered(site, *row.shape, row.device)
    attended = torch.where(outside, row, attended)
    return 0.5 * attended + 0.5 * row


def rollout_row(
    chosen: list[Site],
    inputs: dict[Site, SiteInput],
    readout: torch.Tensor,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    on_block: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """The readout's row of the rollout through the chosen sites (B, T), fp32: r = readout; for each site from the
    last, r <- r (0.5 A + 0.5 I), A recomputed from the site's input a chunk of rows at a time. (mean_h A has rows
    summing to 1, so adding I and renormalising the rows is this average.)"""
    row = readout.detach().float()
    for position in range(len(chosen) - 1, -1, -1):
        site = chosen[position]
        row = rollout_step(row, site, inputs[site], chunk_bytes)
        first_of_block = position == 0 or chosen[position - 1].block != site.block
        if on_block is not None and first_of_block:
            on_block(site.block)
    return row


class RelevanceRow:
    """Chefer et al.'s relevance row folded in during the backward pass (see the module's docstring).

    Open ``capturing(sites)`` around the forward pass, set ``row`` to the readout weights once the forward pass is
    done, then run the backward pass of the target's score: as the gradient reaches each site's attention output,
    r <- r + r mean_h((dO V^T ⊙ A)^+), a chunk of rows at a time; ``row`` is the map's row (B, T) when it ends. The
    only thing kept per site is its normed input, which autograd keeps anyway for the q/k/v projection."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES, on_block: Callable[[int], None] | None = None):
        self.chunk_bytes, self.on_block = chunk_bytes, on_block
        self.row: torch.Tensor | None = None
        self.inputs: dict[Site, SiteInput] = {}
        self._first: dict[int, Site] = {}

    @contextmanager
    def capturing(self, chosen: list[Site], on_block: Callable[[int], None] | None = None):
        """Hooks on the chosen sites for one forward pass: their inputs, and a gradient hook on each attention's
        joined output (``on_block(index)`` as each block's inputs arrive)."""
        self._first = {}
        for site in chosen:
            self._first.setdefault(site.block, site)
        handles = [site.attention.norm.register_forward_pre_hook(self._output_hook(site)) for site in chosen]
        try:
            with capture(chosen, self.inputs, on_block=on_block):
                yield self
        finally:
            for handle in handles:
                handle.remove()

    def _output_hook(self, site: Site):
        def pre_hook(module, args):
            joined = args[0]  # (S, L, D): the heads' outputs side by side, before the projection
            if joined.requires_grad:
                joined.register_hook(lambda gradient: self._fold(site, gradient))

        return pre_hook

    def _fold(self, site: Site, gradient: torch.Tensor) -> None:
        if self.row is None:
            raise VideoMapError("set RelevanceRow.row to the readout weights before the backward pass")
        captured, chunk_bytes = self.inputs.pop(site), self.chunk_bytes  # each site is folded once: let it go
        added = fold(self.row[:, None], site, captured, rule="relevance", gradient=gradient, chunk_bytes=chunk_bytes)
        self.row = self.row + added[:, 0].mean(dim=1)
        if self.on_block is not None and self._first[site.block] is site:
            self.on_block(site.block)


def check_relevance_controls(model: nn.Module) -> None:
    """Heads knocked out with their batch mean make a head's output depend on the other clips' weights: the row
    fold assumes each clip's own; refuse that one case in a line."""
    interventions = getattr(model, "interventions", None)
    if interventions is not None and interventions.heads and interventions.ablation == "mean":
        raise VideoMapError(
            "relevance over a video is not computed with heads knocked out by their batch mean; use ablation='zero'"
        )


@contextmanager
def cross_attention_start(cross: nn.Module, relevance: RelevanceRow):
    """V-JEPA 2's pooler (model/attentive_pooler.py): its query reads the tokens through one cross-attention, so the
    relevance row starts there, at mean_h((∂y/∂A ⊙ A)^+) of that query's weights (B, T), as Chefer et al. treat a
    query that attends to other tokens; it then continues through the pooler's blocks and the encoder's. The
    gradient of the query's attended value is that of the pooled vector before its MLP (a hook on ``norm2``'s input),
    and ∂y/∂A = dO V^T as for self-attention."""
    seen: dict[str, torch.Tensor] = {}

    def keep_inputs(module, args, kwargs):  # forward(query, x, key_mask=None)
        seen["query"], seen["tokens"] = args[0].detach(), args[1].detach()
        seen["key_mask"] = args[2] if len(args) > 2 else kwargs.get("key_mask")

    def start(gradient: torch.Tensor) -> None:  # (B, D): the heads' attended values side by side
        with torch.no_grad():
            q, k = cross.queries_keys(seen["query"], seen["tokens"])  # (1, heads, 1, hd), (B, heads, T, hd)
            B, heads, T, head_dim = k.shape
            v = cross.v(cross.norm1(seen["tokens"])).reshape(B, T, heads, head_dim).transpose(1, 2)
            weights = attention_rows(q.expand(B, -1, -1, -1), k, slice(0, 1), seen["key_mask"])  # (B, heads, 1, T)
            d_out = gradient.reshape(B, heads, 1, head_dim).to(weights.dtype)
            products = (d_out @ v.to(weights.dtype).transpose(-2, -1)).mul_(weights).clamp_(min=0)
            relevance.row = products.mean(dim=1)[:, 0]

    def hook_pooled(module, args):
        if args[0].requires_grad:
            args[0].register_hook(start)

    handles = [
        cross.register_forward_pre_hook(keep_inputs, with_kwargs=True),
        cross.norm2.register_forward_pre_hook(hook_pooled),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
