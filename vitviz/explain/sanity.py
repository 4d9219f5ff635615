"""The model-randomisation sanity check of Adebayo et al. (2018), "Sanity Checks for Saliency Maps": an
explanation of a model should change when the model's weights are replaced by random ones. Blocks are
re-initialised from the top down, cascading, and each method's map is compared with its original by
Spearman rank correlation; a map that stays put explains the image (or nothing), not the model."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

# name -> function(model, pixel_values, target) -> (B, rows, cols) map
MapMethod = Callable[[torch.nn.Module, torch.Tensor, int], torch.Tensor]


@dataclass(frozen=True)
class SanityCheck:
    depths: list[int]  # blocks re-initialised from the top: 0 (the model itself), 1 (the last block), ..., L
    correlations: dict[str, list[float]]  # per method, the Spearman correlation with its original map per depth
    threshold: float  # a correlation above this with every block randomised fails the check

    @property
    def insensitive(self) -> list[str]:
        """The methods whose map still correlates above ``threshold`` with every block randomised: they fail."""
        return [name for name, values in self.correlations.items() if values[-1] > self.threshold]


def spearman_correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation of each image's map in ``a`` with its map in ``b`` (B, ...) -> (B,) float64.

    Tied values share their average rank, as in scipy.stats.spearmanr; a constant map has no ranking and
    gives NaN.
    """
    if a.shape != b.shape:
        raise ValueError(f"maps of shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be compared")
    ranks_a, ranks_b = _average_ranks(a.flatten(1)), _average_ranks(b.flatten(1))  # (B, N) each
    ranks_a, ranks_b = ranks_a - ranks_a.mean(dim=1, keepdim=True), ranks_b - ranks_b.mean(dim=1, keepdim=True)
    return (ranks_a * ranks_b).sum(dim=1) / (ranks_a.norm(dim=1) * ranks_b.norm(dim=1))


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks along the last axis of (B, N), ties given the mean of the ranks they span."""
    sorted_values, order = values.double().sort(dim=-1)
    ranks = torch.empty(values.shape, dtype=torch.float64, device=values.device)
    for row in range(values.shape[0]):
        _, group, counts = torch.unique_consecutive(sorted_values[row], return_inverse=True, return_counts=True)
        last = counts.cumsum(0)  # each group of equal values holds ranks last - count + 1 .. last
        ranks[row, order[row]] = (last - (counts - 1) / 2).double()[group]
    return ranks


def cascading_randomization(
    model: torch.nn.Module,
    pixel_values: torch.Tensor,
    target: int,
    methods: Mapping[str, MapMethod],
    seed: int = 0,
    threshold: float = 0.5,
) -> SanityCheck:
    """Adebayo et al.'s cascading randomisation over the encoder blocks, on a copy of ``model``.

    Depth d re-initialises the last d blocks (depth 1: the last block, then the last two, ..., all L) with the
    weights a fresh model of the same class and config starts from, drawn once from ``seed`` (the global
    random state is left as it was). At each depth every method runs on the copy and its map is compared
    with the map it gives for the intact model: the Spearman correlation (``spearman_correlation``) averaged
    over the images of ``pixel_values``. Depth 0 reruns the intact copy, so 1 there means the method is
    deterministic. The head, the final norm and the embeddings keep their weights.
    """
    num_layers = len(model.blocks)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh_blocks = type(model)(model.config).blocks  # the model's own initialisation
    randomized = copy.deepcopy(model)
    originals = {name: method(model, pixel_values, target).detach() for name, method in methods.items()}
    correlations: dict[str, list[float]] = {name: [] for name in methods}
    for depth in range(num_layers + 1):
        if depth > 0:
            randomized.blocks[num_layers - depth].load_state_dict(fresh_blocks[num_layers - depth].state_dict())
        for name, method in methods.items():
            randomized_map = method(randomized, pixel_values, target).detach()
            correlations[name].append(float(spearman_correlation(originals[name], randomized_map).mean()))
    return SanityCheck(depths=list(range(num_layers + 1)), correlations=correlations, threshold=threshold)
