"""Figures of heads as causes: a layer x head grid of signed numbers (how much each head's removal moves the target's
logit, or what each head writes to it directly), on a colour scale centred at 0, with knocked-out heads marked."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from vitviz.render.figures import TEMPLATE


def signed_layer_head_figure(
    values, title: str, colorbar: str, marked: list[tuple[int, int]] | None = None
) -> go.Figure:
    """A (layers, heads) table of signed numbers as a heatmap: red above 0, blue below, white at 0, one symmetric
    range. ``marked`` (layer, head) cells get an X (heads knocked out). Each cell is also a transparent marker, so a
    click on it can be read as a selection (Streamlit's ``on_select``)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be (layers, heads); got shape {values.shape}")
    layers, heads = values.shape
    bound = float(np.abs(values).max()) or 1.0
    heatmap = dict(
        type="heatmap",
        z=values,
        zmin=-bound,
        zmax=bound,
        colorscale="RdBu",
        reversescale=True,
        colorbar=dict(title=dict(text=colorbar)),
        hoverinfo="skip",
    )
    rows, cols = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    cells = dict(
        type="scatter",
        mode="markers",
        x=cols.ravel(),
        y=rows.ravel(),
        customdata=values.ravel(),
        marker=dict(size=max(8, min(28, 360 // max(layers, heads))), symbol="square", opacity=0),
        hovertemplate="layer %{y}, head %{x}: %{customdata:.4g}<extra></extra>",
        showlegend=False,
    )
    traces = [heatmap, cells]
    if marked:
        traces.append(
            dict(
                type="scatter",
                mode="markers",
                x=[h for _, h in marked],
                y=[layer for layer, _ in marked],
                marker=dict(symbol="x-thin", size=14, line=dict(width=3, color="black")),
                hoverinfo="skip",
                showlegend=False,
                name="knocked out",
            )
        )
    # fixed ranges: the transparent markers would otherwise widen the axes past the cells
    layout = dict(
        template=TEMPLATE,
        title=dict(text=title),
        xaxis=dict(title=dict(text="head"), dtick=1, range=[-0.5, heads - 0.5]),
        yaxis=dict(title=dict(text="layer"), dtick=1, range=[layers - 0.5, -0.5]),
        margin=dict(l=0, r=0, t=40, b=0),
        height=max(260, 28 * layers + 90),
    )
    return go.Figure(data=traces, layout=layout)  # built in one call, as figures._figure explains
