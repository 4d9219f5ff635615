"""Attention flow (Abnar & Zuidema 2020): the maximum flow from the readout to each input token through the blocks'
attention graph, rollout's companion in the paper that defined rollout.

The graph has one node per token per level (level 0: the input tokens, level l: block l's outputs). Node (l, i) has
an edge to (l - 1, j) of capacity A_l[i, j], where A_l is block l's attention with the heads fused and the residual
added, rows renormalised (rollout's factor, ``attention.residual_step``). A source feeds the last level's tokens with
the readout's weights ([CLS]: all of it to [CLS]). A token's flow is the maximum flow from the source to its input
node; the map is every patch's flow over the sum of every input token's, as the authors' code normalises it.

The flows are SciPy's ``maximum_flow`` (Dinic's algorithm), which takes integer capacities: the weights are scaled
by 2^30 and rounded, so a flow is off by at most (tokens * blocks) / 2^30 of the total. The graph has blocks x T^2
edges and each patch's flow is a maximum-flow problem of its own; past ``flow_limit`` edges (1.5 million by default:
a ViT-B/16 at 224 px has 466,000) the method is refused, with the count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vitviz.explain.attention import residual_step
from vitviz.explain.common import (
    HeadFusion,
    LayoutArgument,
    Readout,
    check_attentions,
    check_readout,
    check_start_layer,
    fuse_heads,
    token_grid,
)
from vitviz.explain.method import MapInputs, Method, MethodOutput

SCALE = 2**30  # capacities <= 1 become integers up to 2^30 (SciPy's maximum_flow counts in int32)
FLOW_LIMIT = 1_500_000


def readout_weights(readout: Readout, T: int, p: int, B: int) -> np.ndarray:
    """(B, T) float64: how much of the source's flow enters each last-level token ([CLS]'s one, the patches' mean,
    or the head's own token weights)."""
    check_readout(readout)
    if isinstance(readout, torch.Tensor):
        weights = readout.detach().double().cpu().numpy()
        if weights.shape != (B, T):
            raise ValueError(f"readout weights {weights.shape} do not match (B, T) = {(B, T)}")
        if (weights < 0).any():
            raise ValueError("attention flow reads non-negative readout weights (capacities); these have negatives")
        return weights
    weights = np.zeros((B, T))
    if readout == "cls":
        if p == 0:
            raise ValueError("readout='cls' needs a [CLS] token (num_prefix_tokens >= 1); use readout='mean'")
        weights[:, 0] = 1.0
    else:
        weights[:, p:] = 1.0 / (T - p)
    return weights


def flows_to_inputs(factors: np.ndarray, source: np.ndarray) -> np.ndarray:
    """(T,) the maximum flow from a source with capacities ``source`` (T,) into the last level, through ``factors``
    (L, T, T) (level l's node i to level l - 1's node j: factors[l - 1][i, j]), to each input node."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    L, T, _ = factors.shape
    nodes = (L + 1) * T + 1  # levels 0..L, then the source
    rows, cols, capacities = [], [], []
    for level in range(1, L + 1):
        i, j = np.nonzero(factors[level - 1] > 0)
        rows.append(level * T + i)
        cols.append((level - 1) * T + j)
        capacities.append(factors[level - 1][i, j])
    fed = np.flatnonzero(source > 0)
    rows.append(np.full(len(fed), nodes - 1))
    cols.append(L * T + fed)
    capacities.append(source[fed])
    integer = np.rint(np.concatenate(capacities) * SCALE).astype(np.int32)
    graph = csr_array((integer, (np.concatenate(rows), np.concatenate(cols))), shape=(nodes, nodes))
    graph.sum_duplicates()
    return np.array(
        [maximum_flow(graph, nodes - 1, sink, method="dinic").flow_value / SCALE for sink in range(T)],
        dtype=np.float64,
    )


def attention_flow(
    attentions: Sequence[torch.Tensor],
    num_prefix_tokens: LayoutArgument = 1,
    grid_size: tuple[int, ...] | None = None,
    *,
    readout: Readout = "cls",
    start_layer: int = 0,
    head_fusion: HeadFusion = "mean",
    flow_limit: int = FLOW_LIMIT,
) -> torch.Tensor:
    """Attention flow from the readout to each patch (the module's docstring): (B, rows, cols) float32, each image's
    map the patches' share of the flow into every input token. ``readout``, ``start_layer`` and ``head_fusion`` as in
    ``attention_rollout``; a graph of more than ``flow_limit`` edges (blocks x tokens^2) is refused in one line."""
    grid = token_grid(num_prefix_tokens, grid_size, "attention_flow")
    check_attentions(attentions, grid)
    check_start_layer(start_layer, len(attentions))
    p = grid.num_prefix_tokens
    B, _, T, _ = attentions[0].shape
    blocks = len(attentions) - start_layer
    if blocks * T * T > flow_limit:
        raise ValueError(
            f"attention flow's graph would have {blocks * T * T:,} edges ({blocks} blocks x {T} tokens^2), more than "
            f"flow_limit={flow_limit:,}: each patch is a maximum-flow problem over all of them; use rollout, or a "
            "later start_layer"
        )
    factors = torch.stack([residual_step(fuse_heads(a.float(), head_fusion)) for a in attentions[start_layer:]])
    factors = factors.detach().transpose(0, 1).double().cpu().numpy()  # (B, L, T, T)
    sources = readout_weights(readout, T, p, B)
    maps = []
    for image in range(B):
        flows = flows_to_inputs(factors[image], sources[image])
        maps.append(flows[p:] / max(flows.sum(), 1e-300))
    return grid.as_map(torch.from_numpy(np.stack(maps)).float())


def _attention_flow_map(inputs: MapInputs) -> MethodOutput:
    options = inputs.options
    return MethodOutput(
        attention_flow(
            inputs.attentions,
            **inputs.layout,
            readout=inputs.readout,
            start_layer=options.start_layer,
            head_fusion=options.head_fusion,
            flow_limit=options.flow_limit,
        )
    )


ATTENTION_FLOW = Method(
    name="attention-flow",
    description="the maximum flow from the readout to each patch through the attention graph",
    paper="Abnar & Zuidema 2020",
    compute=_attention_flow_map,
    class_specific=False,
    cost="forward",
    cost_note="one maximum-flow problem per patch on the CPU (refused past 1.5 million edges)",
    caption="Bright: patches that can carry the most attention to what the head reads, as a flow network.",
)
