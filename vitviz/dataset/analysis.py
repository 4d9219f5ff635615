"""Statistics over an index, for the Dataset page and for anyone with an index: bootstrap confidence intervals of
per-head means and how they settle as images are added, heads clustered by their dataset-averaged statistics, the
joint embedding of one head's queries and keys (AttentionViz), confusion matrices and per-class mean maps, the pooled
embeddings projected to 2-D (PCA or t-SNE), accuracy by slice of one or two columns with Wilson score intervals, and
each image's largest code of a feature of its block activations.

Pure numpy / scikit-learn: arrays in, arrays out; nothing here draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal

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


ProjectionMethod = Literal["pca", "tsne"]
PROJECTION_METHODS: tuple[str, ...] = ("pca", "tsne")
TSNE_INPUT_DIMENSIONS = 50  # t-SNE runs on the first 50 principal components (scikit-learn's own advice)


@dataclass(frozen=True)
class Projection:
    image_ids: np.ndarray  # (n,) the images projected, in the order of the points
    points: np.ndarray  # (n, components)
    explained: np.ndarray  # (components,) share of the variance each component explains; empty for t-SNE
    method: str = "pca"  # PROJECTION_METHODS


def project_embeddings(
    index: DatasetIndex,
    image_ids: Sequence[int],
    components: int = 2,
    chunk: int = 4096,
    method: ProjectionMethod = "pca",
) -> Projection:
    """The images' pooled embeddings in ``components`` dimensions, read ``chunk`` images at a time, by ``method``:

    - ``"pca"``: their first principal axes (scikit-learn, a fixed seed). Linear: distances along the axes are the
      embeddings' own, and the share of variance each axis explains is known.
    - ``"tsne"``: t-SNE (van der Maaten & Hinton 2008; scikit-learn's Barnes-Hut ``TSNE``, initialised by PCA, a
      fixed seed) on the first TSNE_INPUT_DIMENSIONS principal components. Neighbourhoods are kept; distances between
      clusters and cluster sizes mean little. Its cost grows as n log n: bound n (the page draws 3,000 points).

    UMAP would need umap-learn with numba and llvmlite (about 64 MB of wheels, and a JIT compile on first use): it is
    not one of vitviz's dependencies (docs/dataset-index.md)."""
    from sklearn.decomposition import PCA

    if method not in PROJECTION_METHODS:
        raise ValueError(f"unknown projection {method!r}; choose one of {', '.join(PROJECTION_METHODS)}")
    ids = np.asarray(image_ids, dtype=np.int64)
    if len(ids) < 2:
        raise ValueError(f"a projection needs at least 2 images; got {len(ids)}")
    vectors = np.concatenate([index.embeddings(ids[s : s + chunk]) for s in range(0, len(ids), chunk)])
    vectors = vectors.astype(np.float64)
    if method == "pca":
        pca = PCA(n_components=min(components, *vectors.shape), random_state=0)
        return Projection(ids, pca.fit_transform(vectors), pca.explained_variance_ratio_, "pca")
    from sklearn.manifold import TSNE

    reduced = PCA(n_components=min(TSNE_INPUT_DIMENSIONS, *vectors.shape), random_state=0).fit_transform(vectors)
    # perplexity must stay below the number of points; 30 (scikit-learn's default) for any sizeable sample
    perplexity = float(min(30.0, max(1.0, (len(ids) - 1) / 3)))
    tsne = TSNE(n_components=components, init="pca", perplexity=perplexity, random_state=0)
    return Projection(ids, tsne.fit_transform(reduced), np.zeros(0), "tsne")


OVERALL = "all images"  # the slice table's first row
SLICE_STATISTICS = (
    "images",
    "labelled",
    "correct_images",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "mean_probability",
    "probability_low",
    "probability_high",
)
SLICE_JOIN = " × "  # between a two-column slice's values in its name


def wilson_interval(successes, trials, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of a proportion (Wilson 1927; Newcombe 1998's method 3), elementwise. With
    p = successes / trials, n = trials and z the normal quantile of 1 - (1 - level) / 2 (1.95996 for 95 %):

        centre = (p + z² / 2n) / (1 + z² / n)
        half   = z / (1 + z² / n) * sqrt(p (1 - p) / n + z² / 4n²)
        (low, high) = (centre - half, centre + half)

    Unlike p ± z sqrt(p (1 - p) / n) it stays inside [0, 1] and is not empty at p = 0 or 1 (0 of 20: 0 to 0.161).
    ``trials`` of 0 give NaN."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    k, n = np.asarray(successes, np.float64), np.asarray(trials, np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("successes must be between 0 and the number of trials")
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denominator = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denominator
        half = z / denominator * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def mean_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval of a mean, mean ± t(n - 1) s / sqrt(n), NaNs left out; NaN bounds
    below 2 values. For the mean top-class probability of a slice (a mean of values in [0, 1], not a proportion)."""
    from scipy.stats import t

    x = np.asarray(values, np.float64)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    half = float(t.ppf(1 - (1 - level) / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return mean, mean - half, mean + half


def slice_keys(images: pd.DataFrame, by: str | Sequence[str], bins: int = 5) -> pd.DataFrame:
    """Each image's slice: one text column per column of ``by`` (one or two). A numeric column with more than
    ``bins`` distinct values is cut into ``bins`` quantile bins (intervals, equal counts as far as ties allow); a
    missing value is a slice of its own ("missing")."""
    import pandas as pd

    columns = [by] if isinstance(by, str) else list(by)
    if not 1 <= len(columns) <= 2:
        raise ValueError(f"slice by one column or two; got {len(columns)}")
    if len(set(columns)) < len(columns):
        raise ValueError(f"slice by two different columns; got {columns[0]!r} twice")
    keys = {}
    for name in columns:
        if name not in images.columns:
            raise ValueError(f"no column {name!r} to slice by; the columns are {', '.join(map(str, images.columns))}")
        values = images[name]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric and values.nunique() > bins:
            key = pd.qcut(values, bins, duplicates="drop").astype(str)
        else:
            key = values.astype(str)
        keys[name] = key.where(values.notna(), "missing")
    return pd.DataFrame(keys, index=images.index)


def slice_summary(images: pd.DataFrame, by: str | Sequence[str], bins: int = 5, level: float = 0.95) -> pd.DataFrame:
    """Accuracy and mean top-class probability of each slice of ``images`` (columns ``correct``, ``probability``
    and those of ``by``: one column, or two for their crossing, label x prediction say), each with its ``level``
    interval: Wilson's for the accuracy (``wilson_interval``), Student's t for the mean probability
    (``mean_interval``). The first row is all images; slices are those of ``slice_keys``, in sorted order. Images
    without a prediction (``correct`` missing) count in no accuracy.
    Columns: slice (its values joined by " × "), one per column of ``by``, then SLICE_STATISTICS."""
    import pandas as pd

    columns = [by] if isinstance(by, str) else list(by)
    clash = [c for c in columns if c in SLICE_STATISTICS or c == "slice"]
    if clash:
        raise ValueError(f"cannot slice by {clash[0]!r}: the slice table has a statistic of that name")
    keys = slice_keys(images, columns, bins)
    correct = images["correct"].astype("float64")
    probability = images["probability"].astype("float64")

    def summary(rows: pd.Index) -> dict:
        right = correct.loc[rows]
        labelled, hits = int(right.notna().sum()), int(right.sum())
        low, high = wilson_interval(hits, labelled, level) if labelled else (np.nan, np.nan)
        mean, p_low, p_high = mean_interval(probability.loc[rows], level)
        return {
            "images": len(rows),
            "labelled": labelled,
            "correct_images": hits,
            "accuracy": hits / labelled if labelled else np.nan,
            "accuracy_low": float(low),
            "accuracy_high": float(high),
            "mean_probability": mean,
            "probability_low": p_low,
            "probability_high": p_high,
        }

    rows = [{"slice": OVERALL, **dict.fromkeys(columns), **summary(images.index)}]
    for values, group in keys.groupby(columns, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        named = dict(zip(columns, values))
        rows.append({"slice": SLICE_JOIN.join(values), **named, **summary(group.index)})
    return pd.DataFrame(rows, columns=["slice", *columns, *SLICE_STATISTICS])


def slice_accuracy(images: pd.DataFrame, by: str, bins: int = 5) -> pd.DataFrame:
    """``slice_summary`` by one column without the intervals. Columns: slice, images, labelled (images with a
    correct value), accuracy, mean_probability."""
    table = slice_summary(images, by, bins)
    return table[["slice", "images", "labelled", "accuracy", "mean_probability"]]


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
    "PROJECTION_METHODS",
    "SLICE_STATISTICS",
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
    "mean_interval",
    "mean_map",
    "project_embeddings",
    "settling",
    "slice_accuracy",
    "slice_keys",
    "slice_summary",
    "wilson_interval",
]
