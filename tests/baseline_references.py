"""The references of the attention-flow, RISE and Captum-baseline tests, written out here from their sources:

reference_flow       Abnar & Zuidema's attention_graph_util (a networkx DiGraph of the residual-added, row-normalised
                     attention, Edmonds-Karp max flow to each input node, normalised over the inputs), with a
                     super-source fed by the readout's weights where the readout is not [CLS]'s
reference_rise_masks eclique/RISE's ``generate_masks``: scikit-image's order-1 ``resize`` in mode "reflect" is
                     SciPy's ``map_coordinates`` (order 1, mode "mirror") at ((i + 0.5) / scale - 0.5)
reference_rise       eclique/RISE's ``forward``: the probabilities of the masked images times the masks, / N / p1
reference_occlusion  each patch set to zero in turn, the target's logit drop
patch_sums           a (H, W) map summed (or averaged) over each patch of a grid, by loops
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from scipy.ndimage import map_coordinates


def reference_flow(attentions, prefix: int, readout, start_layer: int = 0, fusion: str = "mean") -> np.ndarray:
    """(B, N) float64: each image's flow to every patch over the flow to every input token."""
    B, _, T, _ = attentions[0].shape
    maps = []
    for b in range(B):
        heads = [a[b].detach().double().numpy() for a in attentions[start_layer:]]
        fused = np.stack([{"mean": h.mean(0), "max": h.max(0), "min": h.min(0)}[fusion] for h in heads])
        residual = fused + np.eye(T)
        residual = residual / residual.sum(axis=-1)[..., None]
        L = len(residual)
        graph = nx.DiGraph()
        for level in range(1, L + 1):
            for i in range(T):
                for j in range(T):
                    graph.add_edge(level * T + i, (level - 1) * T + j, capacity=residual[level - 1][i, j])
        if isinstance(readout, str) and readout == "cls":
            source = L * T  # [CLS]'s node at the last level, as in the authors' code
        else:
            weights = np.zeros(T)
            if isinstance(readout, str):  # "mean": the patches' mean
                weights[prefix:] = 1 / (T - prefix)
            else:
                weights = readout[b].detach().double().numpy()
            source = "source"
            for i in range(T):
                graph.add_edge(source, L * T + i, capacity=weights[i])
        flows = np.array(
            [nx.maximum_flow_value(graph, source, j, flow_func=nx.algorithms.flow.edmonds_karp) for j in range(T)]
        )
        maps.append(flows[prefix:] / flows.sum())
    return np.stack(maps)


def reference_rise_masks(grids: np.ndarray, shifts: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """(N, H, W): eclique/RISE's masks from given grids (N, s, s) and shifts (N, 2)."""
    N, s, _ = grids.shape
    H, W = image_size
    cell = np.ceil(np.array([H, W]) / s)
    up = ((s + 1) * cell).astype(int)
    rows = (np.arange(up[0]) + 0.5) * s / up[0] - 0.5
    cols = (np.arange(up[1]) + 0.5) * s / up[1] - 0.5
    coordinates = np.stack(np.meshgrid(rows, cols, indexing="ij"))
    masks = np.empty((N, H, W))
    for i in range(N):
        upsampled = map_coordinates(grids[i].astype(np.float64), coordinates, order=1, mode="mirror")
        x, y = shifts[i]
        masks[i] = upsampled[x : x + H, y : y + W]
    return masks


def reference_rise(model, pixels: torch.Tensor, masks: np.ndarray, p1: float) -> np.ndarray:
    """(classes, H, W): sum_i P(c | x * M_i) M_i / N / p1, one masked image at a time."""
    N, H, W = masks.shape
    total = 0
    with torch.no_grad():
        for mask in masks:
            masked = pixels * torch.from_numpy(mask).to(pixels.dtype)
            logits = model(masked).logits.double()
            probabilities = model.probabilities(logits)[0].numpy()
            total = total + probabilities[:, None, None] * mask[None]
    return total / N / p1


def reference_occlusion(model, pixels: torch.Tensor, target: int, patch: tuple[int, int]) -> np.ndarray:
    """(rows, cols): the target logit's drop when each patch of ``patch`` (height, width) pixels is set to zero."""
    ph, pw = patch
    H, W = pixels.shape[-2:]
    with torch.no_grad():
        score = float(model(pixels).logits[0, target])
        drops = np.zeros((H // ph, W // pw))
        for r in range(H // ph):
            for c in range(W // pw):
                occluded = pixels.clone()
                occluded[..., r * ph : (r + 1) * ph, c * pw : (c + 1) * pw] = 0
                drops[r, c] = score - float(model(occluded).logits[0, target])
    return drops


def patch_sums(values: np.ndarray, patch: tuple[int, int], mean: bool = False) -> np.ndarray:
    """(H, W) -> (rows, cols): every patch's pixels summed (or averaged), by loops."""
    ph, pw = patch
    H, W = values.shape
    out = np.zeros((H // ph, W // pw))
    for r in range(H // ph):
        for c in range(W // pw):
            block = values[r * ph : (r + 1) * ph, c * pw : (c + 1) * pw]
            out[r, c] = block.mean() if mean else block.sum()
    return out
