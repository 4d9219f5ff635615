"""What the pages keep of sparse autoencoders: an SAE's files fetched from the Hub, the SAE loaded (shared
resources, keyed by its path and its files' stamp), and one photo's codes (data in the byte-bounded store)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st
import torch

import vitviz
from vitviz.sae import TopKSAE, load_sae
from vitviz.sae.browse import photo_codes as library_photo_codes
from vitviz.sae.formats.hub import local_path
from vitviz_dashboard.cache.budget import kept
from vitviz_dashboard.page import ModelKey


@dataclass(frozen=True)
class SAEFiles:
    """What names an SAE in cache keys: its path and the stamp of its files (sae_editing.stamp)."""

    path: str
    stamp: int


@st.cache_resource(max_entries=8, show_spinner="Fetching the SAE from the Hub...")
def hub_folder(spec: str) -> Path:
    """Where a Hub SAE's files are in the Hub's cache (fetched once; read offline once there)."""
    return local_path(spec)


@st.cache_resource(max_entries=4, show_spinner="Loading the SAE...")
def cached_sae(files: SAEFiles) -> TopKSAE:
    """The SAE at ``files.path`` in any format load_sae reads, once per stamp of its files."""
    return load_sae(files.path)


@kept(spinner="Encoding the photo's tokens with the SAE...")
def photo_codes(
    key: ModelKey,
    image_key: str,
    sae: SAEFiles,
    block: int,
    *,
    _model: vitviz.ViT,
    _sae: TopKSAE,
    _pixels: torch.Tensor,
) -> np.ndarray:
    """The codes (P, N) of the photo's patch tokens at the SAE's block, from the unedited model (``key`` names it)."""
    return library_photo_codes(_model, _sae, _pixels, block).numpy()
