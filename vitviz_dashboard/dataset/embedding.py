"""The Embedding map tab (FiftyOne's embeddings panel): the pooled embeddings of the index's readable images projected
to 2-D by PCA or t-SNE (vitviz.dataset.analysis.project_embeddings, kept per index and method), coloured by any
column of the images table. A box or a lasso drawn on it makes its images the session's selection (the Grid's); the
selection, whichever view made it, is highlighted on the map and listed below it as a table, and the images ticked in
that table or in the Table tab (one set of ticked ids per index, link.ticked) are ringed on the map."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset.analysis import Projection
from vitviz_dashboard.cache.dataset import embedding_projection
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.link import ticked
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

METHODS = {"pca": "PCA", "tsne": "t-SNE"}  # analysis.PROJECTION_METHODS, as the page names them
# images drawn, a seeded random sample of a larger index: PCA is one SVD, but scikit-learn's Barnes-Hut t-SNE took
# 16 s for 2,000 points and 75 s for 5,000 on one core, so it gets fewer (about 30 s, once per index)
MAX_POINTS = {"pca": 20_000, "tsne": 3_000}
MAX_CATEGORIES = 24  # a column of more distinct values is drawn with a colour scale (numbers) or by its first ones
MAX_ROWS = 2_000  # rows of the selection's table
COLOURS = ("label", "prediction", "correct")  # offered first
ROW_COLUMNS = ("image_id", "label", "prediction", "probability", "correct", "path")
MAP = dataset_key("embedding_map")  # the chart's selection event
SEEN = dataset_key("embedding_seen")  # the map's selection in the run before: only a new one replaces the selection
ROWS_SEEN = dataset_key("embedding_rows_seen")  # the rows ticked in the selection's table in the run before
TICKED_NAME = "ticked"  # the legend's entry of the ringed points
UNSELECTED_OPACITY = 0.15


def colour_columns(images: pd.DataFrame) -> list[str]:
    """The columns a map can be coloured by: label, prediction and correctness first, then any other scalar one."""
    scalar = [c for c in images.columns if c != "image_id" and not isinstance(images[c].iloc[0], list | np.ndarray)]
    return [c for c in COLOURS if c in scalar] + [c for c in scalar if c not in COLOURS]


def axis_titles(projection: Projection) -> tuple[str, str]:
    if projection.method == "tsne":  # t-SNE's axes have no meaning of their own, nor a share of variance
        return "t-SNE 1", "t-SNE 2"
    explained = projection.explained
    first, second = explained[:2] if len(explained) > 1 else (explained[0], 0.0)
    return f"PC 1 ({first:.0%} of the variance)", f"PC 2 ({second:.0%})"


def figure(
    projection: Projection,
    images: pd.DataFrame,
    colour: str,
    highlighted: set[int] | frozenset[int] = frozenset(),
    ringed: set[int] | frozenset[int] = frozenset(),
) -> go.Figure:
    """The points, one trace per value of ``colour`` (a numeric column of many values: one trace, a colour scale);
    each point's customdata is its image_id. The ``highlighted`` images (the selection) are drawn solid and the
    others faded (each trace's ``selectedpoints``); the ``ringed`` ones (ticked rows) get a ring in a trace of
    their own, named TICKED_NAME."""
    x, y = projection.points[:, 0], projection.points[:, 1]
    ids = images["image_id"].to_numpy()
    values = images[colour]
    hover = "image %{customdata}<br>" + colour + ": %{text}<extra></extra>"
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if numeric and values.nunique() > MAX_CATEGORIES:
        groups = [(None, np.ones(len(ids), bool))]
        texts = values.map("{:.3g}".format).to_numpy()
    else:
        keys = values.astype(str).where(values.notna(), "missing")
        order = keys.value_counts().index[:MAX_CATEGORIES]
        keys = keys.where(keys.isin(order), "other")
        names = [*sorted(order), *(["other"] if (keys == "other").any() else [])]
        groups = [(name, (keys == name).to_numpy()) for name in names]
        texts = keys.to_numpy()
    chosen = np.isin(ids, list(highlighted)) if highlighted else None
    traces = []
    for name, mask in groups:
        marker = dict(size=6)
        if name is None:
            marker |= dict(color=values[mask], colorscale="Viridis", colorbar=dict(title=colour))
        trace = go.Scattergl(
            x=x[mask],
            y=y[mask],
            mode="markers",
            name=name,
            showlegend=name is not None,
            customdata=ids[mask].tolist(),
            text=texts[mask],
            hovertemplate=hover,
            marker=marker,
        )
        if chosen is not None:  # the selection solid, the rest faded
            trace.update(
                selectedpoints=np.flatnonzero(chosen[mask]).tolist(),
                selected=dict(marker=dict(opacity=1.0)),
                unselected=dict(marker=dict(opacity=UNSELECTED_OPACITY)),
            )
        traces.append(trace)
    rings = np.isin(ids, list(ringed)) if ringed else np.zeros(len(ids), bool)
    if rings.any():
        traces.append(
            go.Scattergl(
                x=x[rings],
                y=y[rings],
                mode="markers",
                name=TICKED_NAME,
                customdata=ids[rings].tolist(),
                text=texts[rings],
                hovertemplate=hover,
                marker=dict(size=14, symbol="circle-open", color="black", line=dict(width=2)),
            )
        )
    result = go.Figure(traces)
    xtitle, ytitle = axis_titles(projection)
    result.update_layout(
        xaxis_title=xtitle,
        yaxis_title=ytitle,
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


def take_lasso(page: DatasetPage, colour: str) -> None:
    """A new lasso or box on the map (read from the chart's state before the chart is drawn, so this run's map
    already highlights it) becomes the session's selection."""
    ids = selected_ids(drawing.chart_points(st.session_state.get(MAP)))
    if ids and ids != st.session_state.get(SEEN):  # a new lasso or box (not the same one again on a rerun)
        grid.select(page.index, ids, f"chosen on the embedding map (coloured by {colour})", "embedding")
    st.session_state[SEEN] = ids


def draw(page: DatasetPage) -> None:
    index = page.index
    left, right = st.columns([1, 2])
    method = left.radio(
        "Projection",
        list(METHODS),
        format_func=METHODS.get,
        horizontal=True,
        key=dataset_key("embedding_method"),
        help="PCA: the first two principal axes (linear; distances are the embeddings' own). t-SNE: neighbourhoods "
        "kept, distances between clusters meaningless; on fewer points, as it is slower.",
    )
    most = MAX_POINTS[method]
    projection_and_images = (
        embedding_projection(index_key(index), most, method, _index=index) if index.count >= 2 else None
    )
    if projection_and_images is None or len(projection_and_images[1]) < 2:
        st.info("The map needs at least two readable images.")
        return
    projection, images = projection_and_images
    colour = right.selectbox("Colour by", colour_columns(images), key=dataset_key("embedding_colour"))
    take_lasso(page, colour)
    selection = grid.current(index)
    chosen = frozenset(selection.ids) if selection is not None else frozenset()
    kept = ticked(str(index.folder))
    rings = frozenset(kept.get() or [])
    sampled = f" (a random {most:,} of them)" if len(images) == most < index.count else ""
    how = (
        "on their first two principal axes (PCA; UMAP is not installed with vitviz)"
        if method == "pca"
        else "by t-SNE (on their first 50 principal components; near points are neighbours, distances between "
        "clusters mean little)"
    )
    st.caption(
        f"The pooled embeddings of {len(images):,} readable images{sampled} {how}. Draw a lasso or a box around "
        "points to make their images the selection: it is drawn solid (the rest faded) and listed below; the "
        "images ticked there or in the Table tab are ringed."
    )
    st.plotly_chart(
        figure(projection, images, colour, chosen, rings),
        on_select="rerun",
        selection_mode=("box", "lasso"),
        key=MAP,
    )
    if selection is None:
        st.caption("No images chosen yet.")
        return
    on_map = len(chosen & set(images["image_id"].tolist()))
    st.caption(
        f"The selection: {len(selection.ids):,} images, {selection.title}; {on_map:,} of them on the map, "
        f"{len(rings):,} ticked."
    )
    selection_table(index, selection, kept)
    grid.grid(index, selection, page.photo_page, page.colormap, page.alpha)


def selection_table(index, selection: grid.Selection, kept) -> None:
    """The selection's rows (the first MAX_ROWS), with boxes to tick: ticks join the index's ticked images (the
    Table tab's), ringed on the map; unticking one here unticks it there."""
    ids = list(selection.ids[:MAX_ROWS])
    stored = set(index.query("SELECT * FROM images", limit=1).columns)
    columns = [c for c in ROW_COLUMNS if c in stored]
    listed = ", ".join(str(int(i)) for i in ids)
    rows = index.query(f"SELECT {', '.join(columns)} FROM images WHERE image_id IN ({listed})", limit=max(1, len(ids)))
    rows = rows.set_index("image_id").loc[[i for i in ids if i in set(rows["image_id"])]].reset_index()
    if len(selection.ids) > MAX_ROWS:
        st.caption(f"The first {MAX_ROWS:,} of the selection's {len(selection.ids):,} images.")
    before = set(kept.get() or [])
    event = st.dataframe(
        rows,
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        height=min(36 + 35 * len(rows), 300),
        key=dataset_key(f"embedding_rows|{hash(selection.ids)}"),
        selection_default={"selection": {"rows": [i for i, n in enumerate(rows["image_id"]) if n in before]}},
    )
    now = {int(rows["image_id"].iloc[r]) for r in event.selection.rows}
    if now == st.session_state.get(ROWS_SEEN, now):  # no new tick here (the Table's ticks stand as they are)
        st.session_state[ROWS_SEEN] = now
        return
    st.session_state[ROWS_SEEN] = now
    here = {int(i) for i in rows["image_id"]}
    updated = sorted((before - here) | now)
    if updated != sorted(before):
        kept.set(updated)
        st.rerun()  # the map above rings them in this view
