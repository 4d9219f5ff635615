"""Arrays in, plotly figures out: heatmaps, grids of maps, predictions, per-layer and per-head charts. No streamlit."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from PIL import ImageColor

from vitviz.render.overlays import as_array, plotly_colorscale, rescale

# Every figure names its template, so it looks the same whether or not streamlit (which swaps plotly's
# default template for one of placeholder colours) has been imported. It is the part of plotly's
# "plotly_white" these figures use: building a figure with the whole of it costs about 8 ms
# (copying every trace type's defaults), with this part about 1 ms.
_GRID = dict(
    automargin=True,
    gridcolor="#EBF0F8",
    linecolor="#EBF0F8",
    ticks="",
    zerolinecolor="#EBF0F8",
    zerolinewidth=2,
    title=dict(standoff=15),
)
TEMPLATE = go.layout.Template(
    layout=dict(
        paper_bgcolor="white",
        plot_bgcolor="white",
        font=dict(color="#2a3f5f"),
        hovermode="closest",
        hoverlabel=dict(align="left"),
        title=dict(x=0.05),
        xaxis=_GRID,
        yaxis=_GRID,
        colorway=["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880"],
    ),
    data=dict(heatmap=[dict(colorbar=dict(outlinewidth=0, ticks=""))]),
)


def _figure(traces: list[dict], **layout) -> go.Figure:
    """A figure built in one constructor call: plotly validates everything once. Building it and then
    calling update_layout / update_xaxes takes over twice as long (a heatmap: 9.5 ms instead of 4.1,
    bench/bench_render.py), and the page builds a new figure for every new map or colormap."""
    return go.Figure(data=traces, layout=dict(template=TEMPLATE, **layout))


_HIDDEN_AXIS = dict(showticklabels=False, showgrid=False, zeroline=False)


def heatmap_figure(patch_map, title: str = "", colormap: str = "inferno") -> go.Figure:
    """The raw patch grid with its exact values on hover (row 0 at the top, square cells)."""
    heatmap = dict(
        type="heatmap",
        z=as_array(patch_map),
        colorscale=plotly_colorscale(colormap),
        colorbar=dict(thickness=14),
        hovertemplate="row %{y}, col %{x}<br>%{z:.5f}<extra></extra>",
    )
    # the grid at the top of the figure (under the title), not floating in its middle when the column is narrow
    return _figure(
        [heatmap],
        title=dict(text=title),
        margin=dict(l=0, r=0, t=40 if title else 0, b=0),
        yaxis=dict(autorange="reversed", scaleanchor="x", constraintoward="top", **_HIDDEN_AXIS),
        xaxis=dict(constrain="domain", **_HIDDEN_AXIS),
    )


def grid_figure(
    maps,
    titles: list[str],
    columns: int,
    colormap: str = "inferno",
    rescale_each: bool = True,
    marks: list[tuple[int, int]] | None = None,
    height: int | None = None,
) -> go.Figure:
    """Small multiples: the maps (n, rows, cols) tiled ``columns`` to a row in one heatmap.

    One trace with gaps (not one subplot per map) keeps big grids, such as 12 x 12 heads,
    fast to build and to draw. With ``rescale_each`` every map uses its own colour range
    (patterns comparable); otherwise all share one range (magnitudes comparable), shown by a colorbar.
    Hover shows each cell's map, row, column and raw value. ``marks`` outlines one (row, col) cell per map
    (e.g. each map's reference patch); ``height`` in pixels overrides the default.
    """
    values = as_array(maps)
    count, rows, cols = values.shape
    if len(titles) != count:
        raise ValueError(f"{len(titles)} titles for {count} maps")
    if marks is not None and len(marks) != count:
        raise ValueError(f"{len(marks)} marks for {count} maps")
    columns = max(1, min(columns, count))
    tile_rows = -(-count // columns)
    gap = max(1, round(0.35 * rows))  # rows between tiles: room for each tile's title
    height_cells, width = tile_rows * (rows + gap) - gap, columns * (cols + 1) - 1
    shown = np.full((height_cells, width), np.nan, dtype=np.float32)  # gaps stay NaN, drawn as background
    raw = np.full((height_cells, width), np.nan, dtype=np.float32)
    labels = np.full((height_cells, width), "", dtype=object)
    annotations, mark_x, mark_y = [], [], []
    for index in range(count):
        top, left = (index // columns) * (rows + gap), (index % columns) * (cols + 1)
        shown[top : top + rows, left : left + cols] = rescale(values[index]) if rescale_each else values[index]
        raw[top : top + rows, left : left + cols] = values[index]
        labels[top : top + rows, left : left + cols] = [
            [f"{titles[index]}, row {r}, col {c}" for c in range(cols)] for r in range(rows)
        ]
        annotations.append(
            dict(
                x=left + (cols - 1) / 2,
                y=top - 0.5,
                text=titles[index],
                showarrow=False,
                yanchor="bottom",
                font=dict(size=11),
            )
        )
        if marks is not None:
            mark_y.append(top + marks[index][0])
            mark_x.append(left + marks[index][1])
    heatmap = dict(
        type="heatmap",
        z=shown,
        customdata=raw,
        text=labels,
        colorscale=plotly_colorscale(colormap),
        showscale=not rescale_each,
        hovertemplate="%{text}: %{customdata:.5f}<extra></extra>",
        hoverongaps=False,
    )
    traces = [heatmap]
    if marks is not None:
        traces.append(
            dict(
                type="scatter",
                x=mark_x,
                y=mark_y,
                mode="markers",
                hoverinfo="skip",
                showlegend=False,
                marker=dict(symbol="square-open", size=9, color="#00ffff", line=dict(width=2)),
            )
        )
    default_height = max(160, int(tile_rows * 130 * max(1.0, 6 / columns) * rows / max(rows, cols)) + 30)
    return _figure(
        traces,
        annotations=annotations,
        margin=dict(l=0, r=0, t=22, b=0),
        height=height or default_height,
        plot_bgcolor="rgba(0,0,0,0)",  # the tiles at the top of a figure taller than they need, under its heading
        yaxis=dict(autorange="reversed", scaleanchor="x", visible=False, constraintoward="top"),
        xaxis=dict(visible=False, constrain="domain"),
    )


def predictions_figure(probabilities, class_names: list[str], top_k: int = 5) -> go.Figure:
    """Horizontal bars of the top-k classes, highest on top."""
    values = as_array(probabilities)
    order = np.argsort(values)[::-1][:top_k][::-1]
    bars = dict(
        type="bar",
        x=values[order],
        y=[class_names[i] for i in order],
        orientation="h",
        text=[f"{values[i]:.1%}" for i in order],
        textposition="auto",
    )
    # room on the right for the "100%" tick, centred on the axis's end
    return _figure(
        [bars],
        height=60 + 32 * len(order),
        margin=dict(l=0, r=18, t=10, b=0),
        xaxis=dict(range=[0, 1], tickformat=".0%"),
        yaxis=dict(automargin=True),
    )


def _tick_step(count: int) -> int:
    """Every layer or head named up to 16 (Plotly's automatic ticks skip some), every other one past that: a chart
    half a page wide has no room for 24 or 32 labels."""
    return 1 if count <= 16 else 2


def attention_distance_figure(mean_distance) -> go.Figure:
    """Mean attention distance against depth, one dot per head (ViT paper, Fig. 7 right)."""
    values = as_array(mean_distance)  # (layers, heads)
    layers, heads = values.shape
    dots = [
        dict(
            type="scatter",
            x=np.arange(layers),
            y=values[:, head],
            mode="markers",
            name=f"head {head}",
            hovertemplate="layer %{x}: %{y:.1f} px<extra>head " + str(head) + "</extra>",
        )
        for head in range(heads)
    ]
    return _figure(
        dots,
        xaxis=dict(title=dict(text="layer (depth)"), tickmode="linear", tick0=0, dtick=_tick_step(layers)),
        yaxis=dict(title=dict(text="mean attention distance (pixels)")),
        margin=dict(l=0, r=0, t=10, b=0),
        showlegend=heads <= 16,
    )


def layer_head_figure(values, title: str, colorbar: str) -> go.Figure:
    """A (layers, heads) table as a heatmap, e.g. attention entropy, with ticks by ``_tick_step``."""
    z = as_array(values)
    layers, heads = z.shape
    heatmap = dict(
        type="heatmap",
        z=z,
        colorscale=plotly_colorscale("viridis"),
        colorbar=dict(title=dict(text=colorbar)),
        hovertemplate="layer %{y}, head %{x}: %{z:.3f}<extra></extra>",
    )
    return _figure(
        [heatmap],
        title=dict(text=title),
        xaxis=dict(title=dict(text="head"), tickmode="linear", tick0=0, dtick=_tick_step(heads)),
        yaxis=dict(
            title=dict(text="layer"), autorange="reversed", tickmode="linear", tick0=0, dtick=_tick_step(layers)
        ),
        margin=dict(l=0, r=0, t=40, b=0),
    )


def perturbation_figure(x, curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> go.Figure:
    """Probability against the fraction of patches replaced: ``curves`` maps each method to its (most-relevant-first,
    least-relevant-first) probabilities at ``x``. One colour per method, solid for most first, dashed for least
    first."""
    colours = TEMPLATE.layout.colorway
    lines = []
    for index, (method, pair) in enumerate(curves.items()):
        for order, y, dash in (("most relevant first", pair[0], "solid"), ("least relevant first", pair[1], "dash")):
            lines.append(
                dict(
                    type="scatter",
                    x=as_array(x),
                    y=as_array(y),
                    mode="lines+markers",
                    name=f"{method}, {order}",
                    legendgroup=method,
                    line=dict(color=colours[index % len(colours)], dash=dash),
                    hovertemplate="%{x:.0%} replaced: %{y:.3f}<extra>" + f"{method}, {order}</extra>",
                )
            )
    return _figure(
        lines,
        xaxis=dict(title=dict(text="fraction of patches replaced"), tickformat=".0%"),
        yaxis=dict(title=dict(text="target probability"), range=[0, 1]),
        margin=dict(l=0, r=0, t=10, b=0),
        legend=dict(orientation="h", x=0, y=-0.25, yanchor="top"),
    )


# --- prefix tokens, token norms ----------------------------------------------------------------

_PATCHES_COLOUR = "rgb(200, 208, 220)"  # "patches" in the prefix-token charts: the rest, in grey


def _token_colours(names: list[str]) -> list[str]:
    """The template's colours for the prefix tokens in order, grey for "patches" (the last name)."""
    colours = TEMPLATE.layout.colorway
    return [colours[i % len(colours)] for i in range(len(names) - 1)] + [_PATCHES_COLOUR]


def prefix_attention_figure(shares, names: list[str], title: str = "") -> go.Figure:
    """Stacked bars, one per head, of where the patches' attention goes in one layer: to each prefix token
    and, last, among the patches. ``shares`` is (heads, P + 1) (explain.attention_to_prefix_tokens for one
    layer), ``names`` the P + 1 names ("[CLS]", ..., "patches"); each bar sums to 1."""
    values = as_array(shares)
    heads, parts = values.shape
    if len(names) != parts:
        raise ValueError(f"{len(names)} names for {parts} shares per head")
    bars = [
        dict(
            type="bar",
            x=np.arange(heads),
            y=values[:, i],
            name=name,
            marker=dict(color=colour),
            hovertemplate="head %{x}: %{y:.1%} to " + name + "<extra></extra>",
        )
        for i, (name, colour) in enumerate(zip(names, _token_colours(names)))
    ]
    # the legend goes below the bars: beside them it would squeeze a chart in half a narrow page
    return _figure(
        bars,
        barmode="stack",
        title=dict(text=title),
        height=360,
        margin=dict(l=0, r=0, t=40 if title else 10, b=0),
        legend=dict(traceorder="normal", orientation="h", x=0, y=-0.2, yanchor="top"),
        xaxis=dict(title=dict(text="head"), dtick=1 if heads <= 24 else None),
        yaxis=dict(range=[0, 1], tickformat=".0%", title=dict(text="share of attention")),
    )


def _layer_marker(layer: int | None) -> list[dict]:
    """A dashed vertical line at the chosen layer."""
    if layer is None:
        return []
    return [
        dict(
            type="line",
            xref="x",
            yref="paper",
            x0=layer,
            x1=layer,
            y0=0,
            y1=1,
            line=dict(color="rgba(42, 63, 95, 0.5)", width=1, dash="dash"),
        )
    ]


def prefix_attention_by_layer_figure(shares, names: list[str], layer: int | None = None) -> go.Figure:
    """The patches' attention to each prefix token (and among the patches), the mean over heads, against
    depth: one line per token. ``shares`` is (layers, heads, P + 1); ``layer`` is marked."""
    values = as_array(shares).mean(axis=1)  # (layers, P + 1)
    if len(names) != values.shape[1]:
        raise ValueError(f"{len(names)} names for {values.shape[1]} shares per head")
    lines = [
        dict(
            type="scatter",
            x=np.arange(len(values)),
            y=values[:, i],
            mode="lines+markers",
            name=name,
            line=dict(color=colour),
            hovertemplate="layer %{x}: %{y:.1%} to " + name + "<extra></extra>",
        )
        for i, (name, colour) in enumerate(zip(names, _token_colours(names)))
    ]
    return _figure(
        lines,
        shapes=_layer_marker(layer),
        height=360,
        margin=dict(l=0, r=0, t=40, b=0),
        title=dict(text="Mean over heads"),
        showlegend=False,  # the bars' colours and legend
        xaxis=dict(title=dict(text="layer (depth)"), dtick=1 if len(values) <= 24 else None),
        yaxis=dict(range=[0, 1], tickformat=".0%", title=dict(text="share of attention")),
    )


def token_norms_figure(norms, prefix_names: list[str], layer: int | None = None) -> go.Figure:
    """Token norms against depth: the median and the largest patch-token norm of each layer, and each
    prefix token's. ``norms`` is (layers, T) with the prefix tokens first (explain.token_norms); Darcet et
    al.'s high-norm artifacts show as a max far above the median from some depth on."""
    values = as_array(norms)
    p = len(prefix_names)
    patches = values[:, p:]
    if patches.shape[1] == 0:
        raise ValueError(f"{len(prefix_names)} prefix names leave no patch tokens among {values.shape[1]}")
    layers = np.arange(len(values))
    series = [
        ("median patch", np.median(patches, axis=1), dict(color="#2a3f5f")),
        ("max patch", patches.max(axis=1), dict(color="#2a3f5f", dash="dot")),
    ]
    colours = TEMPLATE.layout.colorway
    series += [(name, values[:, i], dict(color=colours[i % len(colours)])) for i, name in enumerate(prefix_names)]
    lines = [
        dict(
            type="scatter",
            x=layers,
            y=y,
            mode="lines+markers",
            name=name,
            line=line,
            hovertemplate="layer %{x}: %{y:.2f}<extra>" + name + "</extra>",
        )
        for name, y, line in series
    ]
    return _figure(
        lines,
        shapes=_layer_marker(layer),
        height=300,
        margin=dict(l=0, r=0, t=10, b=0),
        xaxis=dict(title=dict(text="layer (depth)"), dtick=1 if len(values) <= 24 else None),
        yaxis=dict(title=dict(text="token norm (L2)"), rangemode="tozero"),
    )


# one colour per class a votes map names, the class explained first; "other" gathers the rest
VOTE_COLOURS = [
    "#EF553B",
    "#636efa",
    "#00cc96",
    "#ab63fa",
    "#FFA15A",
    "#19d3f3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
]
OTHER_COLOUR = "#d0d4dc"


def vote_classes(votes, count: int, target: int, most: int = len(VOTE_COLOURS)) -> tuple[list[int], bool]:
    """The classes a votes map (class indices, of ``count`` classes) names, each in its own colour: all of them when
    there are at most ``most`` (a class no patch votes for keeps its place in the legend), else the target and the
    most-voted others. The target comes first, so it keeps its colour from block to block. And whether the other
    classes are left to "other"."""
    if count <= most:
        return [target] + [c for c in range(count) if c != target], False
    classes, counts = np.unique(np.asarray(votes, dtype=np.int64), return_counts=True)
    ranked = [int(c) for c in classes[np.argsort(-counts, kind="stable")] if c != target]
    return [target] + ranked[: most - 1], True


def vote_codes(votes, shown: list[int]) -> np.ndarray:
    """Each patch's place among ``shown`` (vote_classes), len(shown) for "other"."""
    values = np.asarray(votes, dtype=np.int64)
    codes = np.full(values.shape, len(shown), dtype=np.int64)
    for code, index in enumerate(shown):
        codes[values == index] = code
    return codes


def vote_colours(votes, shown: list[int]) -> np.ndarray:
    """(rows, cols, 3) uint8: each patch in its class's colour (vote_classes), "other" in grey."""
    table = np.array([ImageColor.getrgb(c) for c in [*VOTE_COLOURS[: len(shown)], OTHER_COLOUR]], dtype=np.uint8)
    return table[vote_codes(votes, shown)]


def votes_figure(votes, class_names: list[str], target: int, most: int = len(VOTE_COLOURS)) -> go.Figure:
    """The class each patch votes for (a (rows, cols) map of class indices, the logit lens's votes), one colour
    per class (vote_classes), with each patch's class on hover."""
    values = np.asarray(votes, dtype=np.int64)
    shown, other = vote_classes(values, len(class_names), target, most)
    labels = [class_names[i] for i in shown] + ["other"] * other
    palette = VOTE_COLOURS[: len(shown)] + [OTHER_COLOUR] * other
    n = len(palette)
    colorscale = [step for i, colour in enumerate(palette) for step in ((i / n, colour), ((i + 1) / n, colour))]
    heatmap = dict(
        type="heatmap",
        z=vote_codes(values, shown).astype(np.float32),
        zmin=-0.5,
        zmax=n - 0.5,
        colorscale=colorscale,
        hovertemplate="row %{y}, col %{x}: %{text}<extra></extra>",
        text=np.asarray([class_names[i] for i in values.ravel()], dtype=object).reshape(values.shape),
        colorbar=dict(tickvals=list(range(n)), ticktext=labels, len=1, thickness=12),
    )
    return _figure(
        [heatmap],
        margin=dict(l=0, r=0, t=0, b=0),
        height=320,
        yaxis=dict(autorange="reversed", scaleanchor="x", constraintoward="top", **_HIDDEN_AXIS),
        xaxis=dict(constrain="domain", **_HIDDEN_AXIS),
    )


def lens_depth_figure(readout, share, layer: int | None = None) -> go.Figure:
    """The logit lens against depth: the class's probability when the head reads each block's output whole
    (``readout``, (layers,)), and the share of patches that vote for the class on their own (``share``)."""
    readout, share = as_array(readout), as_array(share)
    layers = np.arange(len(readout))
    lines = [
        dict(
            type="scatter",
            x=layers,
            y=readout,
            mode="lines+markers",
            name="head reading the block",
            hovertemplate="block %{x}: %{y:.1%}<extra>class probability</extra>",
        ),
        dict(
            type="scatter",
            x=layers,
            y=share,
            mode="lines+markers",
            name="patches voting for the class",
            line=dict(dash="dot"),
            hovertemplate="block %{x}: %{y:.1%}<extra>patches voting for it</extra>",
        ),
    ]
    return _figure(
        lines,
        shapes=_layer_marker(layer),
        height=300,
        margin=dict(l=0, r=0, t=10, b=0),
        legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
        xaxis=dict(title=dict(text="block (depth)"), dtick=1 if len(layers) <= 24 else None),
        yaxis=dict(range=[0, 1.02], tickformat=".0%"),
    )
