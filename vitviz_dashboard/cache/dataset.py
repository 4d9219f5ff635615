"""What the Dataset page keeps between runs: the open index (shared by every session), its photo reader, and what is
computed from it, keyed by the index's key (its folder and its manifest's stamp, ``opening.index_key``).

The index and the reader are resources (one shared object each, ``st.cache_resource``); everything computed from
them is data in the page's byte-bounded store (``budget.kept``), like the Photo page's results.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import streamlit as st
import torch
from PIL import Image

import vitviz
from vitviz import explain
from vitviz.dataset import DatasetIndex, open_index
from vitviz.dataset.analysis import SETTLING_SIZES, joint_query_key_embedding
from vitviz.dataset.photos import photo_reader
from vitviz.preprocessing import load_image
from vitviz_dashboard.cache.budget import kept

PHOTO_SIDE = 512  # the long side of a photo shown from an index


@st.cache_resource(max_entries=4, show_spinner="Opening the index...")
def cached_index(folder: str, stamp: int) -> DatasetIndex:
    """One open index per folder and manifest (arrays memory-mapped, shared by every session)."""
    return open_index(folder)


@st.cache_resource(max_entries=4, show_spinner=False)
def photo_reader_of(key: str, _index: DatasetIndex, _allowed: Callable) -> Callable[[int, str], bytes]:
    """The reader of the index's photos from its source, within the folders ``_allowed`` accepts."""
    return photo_reader(_index.manifest, _allowed)


@kept()
def thumbnail_photo(key: str, image_id: int, path: str, *, _data: bytes) -> Image.Image:
    """An index's photo decoded, its long side at most PHOTO_SIDE."""
    image = load_image(_data)
    image.thumbnail((PHOTO_SIDE, PHOTO_SIDE))
    return image


@kept(spinner="Averaging over the dataset...")
def head_means(key: str, columns: tuple[str, ...], *, _index: DatasetIndex) -> pd.DataFrame:
    """Each of the heads table's ``columns`` averaged over all images, one row per (layer, head)."""
    averages = ", ".join(f"avg({c}) AS {c}" for c in columns)
    return _index.query(f"SELECT layer, head, {averages} FROM heads GROUP BY layer, head ORDER BY layer, head")


@kept(spinner="Reading a sample of images...")
def per_image(key: str, column: str, *, _index: DatasetIndex) -> np.ndarray:
    """``column`` per image of a seeded sample of up to max(SETTLING_SIZES) readable images: (images, layers,
    heads)."""
    ids = _index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id", limit=10_000_000)
    ids = ids["image_id"].to_numpy()
    most = max(SETTLING_SIZES)
    if len(ids) > most:
        ids = np.sort(np.random.default_rng(0).choice(ids, most, replace=False))
    layers, heads = _index.layout["layers"], _index.layout["heads"]
    rows = len(ids) * layers * heads
    listed = ", ".join(str(int(i)) for i in ids)
    values = _index.query(  # a semi join on a list: ten times faster in DuckDB than IN (5,000 literals)
        f"SELECT h.{column} FROM heads h SEMI JOIN (SELECT unnest([{listed}]) AS image_id) USING (image_id) "
        "ORDER BY h.image_id, h.layer, h.head",
        limit=max(1, rows),
    )[column].to_numpy(np.float64)
    return values.reshape(len(ids), layers, heads)


@kept(spinner="Running the model on the sample...")
def query_key_points(
    key: str,
    layer: int,
    head: int,
    sample: tuple[tuple[int, str], ...],
    precision: str,
    *,
    _model: vitviz.ViT,
    _photos: tuple[bytes, ...],
) -> pd.DataFrame:
    """One row per patch query and per patch key of the sample: its PCA coordinates (AttentionViz's joint embedding,
    vitviz.dataset.analysis), kind, row, column and image. The model runs in the library
    (explain.head_queries_and_keys), up to ``layer`` only."""
    pixels = torch.stack([_model.transform(load_image(data)) for data in _photos])
    queries, keys = explain.head_queries_and_keys(_model, pixels, layer, head, precision)  # (B, N, head_dim) each
    batch, patches, _ = queries.shape
    joint = joint_query_key_embedding(
        queries.reshape(-1, queries.shape[-1]).numpy(), keys.reshape(-1, keys.shape[-1]).numpy()
    )
    cols = pixels.shape[-1] // _model.config.patch_size
    position = np.tile(np.arange(patches), batch)
    image_ids = np.repeat([image_id for image_id, _ in sample], patches)
    paths = np.repeat([path for _, path in sample], patches)
    half = pd.DataFrame({"row": position // cols, "column": position % cols, "image": image_ids, "path": paths})
    frame = pd.concat([half.assign(kind="query"), half.assign(kind="key")], ignore_index=True)
    frame["pc1"], frame["pc2"] = joint.points[:, 0], joint.points[:, 1] if joint.points.shape[1] > 1 else 0.0
    frame.attrs["explained"] = joint.explained.tolist()
    return frame
