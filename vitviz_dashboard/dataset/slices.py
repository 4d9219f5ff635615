"""The Slices tab: accuracy and mean top-class probability by the values of any column of the images table (label,
prediction, a numeric column cut into quantile bins), beside the figure over all images, with each slice's count
(vitviz.dataset.analysis.slice_accuracy). A latent's firing is a slice on the Features tab."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset.analysis import OVERALL, slice_accuracy
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

MAX_ROWS = 2_000_000  # rows of the images table a slice table reads
MAX_SLICES = 60  # slices drawn in the chart (the table lists them all)


def slice_columns(images: pd.DataFrame) -> list[str]:
    """The columns a table can be sliced by: label and prediction first, then other scalar columns, leaving out the
    per-image bookkeeping and text columns of one value per image (a path slices nothing)."""
    skip = {"image_id", "correct", "error"}
    lists = {c for c in images.columns if images[c].map(lambda v: isinstance(v, list | np.ndarray)).any()}
    numeric = {c for c in images.columns if pd.api.types.is_numeric_dtype(images[c])}
    unique = {c for c in images.columns if c not in numeric | lists and images[c].nunique() == len(images) > 1}
    usable = [c for c in images.columns if c not in skip | lists | unique]
    return [c for c in ("label", "prediction") if c in usable] + [c for c in usable if c not in ("label", "prediction")]


def chart(table: pd.DataFrame, by: str) -> go.Figure:
    """Each slice's accuracy as a bar with its count, and the overall accuracy as a line across."""
    overall = table.iloc[0]
    parts = table.iloc[1 : MAX_SLICES + 1]
    figure = go.Figure(
        go.Bar(
            x=parts["slice"],
            y=parts["accuracy"],
            text=[f"n={n}" for n in parts["images"]],
            # each count at its bar's foot: above the bars, counts ran into the overall line and its label
            textposition="inside",
            insidetextanchor="start",
            textfont_color="white",
            customdata=parts[["mean_probability"]],
            hovertemplate="%{x}: accuracy %{y:.1%}, mean probability %{customdata[0]:.1%}, %{text}<extra></extra>",
            marker_color="#2a9d8f",
        )
    )
    figure.add_hline(
        y=overall["accuracy"],
        line_dash="dash",
        annotation_text=f"all images {overall['accuracy']:.1%}",
        annotation_position="top left",
    )
    figure.update_layout(
        xaxis_title=by,
        yaxis=dict(title="accuracy", tickformat=".0%", range=[0, 1.1]),
        height=340,
        margin=dict(l=0, r=0, t=30, b=0),
    )
    return figure


def draw(page: DatasetPage) -> None:
    index = page.index
    images = index.query("SELECT * FROM images", limit=min(index.count, MAX_ROWS))
    if "correct" not in images.columns or images["correct"].notna().sum() == 0:
        st.info("No image has both a label and a prediction: there is no accuracy to slice.")
        return
    columns = slice_columns(images)
    left, right = st.columns([3, 1])
    by = left.selectbox("Slice by", columns, key=dataset_key("slice_by"))
    bins = int(right.number_input("Bins (numeric columns)", 2, 20, 5, key=dataset_key("slice_bins")))
    table = slice_accuracy(images, by, bins)
    overall = table[table["slice"] == OVERALL].iloc[0]
    st.markdown(
        f"**All images**: accuracy {overall['accuracy']:.1%} over {int(overall['labelled']):,} labelled images, "
        f"mean top-class probability {overall['mean_probability']:.1%} ({int(overall['images']):,} images)."
    )
    st.plotly_chart(chart(table, by), key=dataset_key("slice_chart"))
    st.dataframe(
        table.style.format({"accuracy": "{:.1%}", "mean_probability": "{:.1%}"}, na_rep="-"),
        hide_index=True,
        key=dataset_key("slice_table"),
    )
