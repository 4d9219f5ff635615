"""Attention over time as plotly figures: the frames x frames heatmap of one block (what each token frame's tokens
give to each other token frame) and the readout's attention per token frame. No streamlit."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from vitviz.render.overlays import as_array, plotly_colorscale


def frame_labels(spans: np.ndarray) -> list[str]:
    """A label per token frame from its (first, last) input frames: "3" for one frame, "2-3" for a tubelet."""
    return [f"{a}" if a == b else f"{a}-{b}" for a, b in np.asarray(spans).tolist()]


def frames_heatmap_figure(values, labels: list[str], title: str = "", colormap: str = "inferno") -> go.Figure:
    """(F', F') values as a heatmap: row i (the attending frame, top to bottom), column j (the attended frame), the
    exact value on hover. Square cells."""
    values = as_array(values)
    if values.ndim != 2 or values.shape[0] != values.shape[1] or len(labels) != values.shape[0]:
        raise ValueError(
            f"a frames x frames heatmap takes (F, F) values and F labels; got {values.shape}, {len(labels)}"
        )
    heatmap = go.Heatmap(
        z=values,
        x=labels,
        y=labels,
        colorscale=plotly_colorscale(colormap),
        colorbar=dict(thickness=12),
        hovertemplate="frames %{y} attend to frames %{x}: %{z:.4f}<extra></extra>",
    )
    figure = go.Figure(heatmap)
    figure.update_layout(
        title=dict(text=title, font=dict(size=14)),
        margin=dict(l=0, r=0, t=40 if title else 0, b=0),
        height=340,
        xaxis=dict(title="attended frames", type="category", constrain="domain"),
        yaxis=dict(title="attending frames", type="category", autorange="reversed", scaleanchor="x"),
    )
    return figure


def readout_frames_figure(values, labels: list[str], title: str = "") -> go.Figure:
    """(F',) values as bars: how much of what the head reads comes from each token frame, in one block."""
    values = as_array(values)
    if values.ndim != 1 or len(labels) != len(values):
        raise ValueError(f"a per-frame bar chart takes (F,) values and F labels; got {values.shape}, {len(labels)}")
    figure = go.Figure(
        go.Bar(x=labels, y=values, marker_color="#6d28d9", hovertemplate="frames %{x}: %{y:.4f}<extra></extra>")
    )
    figure.update_layout(
        title=dict(text=title, font=dict(size=14)),
        margin=dict(l=0, r=0, t=40 if title else 0, b=0),
        height=220,
        xaxis=dict(title="token frames", type="category"),
        yaxis=dict(title="attention", rangemode="tozero"),
    )
    return figure
