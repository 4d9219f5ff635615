"""What the Dataset page's views compute from an index, each in one call the page's cache keeps (cache/dataset.py):
the confusion counts, a class's mean map, the embedding map's projected sample, the heads table's means over all
images, one statistic per image of a seeded sample, and one head's queries and keys over a sample of photos (the
index stores none: the index's model runs again, up to that head's block).

The statistics themselves are vitviz.dataset.analysis's; these functions add the SQL that picks the images, so the
page only lays out what they return.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from vitviz import explain
from vitviz.dataset.analysis import (
    SETTLING_SIZES,
    Projection,
    confusion_matrix,
    joint_query_key_embedding,
    mean_map,
    project_embeddings,
)
from vitviz.dataset.index import DatasetIndex
from vitviz.model import ViT
from vitviz.preprocessing import load_image


def quote(text: str) -> str:
    """A SQL string literal (the query is read-only anyway; quoting keeps a class named o'clock working)."""
    return "'" + str(text).replace("'", "''") + "'"


def confusion_counts(index: DatasetIndex) -> tuple[list[str], np.ndarray]:
    """(classes, matrix) over the labelled readable images (analysis.confusion_matrix), counted by one GROUP BY."""
    pairs = index.query(
        "SELECT label, prediction, count(*) AS n FROM images WHERE label IS NOT NULL AND error IS NULL GROUP BY ALL",
        limit=1_000_000,
    )
    return confusion_matrix(pairs["label"], pairs["prediction"], pairs["n"])


def class_mean_map(index: DatasetIndex, label: str, kind: str) -> tuple[np.ndarray, int]:
    """The stored map ``kind`` averaged over the readable images labelled ``label`` (analysis.mean_map), and how many
    they are."""
    ids = index.query(
        f"SELECT image_id FROM images WHERE label = {quote(label)} AND error IS NULL ORDER BY image_id",
        limit=max(1, index.count),
    )["image_id"]
    return mean_map(index, ids.tolist(), kind), len(ids)


def embedding_sample(index: DatasetIndex, most: int, method: str = "pca") -> tuple[Projection, pd.DataFrame]:
    """The readable images' pooled embeddings by ``method``, PCA or t-SNE (analysis.project_embeddings), and their
    rows of the images table in the same order: a seeded random ``most`` of them when there are more."""
    images = index.query("SELECT * FROM images WHERE error IS NULL ORDER BY image_id", limit=index.count)
    if len(images) > most:
        images = images.sample(most, random_state=0).sort_values("image_id")
    projection = project_embeddings(index, images["image_id"].to_numpy(), method=method)
    return projection, images.reset_index(drop=True)


def head_means(index: DatasetIndex, columns: tuple[str, ...]) -> pd.DataFrame:
    """Each of the heads table's ``columns`` averaged over all images, one row per (layer, head)."""
    averages = ", ".join(f"avg({c}) AS {c}" for c in columns)
    return index.query(f"SELECT layer, head, {averages} FROM heads GROUP BY layer, head ORDER BY layer, head")


def per_image(index: DatasetIndex, column: str) -> np.ndarray:
    """``column`` of the heads table per image of a seeded sample of up to max(SETTLING_SIZES) readable images:
    (images, layers, heads), for bootstrap intervals and their settling; NaN at a (layer, head) the table has no row
    for (a Swin's early stages have fewer heads than the layout's most)."""
    ids = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id", limit=max(1, index.count))
    ids = ids["image_id"].to_numpy()
    most = max(SETTLING_SIZES)
    if len(ids) > most:
        ids = np.sort(np.random.default_rng(0).choice(ids, most, replace=False))
    layers, heads = index.layout["layers"], index.layout["heads"]
    rows = len(ids) * layers * heads
    listed = ", ".join(str(int(i)) for i in ids)
    found = index.query(  # a semi join on a list: ten times faster in DuckDB than IN (5,000 literals)
        f"SELECT h.image_id, h.layer, h.head, h.{column} FROM heads h "
        f"SEMI JOIN (SELECT unnest([{listed}]) AS image_id) USING (image_id) ORDER BY h.image_id, h.layer, h.head",
        limit=max(1, rows),
    )
    values = found[column].to_numpy(np.float64)
    if len(values) == rows:  # every head of every layer: the rows are in order already
        return values.reshape(len(ids), layers, heads)
    out = np.full((len(ids), layers, heads), np.nan)
    out[np.searchsorted(ids, found["image_id"].to_numpy()), found["layer"].to_numpy(), found["head"].to_numpy()] = (
        values
    )
    return out


def query_key_points(
    model: ViT, photos: Sequence[bytes], sample: Sequence[tuple[int, str]], layer: int, head: int, precision: str
) -> pd.DataFrame:
    """One row per patch query and per patch key of the ``photos`` (the image files of ``sample``'s (image_id, path),
    in its order): its coordinates pc1, pc2 in AttentionViz's joint PCA (analysis.joint_query_key_embedding), kind
    ("query" or "key"), row, column, image and path; ``attrs["explained"]``: each component's share of the variance.
    The model runs up to ``layer`` only (explain.head_queries_and_keys), in ``precision``."""
    pixels = torch.stack([model.transform(load_image(data)) for data in photos])
    queries, keys = explain.head_queries_and_keys(model, pixels, layer, head, precision)  # (B, N, head_dim) each
    batch, patches, _ = queries.shape
    joint = joint_query_key_embedding(
        queries.reshape(-1, queries.shape[-1]).numpy(), keys.reshape(-1, keys.shape[-1]).numpy()
    )
    cols = pixels.shape[-1] // model.config.patch_size
    position = np.tile(np.arange(patches), batch)
    image_ids = np.repeat([image_id for image_id, _ in sample], patches)
    paths = np.repeat([path for _, path in sample], patches)
    half = pd.DataFrame({"row": position // cols, "column": position % cols, "image": image_ids, "path": paths})
    frame = pd.concat([half.assign(kind="query"), half.assign(kind="key")], ignore_index=True)
    frame["pc1"], frame["pc2"] = joint.points[:, 0], joint.points[:, 1] if joint.points.shape[1] > 1 else 0.0
    frame.attrs["explained"] = joint.explained.tolist()
    return frame
