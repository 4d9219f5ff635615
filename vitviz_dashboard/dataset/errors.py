"""Where the model is wrong: the confusion matrix, whose cells select their images, and per-class mean maps (a
stored map averaged over a class's images)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.analysis import confusion_matrix, mean_map
from vitviz_dashboard.dataset import drawing
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.dataset.table import MAX_THUMBNAILS, map_kinds, quote, thumbnails

MAX_CLASSES = 40  # classes the matrix and the mean maps show (the most frequent labels)


@st.cache_data(max_entries=8, show_spinner="Counting...")
def _confusion(key: str, _index: DatasetIndex) -> tuple[list[str], np.ndarray]:
    pairs = _index.query(
        "SELECT label, prediction, count(*) AS n FROM images WHERE label IS NOT NULL AND error IS NULL GROUP BY ALL",
        limit=1_000_000,
    )
    return confusion_matrix(pairs["label"], pairs["prediction"], pairs["n"])


def confusion_figure(classes: list[str], matrix: np.ndarray) -> go.Figure:
    """The matrix as square markers (a scatter, so that a click selects a cell), the count in each."""
    true, predicted = np.nonzero(matrix >= 0)
    counts = matrix[true, predicted]
    figure = go.Figure(
        go.Scatter(
            x=[classes[j] for j in predicted],
            y=[classes[i] for i in true],
            mode="markers+text",
            text=[str(c) if c else "" for c in counts],
            marker=dict(
                symbol="square",
                size=max(12, min(48, 600 // max(1, len(classes)))),
                color=np.log1p(counts),
                colorscale="Blues",
                line=dict(width=np.where(true == predicted, 2, 0), color="#2a9d8f"),
            ),
            customdata=counts,
            hovertemplate="true %{y}, predicted %{x}: %{customdata} images<extra></extra>",
        )
    )
    side = 120 + 28 * len(classes)
    figure.update_layout(
        xaxis=dict(title="predicted", type="category", categoryorder="array", categoryarray=classes),
        yaxis=dict(title="true label", type="category", categoryorder="array", categoryarray=classes[::-1]),
        height=min(900, side),
        margin=dict(l=0, r=0, t=30, b=0),
        clickmode="event+select",
        dragmode="select",
    )
    return figure


def draw(index: DatasetIndex, photo_page: st.Page, colormap: str, alpha: float) -> None:
    columns = index.query("SELECT * FROM images", limit=1).columns
    if "prediction" not in columns:
        st.info("This index's model is a backbone (no classes): there is nothing to be wrong about.")
        return
    classes, matrix = _confusion(index_key(index), index)
    if not classes:
        st.info("No image of this index has a label: the source gave none (class sub-folders give labels).")
        return
    if len(classes) > MAX_CLASSES:
        keep = np.argsort(-matrix.sum(1), kind="stable")[:MAX_CLASSES]
        keep.sort()
        classes, matrix = [classes[i] for i in keep], matrix[np.ix_(keep, keep)]
        st.caption(f"The {MAX_CLASSES} most frequent labels.")
    accuracy = np.trace(matrix) / max(1, matrix.sum())
    st.markdown(f"**Confusion matrix**: {accuracy:.1%} of {matrix.sum():,} labelled images correct. Click a cell.")
    event = st.plotly_chart(
        confusion_figure(classes, matrix), on_select="rerun", selection_mode="points", key="dataset|confusion"
    )
    points = event.selection.points if event and event.selection else []
    clicked = (points[0]["y"], points[0]["x"]) if points else None
    if clicked and clicked != st.session_state.get("dataset|clicked"):  # a new click sets the cell pickers below
        st.session_state["dataset|true"], st.session_state["dataset|predicted"] = clicked
    st.session_state["dataset|clicked"] = clicked
    left, right = st.columns(2)
    true = left.selectbox("True label", classes, key="dataset|true")
    predicted = right.selectbox("Predicted", classes, key="dataset|predicted")
    cell = index.query(
        "SELECT image_id, path, label, prediction, probability FROM images "
        f"WHERE label = {quote(true)} AND prediction = {quote(predicted)} AND error IS NULL "
        "ORDER BY probability DESC, image_id",
        limit=MAX_THUMBNAILS,
    )
    st.caption(f"{true} predicted as {predicted}: the most confident {len(cell)} shown.")
    thumbnails(index, cell, photo_page, colormap, alpha, "confusion")
    class_means(index, classes, colormap)


@st.cache_data(max_entries=64, show_spinner="Averaging the maps...")
def _class_mean(key: str, label: str, kind: str, _index: DatasetIndex) -> tuple[np.ndarray, int]:
    ids = _index.query(
        f"SELECT image_id FROM images WHERE label = {quote(label)} AND error IS NULL ORDER BY image_id",
        limit=10_000_000,
    )["image_id"]
    return mean_map(_index, ids.tolist(), kind), len(ids)


def class_means(index: DatasetIndex, classes: list[str], colormap: str) -> None:
    st.markdown("**Per-class mean maps**: a stored map averaged over each class's images")
    kind = st.selectbox("Map", map_kinds(index), key="dataset|class_map")
    grid = st.columns(6)
    for position, label in enumerate(classes):
        average, count = _class_mean(index_key(index), label, kind, index)
        grid[position % 6].image(drawing.map_picture(average, colormap), caption=f"{label} ({count})")
