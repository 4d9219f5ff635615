"""An SAE's latents over the index, beside the Features tab's one latent: the overview of all of them (how often each
fires against its mean activation when firing; a click picks one) and the images where a latent fires, as a selection
for the grid and as a slice of accuracy (the images where it fires against the rest, beside all images)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.analysis import slice_accuracy
from vitviz.sae import TopKSAE
from vitviz_dashboard.cache.dataset import latent_maxima
from vitviz_dashboard.cache.sae import SAEFiles
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.state import dataset_key

OVERVIEW = dataset_key("sae_overview")
# the overview's selection in the run before: only a new click picks a latent
CLICKED = dataset_key("sae_overview_seen")


def overview_figure(firing: pd.DataFrame) -> go.Figure:
    """Each firing latent a point: how often it fires (log scale) against its mean activation when firing."""
    figure = go.Figure(
        go.Scattergl(
            x=firing["frequency"],
            y=firing["mean_activation"],
            mode="markers",
            customdata=firing["latent"],
            marker=dict(size=6, color="#2a9d8f", opacity=0.7),
            hovertemplate="latent %{customdata}: fires on %{x:.2%} of patches, mean %{y:.3g}<extra></extra>",
        )
    )
    figure.update_layout(
        title="All firing latents: click one to open it",
        xaxis=dict(type="log", title="frequency (share of patch tokens where it fires, log scale)"),
        yaxis_title="mean activation when firing",
        height=320,
        margin=dict(l=0, r=0, t=40, b=0),
        clickmode="event+select",
    )
    return figure


def overview(firing: pd.DataFrame) -> int | None:
    """The overview chart; the latent a new click picked, else None."""
    event = st.plotly_chart(overview_figure(firing), on_select="rerun", selection_mode="points", key=OVERVIEW)
    points = [int(p["customdata"]) for p in drawing.chart_points(event) if p.get("customdata") is not None]
    new = points and points != st.session_state.get(CLICKED)
    st.session_state[CLICKED] = points
    return points[0] if new else None


def where_it_fires(index: DatasetIndex, sae: TopKSAE, files: SAEFiles, block: int, latent: int) -> None:
    """The images where ``latent`` fires on some patch: a button that selects them (largest code first) and their
    accuracy against the rest's."""
    maxima = latent_maxima(index_key(index), files, block, latent, _index=index, _sae=sae)
    images = index.query("SELECT * FROM images ORDER BY image_id", limit=index.count)
    readable = images["error"].isna().to_numpy() if "error" in images.columns else np.ones(len(images), bool)
    fires = (maxima > 0) & readable
    order = np.argsort(-maxima, kind="stable")
    ids = [int(i) for i in order if fires[i]]
    st.markdown(f"**Images where latent {latent} fires**: {len(ids):,} of {int(readable.sum()):,}")
    grid.select_button(
        index,
        ids,
        f"where latent {latent} fires (largest code first)",
        "latent",
        f"All {len(ids):,} in the grid",
        dataset_key("sae_fires_grid"),
    )
    if "correct" in images.columns and images["correct"].notna().any():
        name = f"latent {latent}"  # its slices named in words, not True and False
        frame = images[readable].assign(**{name: np.where(fires[readable], "fires", "does not fire")})
        table = slice_accuracy(frame, name)
        st.dataframe(
            table.style.format({"accuracy": "{:.1%}", "mean_probability": "{:.1%}"}, na_rep="-"),
            hide_index=True,
            key=dataset_key("sae_fires_slices"),
        )
