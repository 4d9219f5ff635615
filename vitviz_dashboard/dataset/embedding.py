"""The Embedding map tab: the pooled embeddings of the index's readable images projected to 2-D by PCA
(vitviz.dataset.analysis.project_embeddings), coloured by any column of the images table; a box or a lasso drawn on
it makes its images the selection, shown in the grid below."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset.analysis import Projection
from vitviz_dashboard.cache.dataset import embedding_projection
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

MAX_POINTS = 20_000  # images drawn (a random sample of a larger index, the same one each time)
MAX_CATEGORIES = 24  # a column of more distinct values is drawn with a colour scale (numbers) or by its first ones
COLOURS = ("label", "prediction", "correct")  # offered first
SEEN = dataset_key("embedding_seen")  # the map's selection in the run before: only a new one replaces the selection


def colour_columns(images: pd.DataFrame) -> list[str]:
    """The columns a map can be coloured by: label, prediction and correctness first, then any other scalar one."""
    scalar = [c for c in images.columns if c != "image_id" and not isinstance(images[c].iloc[0], list | np.ndarray)]
    return [c for c in COLOURS if c in scalar] + [c for c in scalar if c not in COLOURS]


def figure(projection: Projection, images: pd.DataFrame, colour: str) -> go.Figure:
    """The points, one trace per value of ``colour`` (a numeric column of many values: one trace, a colour scale);
    each point's customdata is its image_id."""
    x, y = projection.points[:, 0], projection.points[:, 1]
    values = images[colour]
    hover = "image %{customdata}<br>" + colour + ": %{text}<extra></extra>"
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if numeric and values.nunique() > MAX_CATEGORIES:
        traces = [
            go.Scattergl(
                x=x,
                y=y,
                mode="markers",
                customdata=images["image_id"],
                text=values.map("{:.3g}".format),
                hovertemplate=hover,
                marker=dict(size=6, color=values, colorscale="Viridis", colorbar=dict(title=colour)),
                showlegend=False,
            )
        ]
    else:
        keys = values.astype(str).where(values.notna(), "missing")
        order = keys.value_counts().index[:MAX_CATEGORIES]
        keys = keys.where(keys.isin(order), "other")
        traces = []
        for key in [*sorted(order), *(["other"] if (keys == "other").any() else [])]:
            mask = (keys == key).to_numpy()
            traces.append(
                go.Scattergl(
                    x=x[mask],
                    y=y[mask],
                    mode="markers",
                    name=key,
                    customdata=images["image_id"][mask],
                    text=[key] * int(mask.sum()),
                    hovertemplate=hover,
                    marker=dict(size=6),
                )
            )
    result = go.Figure(traces)
    first, second = projection.explained[:2] if len(projection.explained) > 1 else (projection.explained[0], 0.0)
    result.update_layout(
        xaxis_title=f"PC 1 ({first:.0%} of the variance)",
        yaxis_title=f"PC 2 ({second:.0%})",
        height=520,
        margin=dict(l=0, r=0, t=30, b=0),
        dragmode="lasso",
        legend=dict(title=colour),
    )
    return result


def selected_ids(points: list[dict]) -> list[int]:
    """The image ids of a chart selection's points (their customdata)."""
    ids = []
    for point in points:
        value = point.get("customdata")
        if isinstance(value, list):  # a customdata of several values per point: the first is the image_id
            value = value[0] if value else None
        if value is not None:
            ids.append(int(value))
    return ids


def draw(page: DatasetPage) -> None:
    index = page.index
    projection_and_images = (
        embedding_projection(index_key(index), MAX_POINTS, _index=index) if index.count >= 2 else None
    )
    if projection_and_images is None or len(projection_and_images[1]) < 2:
        st.info("The map needs at least two readable images.")
        return
    projection, images = projection_and_images
    columns = colour_columns(images)
    colour = st.selectbox("Colour by", columns, key=dataset_key("embedding_colour"))
    sampled = f" (a random {MAX_POINTS:,} of them)" if len(images) == MAX_POINTS < index.count else ""
    st.caption(
        f"The pooled embeddings of {len(images):,} readable images{sampled} on their first two principal axes "
        "(PCA; UMAP is not installed with vitviz). Draw a lasso or a box around points to see their images below."
    )
    event = st.plotly_chart(
        figure(projection, images, colour),
        on_select="rerun",
        selection_mode=("box", "lasso"),
        key=dataset_key("embedding_map"),
    )
    ids = selected_ids(drawing.chart_points(event))
    if ids and ids != st.session_state.get(SEEN):  # a new lasso or box (not the same one again on a rerun)
        grid.select(index, ids, f"chosen on the embedding map (coloured by {colour})", "embedding")
    st.session_state[SEEN] = ids
    shown = grid.current(index)  # the lasso's, or what a Similar click below it chose since
    if shown is None:
        st.caption("No images chosen yet.")
        return
    grid.grid(index, shown, page.photo_page, page.colormap, page.alpha)
