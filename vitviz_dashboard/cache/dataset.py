"""What the Dataset page keeps between runs: the open index (shared by every session), its photo reader, and what is
computed from it, keyed by the index's ``IndexKey`` (its folder and its manifest's stamp, ``opening.index_key``) and
an SAE's by its ``SAEFiles``. Each function calls one library function (vitviz.dataset.views, vitviz.sae.browse).

The index and the reader are resources (one shared object each, ``st.cache_resource``); everything computed from
them is data in the page's byte-bounded store (``budget.kept``), like the Photo page's results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
from PIL import Image

import vitviz
from vitviz.dataset import DatasetIndex, compare, open_index, views
from vitviz.dataset.analysis import Projection
from vitviz.dataset.photos import photo_reader
from vitviz.dataset.storage import weight_fingerprint
from vitviz.preprocessing import load_image
from vitviz.sae import TopKSAE, browse
from vitviz_dashboard.cache.budget import kept
from vitviz_dashboard.cache.sae import SAEFiles

PHOTO_SIDE = 512  # the long side of a photo shown from an index


@st.cache_resource(max_entries=4, show_spinner="Opening the index...")
def cached_index(folder: str, stamp: int) -> DatasetIndex:
    """One open index per folder and manifest (arrays memory-mapped, shared by every session)."""
    return open_index(folder)


@dataclass(frozen=True)
class IndexKey:
    """What names an open index in cache keys: its folder and its manifest's stamp (dataset/opening.index_key), so an
    index made again in the same folder is computed afresh."""

    folder: str
    stamp: int


@st.cache_resource(max_entries=4, show_spinner=False)
def photo_reader_of(key: IndexKey, _index: DatasetIndex, _allowed: Callable) -> Callable[[int, str], bytes]:
    """The reader of the index's photos from its source, within the folders ``_allowed`` accepts."""
    return photo_reader(_index.manifest, _allowed)


@kept()
def thumbnail_photo(key: IndexKey, image_id: int, path: str, *, _data: bytes) -> Image.Image:
    """An index's photo decoded, its long side at most PHOTO_SIDE."""
    image = load_image(_data)
    image.thumbnail((PHOTO_SIDE, PHOTO_SIDE))
    return image


@kept(spinner="Averaging over the dataset...")
def head_means(key: IndexKey, columns: tuple[str, ...], *, _index: DatasetIndex) -> pd.DataFrame:
    """views.head_means: the heads table's ``columns`` averaged over all images, per (layer, head)."""
    return views.head_means(_index, columns)


@kept(spinner="Reading a sample of images...")
def per_image(key: IndexKey, column: str, *, _index: DatasetIndex) -> np.ndarray:
    """views.per_image: ``column`` per image of a seeded sample, (images, layers, heads)."""
    return views.per_image(_index, column)


@kept(spinner="Counting...")
def confusion(key: IndexKey, *, _index: DatasetIndex) -> tuple[list[str], np.ndarray]:
    """views.confusion_counts: (classes, matrix) of the labelled readable images."""
    return views.confusion_counts(_index)


@kept(spinner="Averaging the maps...")
def class_mean(key: IndexKey, label: str, kind: str, *, _index: DatasetIndex) -> tuple[np.ndarray, int]:
    """views.class_mean_map: the map ``kind`` averaged over the images labelled ``label``, and their count."""
    return views.class_mean_map(_index, label, kind)


@kept(spinner="Projecting the embeddings (a t-SNE of 3,000 images takes about 30 s, once per index)...")
def embedding_projection(
    key: IndexKey, most: int, method: str = "pca", *, _index: DatasetIndex
) -> tuple[Projection, pd.DataFrame]:
    """views.embedding_sample: up to ``most`` readable images' embeddings by ``method`` (PCA or t-SNE), and their
    rows; kept per index, method and number of points."""
    return views.embedding_sample(_index, most, method)


@kept(spinner="Matching the two indexes' images...")
def index_match(key: IndexKey, other: IndexKey, *, _index: DatasetIndex, _other: DatasetIndex) -> pd.DataFrame:
    """compare.match_indexes: the images both indexes hold, matched by sha256 (NothingShared when none)."""
    return compare.match_indexes(_index, _other)


@kept(spinner="Reading every image's activations through the SAE (once)...")
def latent_tables(
    key: IndexKey, sae: SAEFiles, block: int, *, _index: DatasetIndex, _sae: TopKSAE, _folder: Path
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """browse.latent_tables: (latents, top images, about), read from beside the SAE (``_folder``) or computed and
    written there (an OSError when it cannot be written: the caller's)."""
    return browse.latent_tables(_sae, _index, block, _folder)


@kept(spinner="Encoding every image's patches for this latent...")
def latent_maxima(key: IndexKey, sae: SAEFiles, block: int, latent: int, *, _index: DatasetIndex, _sae: TopKSAE):
    """browse.latent_image_maxima: each image's largest code of ``latent``, (count,)."""
    return browse.latent_image_maxima(_index, _sae, block, latent)


@kept(spinner="Running the model on the latent's top images...")
def latent_effects(
    key: IndexKey,
    sae: SAEFiles,
    block: int,
    latent: int,
    largest: float,
    image_ids: tuple[int, ...],
    *,
    _model: vitviz.ViT,
    _sae: TopKSAE,
    _index: DatasetIndex,
    _read: Callable[[], list[tuple[int, bytes]]],
) -> tuple[np.ndarray | None, np.ndarray] | None:
    """browse.latent_effects: the latent's logit changes and the later heads' attention to where it fires, over its
    top images ``image_ids`` (``_read()`` gives the readable ones' files, called only when this is computed); the
    index's model (``key`` fixes it) runs on them."""
    return browse.latent_effects(_model, _sae, _index, block, latent, largest, _read())


def model_fingerprint(model: vitviz.ViT) -> str:
    """The weights' sha256 (storage.weight_fingerprint, as the manifest records it), hashed once per loaded model and
    kept on the model object itself: it lives and goes with the model (results.get_model), and a model loaded again
    from a changed file is a new object, hashed again. (Keyed by id(model), a freed model's address could be reused.)"""
    found = getattr(model, "_vitviz_fingerprint", None)
    if found is None:
        with st.spinner("Checking the model's weights against the index..."):
            found = weight_fingerprint(model)
        model._vitviz_fingerprint = found
    return found


@kept(spinner="Running the model on the sample...")
def query_key_points(
    key: IndexKey,
    layer: int,
    head: int,
    sample: tuple[tuple[int, str], ...],
    precision: str,
    *,
    _model: vitviz.ViT,
    _photos: tuple[bytes, ...],
) -> pd.DataFrame:
    """views.query_key_points: one head's patch queries and keys of the sample's photos in one PCA, a row each.
    The model runs in the library, up to ``layer`` only."""
    return views.query_key_points(_model, _photos, sample, layer, head, precision)
