"""Heads over the dataset: mean attention distance against depth with bootstrap intervals, and how the estimate
settles as images are added; entropy and attention to each prefix token; heads clustered by their dataset-averaged
statistics; and for one head, the images where it attends most to a prefix token or farthest away."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.analysis import Interval, bootstrap_interval, cluster_heads, settling
from vitviz.explain.head_statistics import DISTANCE_PX, ENTROPY, HEAD_STATISTICS, PREFIX_SHARES
from vitviz_dashboard.cache.dataset import head_means, per_image
from vitviz_dashboard.dataset import drawing
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.dataset.table import thumbnails
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

# the heads' legend in rows below the chart, left-aligned: at its right (Plotly's default) it sat under the tool bar
# that Plotly shows over a chart's top right corner. Below the axis title, in the figure's (container's) pixels.
LEGEND_BELOW = dict(orientation="h", xanchor="left", x=0, yref="container", yanchor="bottom", y=0)
LEGEND_ROOM = 90  # the bottom margin that holds the axis title and the legend's rows (one per 8 heads at 800 px)
CLUSTER_COLOURS = ["#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51", "#8ab17d", "#6d597a", "#b56576"]
EXTREME_IMAGES = 8


def share_columns(index: DatasetIndex) -> list[str]:
    """The heads table's prefix-token columns: to_cls, to_dist, to_reg0..., then to_patches."""
    return PREFIX_SHARES.columns(index.layout["prefix_tokens"])


def statistic_columns(index: DatasetIndex, shown_only: bool = False) -> tuple[str, ...]:
    """Every statistic column of the heads table (explain.HEAD_STATISTICS), in its order; ``shown_only``: without
    those that repeat another in another unit."""
    prefix = index.layout["prefix_tokens"]
    return tuple(c for s in HEAD_STATISTICS if s.shown or not shown_only for c in s.columns(prefix))


def as_grid(index: DatasetIndex, frame: pd.DataFrame, column: str) -> np.ndarray:
    layers, heads = index.layout["layers"], index.layout["heads"]
    grid = np.full((layers, heads), np.nan)
    grid[frame["layer"].to_numpy(), frame["head"].to_numpy()] = frame[column].to_numpy()
    return grid


def interval_figure(interval: Interval, unit: str) -> go.Figure:
    """Each head's mean against its depth, with its bootstrap interval; heads side by side within a layer. The mean
    is a short tick and the interval a thick bar with caps, so an interval a few pixels tall still shows; the hover
    gives its bounds."""
    layers, heads = interval.mean.shape
    figure = go.Figure()
    for head in range(heads):
        mean, low, high = interval.mean[:, head], interval.low[:, head], interval.high[:, head]
        figure.add_trace(
            go.Scatter(
                x=np.arange(layers) + (head - (heads - 1) / 2) * 0.6 / max(1, heads),
                y=mean,
                error_y=dict(type="data", array=high - mean, arrayminus=mean - low, thickness=3, width=4),
                mode="markers",
                marker=dict(symbol="line-ew-open", size=12, line=dict(width=2)),
                name=f"head {head}",
                customdata=np.stack([np.arange(layers), low, high], axis=-1),
                hovertemplate=f"layer %{{customdata[0]:.0f}}, head {head}: %{{y:.3f}} {unit}<br>"
                f"95 % interval %{{customdata[1]:.3f}} to %{{customdata[2]:.3f}} {unit}<extra></extra>",
            )
        )
    figure.update_layout(
        xaxis=dict(title="layer", tickmode="linear", tick0=0, dtick=1),
        yaxis_title=unit,
        height=380 + LEGEND_ROOM,
        margin=dict(l=0, r=0, t=10, b=LEGEND_ROOM),
        showlegend=heads <= 16,
        legend=LEGEND_BELOW,
    )
    return figure


def untitled(figure: go.Figure) -> go.Figure:
    """A layer x head heatmap without its Plotly title (and its margin): the page's markdown above it wraps on a
    narrow page where a Plotly title would be cut."""
    figure.update_layout(title=None, margin=dict(l=0, r=0, t=10, b=0))
    return figure


def settling_figure(steps: list[Interval], layer: int, unit: str) -> go.Figure:
    """One layer's heads: the estimate and its interval over the first 128, 1,000, 5,000 images."""
    figure = go.Figure()
    sizes = [s.images for s in steps]
    for head in range(steps[0].mean.shape[1]):
        mean = np.array([s.mean[layer, head] for s in steps])
        figure.add_trace(
            go.Scatter(
                x=sizes,
                y=mean,
                error_y=dict(
                    type="data",
                    array=[s.high[layer, head] - s.mean[layer, head] for s in steps],
                    arrayminus=[s.mean[layer, head] - s.low[layer, head] for s in steps],
                ),
                mode="lines+markers",
                name=f"head {head}",
            )
        )
    figure.update_layout(
        xaxis=dict(title="images", type="log", tickvals=sizes),
        yaxis_title=unit,
        height=340 + LEGEND_ROOM,
        margin=dict(l=0, r=0, t=10, b=LEGEND_ROOM),
        legend=LEGEND_BELOW,
    )
    return figure


def clusters_figure(labels: np.ndarray, order: np.ndarray) -> go.Figure:
    """The layer x head grid with each layer's heads ordered by cluster, each cell coloured by its cluster and named
    by its head."""
    layers, heads = labels.shape
    count = int(labels.max()) + 1
    ordered = np.take_along_axis(labels, order, axis=1)
    scale = [
        (position / count + edge / count, CLUSTER_COLOURS[c % len(CLUSTER_COLOURS)])
        for c in range(count)
        for position, edge in ((c, 0.0), (c, 1.0))
    ]
    figure = go.Figure(
        go.Heatmap(
            z=ordered,
            zmin=-0.5,
            zmax=count - 0.5,
            text=[[f"h{h}" for h in row] for row in order],
            texttemplate="%{text}",
            colorscale=scale,
            colorbar=dict(title="cluster", tickvals=list(range(count))),
            hovertemplate="layer %{y}, %{text}: cluster %{z}<extra></extra>",
        )
    )
    figure.update_layout(
        xaxis=dict(title="each layer's heads, clustered and ordered by cluster", showticklabels=False),
        yaxis=dict(title="layer", autorange="reversed", tickmode="linear", tick0=0, dtick=1),
        height=max(240, 60 + 28 * layers),
        margin=dict(l=0, r=0, t=10, b=0),
    )
    return figure


def draw(page: DatasetPage) -> None:
    index = page.index
    key = index_key(index)
    means = head_means(key, statistic_columns(index), _index=index)
    if means.empty:
        st.info("No image of this index could be read: there are no head statistics.")
        return
    distances = per_image(key, DISTANCE_PX.name, _index=index)
    interval = bootstrap_interval(distances, seed=0)
    unit = DISTANCE_PX.unit
    # the titles are markdown above the charts, not Plotly's: a narrow page wraps them instead of cutting them
    st.markdown(f"**{DISTANCE_PX.title()} over {interval.images:,} images, with 95 % bootstrap intervals**")
    st.plotly_chart(interval_figure(interval, unit), key=dataset_key("distance"))
    widest = float(np.nanmax(interval.high - interval.low)) / 2
    st.caption(
        f"Each head's mean is a tick and its 95 % interval the bar through it; the widest is ±{widest:.3g} {unit}. "
        "Hover over a head for its bounds."
    )
    layer = st.slider("Layer", 0, index.layout["layers"] - 1, 0, key=dataset_key("settle_layer"))
    st.markdown(f"**Layer {layer}: the estimate as images are added**")
    st.plotly_chart(settling_figure(settling(distances), layer, unit), key=dataset_key("settling"))
    left, right = st.columns(2)
    left.markdown(f"**{ENTROPY.title()}, averaged over the dataset**")
    left.plotly_chart(
        untitled(drawing.layer_head_figure(as_grid(index, means, ENTROPY.name), "", ENTROPY.unit)),
        key=dataset_key("mean_heatmap"),
    )
    token = right.selectbox(
        PREFIX_SHARES.title(),
        share_columns(index),
        format_func=lambda c: c.removeprefix("to_"),
        key=dataset_key("token"),
    )
    right.markdown(f"**Mean {PREFIX_SHARES.unit} of attention {spoken(token)}**")
    right.plotly_chart(
        untitled(drawing.layer_head_figure(as_grid(index, means, token), "", PREFIX_SHARES.unit)),
        key=dataset_key("share"),
    )
    draw_clusters(index, means)
    extremes(index, page.photo_page, page.colormap, page.alpha)


def draw_clusters(index: DatasetIndex, means: pd.DataFrame) -> None:
    columns = statistic_columns(index, shown_only=True)
    profiles = np.stack([as_grid(index, means, c) for c in columns], axis=-1)  # (layers, heads, statistics)
    total = profiles.shape[0] * profiles.shape[1]
    count = st.number_input("Clusters", 1, min(8, total), min(4, total), key=dataset_key("clusters"))
    clusters = cluster_heads(np.nan_to_num(profiles), int(count))
    st.markdown("**Heads clustered by their dataset-averaged statistics** (each layer's heads ordered by cluster)")
    st.plotly_chart(clusters_figure(clusters.labels, clusters.order), key=dataset_key("cluster_grid"))
    summary = pd.DataFrame(
        {
            "cluster": range(int(count)),
            "heads": [int((clusters.labels == c).sum()) for c in range(int(count))],
            **{
                c: [profiles[..., k][clusters.labels == n].mean() for n in range(int(count))]
                for k, c in enumerate(columns)
            },
        }
    )
    st.dataframe(summary, hide_index=True)


def extreme_criteria(index: DatasetIndex) -> dict[str, tuple[str, str, str]]:
    """The choices of "most extreme images", from each shown statistic's ``highest`` and ``lowest`` phrases
    (explain.HEAD_STATISTICS): "column ORDER" -> (column of the heads table, SQL order, what it reads as)."""
    criteria = {}
    for statistic in HEAD_STATISTICS:
        for column in statistic.columns(index.layout["prefix_tokens"]) if statistic.shown else ():
            for order, phrase in (("DESC", statistic.highest), ("ASC", statistic.lowest)):
                if phrase:
                    criteria[f"{column} {order}"] = (column, order, phrase.format(column=spoken(column)))
    return criteria


def spoken(column: str) -> str:
    """A prefix-share column as a picker reads it: ``to_cls`` -> ``to cls`` ("attends most to cls", not
    "attends most to_cls"); other columns unchanged."""
    return column.replace("_", " ", 1) if column.startswith("to_") else column


def extremes(index: DatasetIndex, photo_page: st.Page, colormap: str, alpha: float) -> None:
    """For one head, the images where a statistic of it is largest or smallest."""
    st.markdown("**One head's most extreme images**")
    # the picker on a row of its own: in a third of an 800 px page its phrases were cut ("attends farthest")
    layer_field, head_field = st.columns(2)
    layer = layer_field.number_input("Layer", 0, index.layout["layers"] - 1, 0, key=dataset_key("extreme_layer"))
    head = head_field.number_input("Head", 0, index.layout["heads"] - 1, 0, key=dataset_key("extreme_head"))
    criteria = extreme_criteria(index)
    first = f"{DISTANCE_PX.name} DESC"  # the ViT paper's statistic: the head's farthest-looking images
    options = sorted(criteria, key=lambda c: c != first)  # stable: the others keep HEAD_STATISTICS' order
    choice = st.selectbox("Where it", options, format_func=lambda c: criteria[c][2], key=dataset_key("extreme_what"))
    column, order, _ = criteria[choice]
    found = index.query(
        f"SELECT h.image_id, i.path, i.label, h.{column} FROM heads h JOIN images i USING (image_id) "
        f"WHERE h.layer = {int(layer)} AND h.head = {int(head)} ORDER BY h.{column} {order}, h.image_id",
        limit=EXTREME_IMAGES,
    )
    st.dataframe(found, hide_index=True)
    thumbnails(index, found, photo_page, colormap, alpha, "extremes")
