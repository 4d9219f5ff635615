"""Per-head statistics as records: each one declared once, with its name, unit, description and the function that
computes it from one block's attention.

    HEAD_STATISTICS   ENTROPY, DISTANCE_PX, DISTANCE_PATCHES, PREFIX_SHARES: every record, in the order computed

``StreamingExplainer`` folds every record in block by block and returns each under its ``name``; the dataset
index stores each record's ``columns`` in its ``heads`` table (heads.parquet), and the Dataset page's Heads tab
lists them with their units. Adding a statistic is one record here and its test. Code elsewhere names a record by its
constant (``DISTANCE_PX.name``), never by a string, so each name is spelled here only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from vitviz.explain.statistics import attention_entropy, mean_attention_distance
from vitviz.explain.tokens import attention_to_prefix_tokens


@dataclass(frozen=True)
class BlockGeometry:
    """What a statistic may need to know of the input besides the attention."""

    grid_size: tuple[int, int]  # (rows, cols) of patches
    patch_size: int  # pixels per patch
    num_prefix_tokens: int  # [CLS], distillation and register tokens before the patches


@dataclass(frozen=True)
class HeadStatistic:
    """One statistic of every head of a block.

    ``compute(attention, geometry, done)`` takes one block's weights (B, heads, T, T), at least fp32, and the
    statistics of the records before it in HEAD_STATISTICS (``done``, by name, for one computed from another), and
    returns (B, heads), or (B, heads, K) for a statistic of K columns (``per_prefix``: one per prefix token, then the
    patches). ``name`` is its key in ``StreamingExplainer.results()``; ``columns(prefix_names)`` are its
    columns in the index's heads table."""

    name: str
    unit: str
    label: str  # a short label for charts and pickers
    description: str
    compute: Callable[[torch.Tensor, BlockGeometry, Mapping[str, torch.Tensor]], torch.Tensor]
    per_prefix: bool = False  # K = P + 1 columns: to_<prefix token>..., then to_patches
    # how a head with the smallest and the largest value reads ("attends nearest"); for a per_prefix statistic,
    # ``highest`` holds "{column}" for the column's name. "" where no one ranks heads by it
    lowest: str = ""
    highest: str = ""
    shown: bool = True  # False for a statistic that repeats another in another unit (not drawn twice)

    def columns(self, prefix_names: Sequence[str]) -> list[str]:
        """The stored columns: the name, or one ``to_<token>`` per prefix token and ``to_patches``."""
        if self.per_prefix:
            return [*(f"to_{name}" for name in prefix_names), "to_patches"]
        return [self.name]

    def chart_label(self) -> str:
        """``"attention entropy (nats)"``: the label with its unit."""
        return f"{self.label} ({self.unit})"

    def title(self) -> str:
        """``"Attention entropy"``: the label as a heading."""
        return self.label[:1].upper() + self.label[1:]


def _entropy(attention: torch.Tensor, geometry: BlockGeometry, done: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return attention_entropy([attention])[:, 0]


def _distance_px(attention: torch.Tensor, geometry: BlockGeometry, done: Mapping[str, torch.Tensor]) -> torch.Tensor:
    g = geometry
    return mean_attention_distance([attention], g.grid_size, g.patch_size, g.num_prefix_tokens)[:, 0]


def _distance_patches(
    attention: torch.Tensor, geometry: BlockGeometry, done: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    return done["distance_px"] / geometry.patch_size  # computed once, in pixels


def _prefix_shares(attention: torch.Tensor, geometry: BlockGeometry, done: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return attention_to_prefix_tokens([attention], geometry.num_prefix_tokens)[:, 0]


ENTROPY = HeadStatistic(
    "entropy",
    "nats",
    "attention entropy",
    "the mean entropy of its attention rows, in nats: 0 when every query attends to one token, log(T) when "
    "attention is spread evenly over all T tokens",
    _entropy,
    lowest="has the lowest entropy (attends to few patches)",
    highest="has the highest entropy (attends most evenly)",
)
DISTANCE_PX = HeadStatistic(
    "distance_px",
    "px",
    "mean attention distance",
    "the ViT paper's mean attention distance (Dosovitskiy et al. 2020, Fig. 7): the attention-weighted distance in "
    "pixels from a patch query to the patches (prefix tokens left out), averaged over the patch queries. Low: a local "
    "head, like a convolution; high: a head that looks across the image",
    _distance_px,
    lowest="attends nearest",
    highest="attends farthest away",
)
DISTANCE_PATCHES = HeadStatistic(
    "distance_patches",
    "patches",
    "mean attention distance",
    "the mean attention distance in patch steps (distance_px over the patch size)",
    _distance_patches,
    shown=False,
)
PREFIX_SHARES = HeadStatistic(
    "prefix_shares",
    "share",
    "attention to",
    "how much attention the patch queries give each prefix token ([CLS], distillation, registers) and the "
    "patches, the mean over patch queries; the shares of a head sum to 1",
    _prefix_shares,
    per_prefix=True,
    highest="attends most {column}",
)
HEAD_STATISTICS: tuple[HeadStatistic, ...] = (ENTROPY, DISTANCE_PX, DISTANCE_PATCHES, PREFIX_SHARES)


def head_statistic(name: str) -> HeadStatistic:
    """The record of ``name``; ValueError naming the known ones."""
    for statistic in HEAD_STATISTICS:
        if statistic.name == name:
            return statistic
    raise ValueError(f"no head statistic {name!r}; known: {', '.join(s.name for s in HEAD_STATISTICS)}")


def block_statistics(attention: torch.Tensor, geometry: BlockGeometry) -> dict[str, torch.Tensor]:
    """Every statistic of HEAD_STATISTICS for one block's weights (B, heads, T, T), by name, in order."""
    done: dict[str, torch.Tensor] = {}
    for statistic in HEAD_STATISTICS:
        done[statistic.name] = statistic.compute(attention, geometry, done)
    return done
