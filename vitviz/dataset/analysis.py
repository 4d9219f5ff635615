"""Statistics over an index, for the Dataset page and for anyone with an index: bootstrap confidence intervals of
per-head means and how they settle as images are added, heads clustered by their dataset-averaged statistics, the
joint embedding of one head's queries and keys (AttentionViz), confusion matrices and per-class mean maps, the pooled
embeddings projected to 2-D, accuracy by slice, and each image's largest code of a feature of its block activations.

Pure numpy / scikit-learn: arrays in, arrays out; nothing here draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from vitviz.dataset.index import DatasetIndex

SETTLING_SIZES = (128, 1000, 5000)  # Dosovitskiy et al. averaged over 128 images, Raghu et al. over 5,000


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap confidence interval, each of one shape (one value per head, say)."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    images: int  # how many images (the resampled units) it rests on


def bootstrap_interval(values: np.ndarray, draws: int = 1000, level: float = 0.95, seed: int = 0) -> Interval:
    """The mean over axis 0 of ``values`` (images, ...) and its percentile bootstrap interval: images are drawn with
    replacement ``draws`` times (one image's heads stay together). Each draw is a count per image, so the memory is
    (draws, images), never (draws, images, ...)."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        raise ValueError("no images to average: the interval needs at least one")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    flat = values.reshape(n, -1)  # (images, k)
    # how often each draw picks each image, (draws, images): one bincount over all draws (a multinomial per draw
    # is 20 times slower for 5,000 images)
    picks = np.random.default_rng(seed).integers(0, n, (draws, n)) + np.arange(draws)[:, None] * n
    counts = np.bincount(picks.ravel(), minlength=draws * n).reshape(draws, n).astype(np.float64)  # BLAS
    means = counts @ flat / n  # (draws, k)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    shape = values.shape[1:]
    return Interval(flat.mean(0).reshape(shape), low.reshape(shape), high.reshape(shape), n)


def settling(
    values: np.ndarray, sizes: Sequence[int] = SETTLING_SIZES, draws: int = 1000, seed: int = 0
) -> list[Interval]:
    """How the estimate settles as images are added: the interval over the first ``size`` images of one random order,
    for each size below the count, then over all of them (so as many as exist, and nested samples)."""
    n = len(values)
    order = np.random.default_rng(seed).permutation(n)
    chosen = [s for s in sizes if s < n] + [n]
    return [bootstrap_interval(np.asarray(values)[order[:size]], draws, seed=seed) for size in chosen]


@dataclass(frozen=True)
class HeadClusters:
    labels: np.ndarray  # (layers, heads) cluster of each head, numbered by mean depth (0: the shallowest)
    order: np.ndarray  # (layers, heads) per layer, the heads in the order to draw them: grouped by cluster


def cluster_heads(profiles: np.ndarray, clusters: int) -> HeadClusters:
    """Agglomerative (Ward) clustering of heads by their dataset-averaged statistics ``profiles`` (layers, heads,
    statistics), each statistic standardised first so that none dominates by its units (pixels against nats)."""
    from sklearn.cluster import AgglomerativeClustering

    layers, heads, _ = profiles.shape
    flat = profiles.reshape(layers * heads, -1).astype(np.float64)
    if not 1 <= clusters <= len(flat):
        raise ValueError(f"clusters must be in [1, {len(flat)}] (the number of heads); got {clusters}")
    spread = flat.std(0)
    flat = (flat - flat.mean(0)) / np.where(spread > 0, spread, 1.0)
    raw = (
        np.zeros(len(flat), int)
        if clusters == 1
        else AgglomerativeClustering(n_clusters=clusters, linkage="ward").fit_predict(flat)
    )
    depth = np.repeat(np.arange(layers), heads)
    by_depth = sorted(np.unique(raw), key=lambda c: (depth[raw == c].mean(), c))
    renumber = np.empty(raw.max() + 1, int)
    renumber[by_depth] = np.arange(len(by_depth))
    labels = renumber[raw].reshape(layers, heads)
    order = np.argsort(labels, axis=1, kind="stable")
    return HeadClusters(labels, order)


@dataclass(frozen=True)
class QueryKeyEmbedding:
    points: np.ndarray  # (queries + keys, components): the queries first, then the keys
    queries: int  # how many of the points are queries
    explained: np.ndarray  # (components,) share of the variance each component explains


def align_keys(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AttentionViz's alignment of one head's queries (n, d) and keys (m, d): the keys shifted by mean(q) - mean(k),
    so the two clouds share a centre, then queries scaled by c and keys by 1 / c so their mean norms are equal. The
    shift adds q . delta to every score of a query's row, and the scaling multiplies nothing: every softmax is
    unchanged."""
    keys = keys + (queries.mean(0) - keys.mean(0))
    query_norm, key_norm = np.linalg.norm(queries, axis=1).mean(), np.linalg.norm(keys, axis=1).mean()
    scale = np.sqrt(key_norm / query_norm) if query_norm > 0 and key_norm > 0 else 1.0
    return queries * scale, keys / scale


def joint_query_key_embedding(queries: np.ndarray, keys: np.ndarray, components: int = 2) -> QueryKeyEmbedding:
    """Queries and keys of one head in one PCA space, after ``align_keys``: near points attend to each other."""
    from sklearn.decomposition import PCA

    aligned = np.concatenate(align_keys(np.asarray(queries, np.float64), np.asarray(keys, np.float64)))
    pca = PCA(n_components=min(components, *aligned.shape), random_state=0)
    points = pca.fit_transform(aligned)
    return QueryKeyEmbedding(points, len(queries), pca.explained_variance_ratio_)


def confusion_matrix(
    labels: Sequence[str], predictions: Sequence[str], counts: Sequence[int] | None = None
) -> tuple[list[str], np.ndarray]:
    """(classes, matrix): matrix[i, j] counts the images of true class classes[i] predicted as classes[j]. ``counts``
    weighs each (label, prediction) pair, so a GROUP BY's rows can be given instead of one row per image."""
    labels, predictions = [str(x) for x in labels], [str(x) for x in predictions]
    weights = np.ones(len(labels), np.int64) if counts is None else np.asarray(counts, np.int64)
    classes = sorted(set(labels) | set(predictions))
    position = {name: i for i, name in enumerate(classes)}
    matrix = np.zeros((len(classes), len(classes)), np.int64)
    np.add.at(matrix, ([position[x] for x in labels], [position[x] for x in predictions]), weights)
    return classes, matrix


def mean_map(index: DatasetIndex, image_ids: Sequence[int], kind: str = "rollout", chunk: int = 512) -> np.ndarray:
    """The mean of one stored map over these images (rows, cols), read ``chunk`` images at a time (memory stays
    bounded for a class of 100,000 images)."""
    ids = np.asarray(image_ids, dtype=np.int64)
    if len(ids) == 0:
        raise ValueError("no images to average")
    total = np.zeros(index.grid, np.float64)
    for start in range(0, len(ids), chunk):
        total += index.maps(ids[start : start + chunk], kind).sum(axis=0)
    return (total / len(ids)).astype(np.float32)


@dataclass(frozen=True)
class Projection:
    image_ids: np.ndarray  # (n,) the images projected, in the order of the points
    points: np.ndarray  # (n, components)
    explained: np.ndarray  # (components,) share of the variance each component explains


def project_embeddings(
    index: DatasetIndex, image_ids: Sequence[int], components: int = 2, chunk: int = 4096
) -> Projection:
    """The images' pooled embeddings projected by PCA onto their first ``components`` principal axes (scikit-learn,
    a fixed seed), read ``chunk`` images at a time. UMAP is not one of vitviz's dependencies: PCA is linear, so the
    distances along its axes are the embeddings' own."""
    from sklearn.decomposition import PCA

    ids = np.asarray(image_ids, dtype=np.int64)
    if len(ids) < 2:
        raise ValueError(f"a projection needs at least 2 images; got {len(ids)}")
    vectors = np.concatenate([index.embeddings(ids[s : s + chunk]) for s in range(0, len(ids), chunk)])
    pca = PCA(n_components=min(components, *vectors.shape), random_state=0)
    return Projection(ids, pca.fit_transform(vectors.astype(np.float64)), pca.explained_variance_ratio_)


OVERALL = "all images"  # the slice table's first row


def slice_accuracy(images: pd.DataFrame, by: str, bins: int = 5) -> pd.DataFrame:
    """Accuracy and mean top-class probability of each slice of ``images`` (columns ``correct``, ``probability``
    and ``by``), with its image count, after one row for all of them. A numeric ``by`` with more than ``bins``
    distinct values is cut into ``bins`` quantile bins (intervals, equal counts as far as ties allow); a missing
    value is a slice of its own ("missing"). Images without a prediction (``correct`` missing) count in no accuracy.
    Columns: slice, images, labelled (images with a correct value), accuracy, mean_probability."""
    import pandas as pd

    if by not in images.columns:
        raise ValueError(f"no column {by!r} to slice by; the columns are {', '.join(map(str, images.columns))}")
    values = images[by]
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values) and values.nunique() > bins:
        keys = pd.qcut(values, bins, duplicates="drop").astype(str)
    else:
        keys = values.astype(str)
    keys = keys.where(values.notna(), "missing")
    frame = pd.DataFrame(
        {
            "slice": keys,
            "correct": images["correct"].astype("float64"),
            "probability": images["probability"].astype("float64"),
        }
    )

    def summary(group: pd.DataFrame) -> dict:
        return {
            "images": len(group),
            "labelled": int(group["correct"].notna().sum()),
            "accuracy": group["correct"].mean(),
            "mean_probability": group["probability"].mean(),
        }

    rows = [{"slice": OVERALL, **summary(frame)}]
    rows += [{"slice": key, **summary(group)} for key, group in frame.groupby("slice", sort=True)]
    return pd.DataFrame(rows, columns=["slice", "images", "labelled", "accuracy", "mean_probability"])


def image_maxima(
    index: DatasetIndex, block: int, score: Callable[[np.ndarray], np.ndarray], images_per_chunk: int = 64
) -> np.ndarray:
    """Each image's largest value of ``score`` over its patch tokens of block ``block``'s stored activations, (count,)
    in image_id order: ``score`` maps patch tokens (m, P, D) fp32 to values (m, P) (an SAE latent's codes, say).
    Read shard after shard, ``images_per_chunk`` images at a time."""
    skip = index.manifest["activations"]["prefix_tokens"]
    out = np.zeros(index.count, np.float32)
    for shard, values in index.activation_shards(block):
        for first in range(0, shard["count"], images_per_chunk):
            tokens = np.asarray(values[first : first + images_per_chunk, skip:], np.float32)
            start = shard["start"] + first
            out[start : start + len(tokens)] = np.asarray(score(tokens)).max(axis=1)
    return out


__all__ = [
    "SETTLING_SIZES",
    "OVERALL",
    "HeadClusters",
    "Interval",
    "Projection",
    "QueryKeyEmbedding",
    "align_keys",
    "bootstrap_interval",
    "cluster_heads",
    "confusion_matrix",
    "image_maxima",
    "joint_query_key_embedding",
    "mean_map",
    "project_embeddings",
    "settling",
    "slice_accuracy",
]
