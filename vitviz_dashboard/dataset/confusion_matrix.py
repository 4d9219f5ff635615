"""Where the model is wrong: the confusion matrix, whose cells select their images, and per-class mean maps (a
stored map averaged over a class's images)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.views import quote
from vitviz_dashboard.cache.dataset import class_mean, confusion
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.opening import index_key
from vitviz_dashboard.dataset.table import MAX_THUMBNAILS, map_kinds, map_name, thumbnails
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

MAX_CLASSES = 40  # classes the matrix and the mean maps show (the most frequent labels)
CLASS_MEAN_WIDTH = 120  # px: a per-class mean map's card; "automobile (50)" fits on one line
TRUE, PREDICTED = dataset_key("true"), dataset_key("predicted")  # the cell pickers below the chart
CELLS = dataset_key("cells")  # the cells whose images are shown: a click's or a box's, until a picker changes
CHARTED = dataset_key("charted")  # the chart's selection in the run before: only a new one sets the pickers


CELL_PX = 36  # a cell's side when the page is wide enough: a count of four digits fits inside it
CELL_TRACE = 1  # the trace of the selectable cell markers
AXIS_PX = 110  # room for the class names on the left and below, the title above


def confusion_height(classes: int) -> int:
    """The figure's height in pixels for ``classes`` classes: room for square cells of CELL_PX and the axes' names.
    The y axis is anchored to the x axis, so on a narrower page the cells shrink evenly and stay square."""
    return AXIS_PX + CELL_PX * max(1, classes)


def confusion_figure(classes: list[str], matrix: np.ndarray) -> go.Figure:
    """The matrix as a heatmap (square cells, each with its count), and over it one invisible marker per cell (a
    scatter, the only kind of trace a click or a box selects in Plotly); a selected cell gets an outline."""
    n = len(classes)
    true, predicted = np.nonzero(matrix >= 0)
    counts = matrix[true, predicted]
    positions = np.arange(n)
    font = int(np.clip(CELL_PX // 3, 8, 13))
    heatmap = go.Heatmap(
        x=positions,
        y=positions,
        z=np.log1p(matrix),
        text=[[str(c) if c else "" for c in row] for row in matrix],
        texttemplate="%{text}",
        textfont=dict(size=font),
        colorscale="Blues",
        showscale=False,
        hoverinfo="skip",  # the markers above answer the hover and the click
        xgap=1,
        ygap=1,
    )
    cells = go.Scatter(
        x=predicted,
        y=true,
        mode="markers",
        marker=dict(symbol="square", size=CELL_PX - 10, color="rgba(0, 0, 0, 0)"),
        selected=dict(marker=dict(color="rgba(231, 111, 81, 0.55)")),  # see-through: the count stays readable
        unselected=dict(marker=dict(opacity=0)),
        customdata=np.stack([[classes[i] for i in true], [classes[j] for j in predicted], counts], axis=-1),
        hovertemplate="true %{customdata[0]}, predicted %{customdata[1]}: %{customdata[2]} images<extra></extra>",
        showlegend=False,
    )
    ticks = dict(tickmode="array", tickvals=list(positions), ticktext=classes, showgrid=False, zeroline=False)
    figure = go.Figure([heatmap, cells])  # the cells' markers are trace CELL_TRACE
    for i in positions:  # the correct cells outlined
        figure.add_shape(type="rect", x0=i - 0.5, x1=i + 0.5, y0=i - 0.5, y1=i + 0.5, line=dict(color="#2a9d8f"))
    figure.update_layout(
        xaxis=dict(title="predicted", range=[-0.5, n - 0.5], constrain="domain", tickangle=-45, **ticks),
        yaxis=dict(
            title="true label",
            range=[n - 0.5, -0.5],  # the first class on top
            scaleanchor="x",  # square cells at any width
            constrain="domain",
            **ticks,
        ),
        height=confusion_height(n),
        margin=dict(l=0, r=0, t=36, b=0),  # room for Plotly's tool bar above the first row
        hovermode="closest",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return figure


def selected_cells(points: list[dict], classes: list[str]) -> list[tuple[str, str]]:
    """The (true, predicted) cells of a chart selection: a click gives one, a box or a lasso several. Points of
    the cell markers only."""
    cells = []
    for point in points:
        x, y = point.get("x"), point.get("y")
        if point.get("curve_number", CELL_TRACE) != CELL_TRACE or x is None or y is None:
            continue
        if 0 <= int(y) < len(classes) and 0 <= int(x) < len(classes):
            cells.append((classes[int(y)], classes[int(x)]))
    return cells


def _picked(classes: list[str]) -> None:
    """A picker changed: its cell replaces the chart's selection; the other picker, blank while several cells were
    selected, takes the first selected cell's class (or the first class)."""
    cells = st.session_state.pop(CELLS, None) or [(classes[0], classes[0])]
    for key, side in ((TRUE, 0), (PREDICTED, 1)):
        if st.session_state.get(key) is None:
            st.session_state[key] = cells[0][side]


def cells_clause(cells: list[tuple[str, str]]) -> str:
    """The WHERE condition of images in any of these (true, predicted) cells."""
    return " OR ".join(f"(label = {quote(t)} AND prediction = {quote(p)})" for t, p in cells)


def draw(page: DatasetPage) -> None:
    index = page.index
    columns = index.query("SELECT * FROM images", limit=1).columns
    if "prediction" not in columns:
        st.info("This index's model is a backbone (no classes): there is nothing to be wrong about.")
        return
    classes, matrix = confusion(index_key(index), _index=index)
    if not classes:
        st.info("No image of this index has a label: the source gave none (class sub-folders give labels).")
        return
    if len(classes) > MAX_CLASSES:
        keep = np.argsort(-matrix.sum(1), kind="stable")[:MAX_CLASSES]
        keep.sort()
        classes, matrix = [classes[i] for i in keep], matrix[np.ix_(keep, keep)]
        st.caption(f"The {MAX_CLASSES} most frequent labels.")
    accuracy = np.trace(matrix) / max(1, matrix.sum())
    st.markdown(
        f"**Confusion matrix**: {accuracy:.1%} of {matrix.sum():,} labelled images correct. Click a cell, or drag a "
        "box around several (the box tool above the chart)."
    )
    event = st.plotly_chart(
        confusion_figure(classes, matrix),
        on_select="rerun",
        selection_mode=("points", "box", "lasso"),
        key=dataset_key("confusion"),
    )
    chosen = selected_cells(drawing.chart_points(event), classes)
    if chosen and chosen != st.session_state.get(CHARTED):  # a new click or box: its cells, and the pickers set
        st.session_state[CELLS] = chosen
        # one cell: the pickers show it; several: the pickers are blank and say how many (not the first one's)
        st.session_state[TRUE], st.session_state[PREDICTED] = chosen[0] if len(set(chosen)) == 1 else (None, None)
    st.session_state[CHARTED] = chosen
    selected = [c for c in st.session_state.get(CELLS, []) if c[0] in classes and c[1] in classes]
    for key in (TRUE, PREDICTED):  # the first class until a cell is chosen (the default in the state: no warning)
        if st.session_state.get(key) not in classes and not (len(selected) > 1 and st.session_state.get(key) is None):
            st.session_state[key] = classes[0]
    several = f"{len(selected)} cells selected" if len(selected) > 1 else "choose a class"
    left, right = st.columns(2)
    true = left.selectbox(
        "True label", classes, index=None, key=TRUE, on_change=_picked, args=(classes,), placeholder=several
    )
    predicted = right.selectbox(
        "Predicted", classes, index=None, key=PREDICTED, on_change=_picked, args=(classes,), placeholder=several
    )
    cells = selected or [(true or classes[0], predicted or classes[0])]
    cell = index.query(
        "SELECT image_id, path, label, prediction, probability FROM images "
        f"WHERE ({cells_clause(cells)}) AND error IS NULL ORDER BY probability DESC, image_id",
        limit=MAX_THUMBNAILS,
    )
    named = "; ".join(f"{t} predicted as {p}" for t, p in cells[:4]) + ("; ..." if len(cells) > 4 else "")
    many = f"{len(cells)} cells ({named})" if len(cells) > 1 else named
    st.caption(f"{many}: the most confident {len(cell)} shown.")
    everyone = index.query(
        f"SELECT image_id FROM images WHERE ({cells_clause(cells)}) AND error IS NULL ORDER BY probability DESC, "
        "image_id",
        limit=index.count,
    )["image_id"].tolist()
    grid.select_button(index, everyone, many, "confusion", f"All {len(everyone)} in the grid", dataset_key("cell_grid"))
    thumbnails(index, cell, page.photo_page, page.colormap, page.alpha, "confusion")
    class_means(index, classes, page.colormap)


def class_means(index: DatasetIndex, classes: list[str], colormap: str) -> None:
    """Each class's mean of the chosen stored map, all on one colour scale (its legend above), so they compare."""
    st.markdown("**Per-class mean maps**: a stored map averaged over each class's images")
    kind = st.selectbox("Map", map_kinds(index), key=dataset_key("class_map"), format_func=map_name)
    means = [class_mean(index_key(index), label, kind, _index=index) for label in classes]
    if not means:
        return
    value_range = grid.legend(np.stack([average for average, _ in means]), kind, colormap, "every class")
    # fixed-width cards in a row that wraps (as the Grid's): six columns of an 800 px page were so narrow that
    # "automobile (50)" broke inside the word
    with st.container(horizontal=True, gap="small", key=dataset_key("class_means")):
        for label, (average, count) in zip(classes, means):
            with st.container(width=CLASS_MEAN_WIDTH):
                picture = drawing.map_picture(average, colormap, value_range=value_range)
                st.image(picture, caption=f"{label} ({count})", width="stretch")
