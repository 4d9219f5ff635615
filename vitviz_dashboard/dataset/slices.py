"""The Slices tab (LIT's slices): accuracy or mean top-class probability by the values of one column of the images
table, or of two crossed (label x prediction, label x a metadata column), numeric columns cut into quantile bins;
each slice a bar with its count and its 95 % interval (Wilson's for accuracy, Student's t for the mean probability:
vitviz.dataset.analysis.slice_summary), beside the figure over all images. A click on a bar makes that slice's images
the selection, drawn below and in the Grid tab. A latent's firing is a slice on the Features tab."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from vitviz.dataset.analysis import OVERALL, SLICE_JOIN, SLICE_STATISTICS, slice_keys, slice_summary
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

MAX_ROWS = 2_000_000  # rows of the images table a slice table reads
MAX_SLICES = 60  # slices drawn in the chart (the table lists them all)
MAX_GROUPS = 12  # values of the second column drawn as groups of bars (the most frequent; CIFAR-10's ten all)
MAX_FIRSTS = 30  # values of the first column along a crossed chart's axis (the most frequent)
NONE = "(none)"  # the second column's picker: slice by one column
LEVEL = 0.95
# measure -> (its column, its interval's columns, its name)
MEASURES = {
    "accuracy": ("accuracy", "accuracy_low", "accuracy_high", "accuracy"),
    "mean probability": ("mean_probability", "probability_low", "probability_high", "mean top-class probability"),
}
CHART = dataset_key("slice_chart")
SEEN = dataset_key("slice_seen")  # the bar clicked in the run before: only a new click replaces the selection
COLOURS = (
    "#2a9d8f",
    "#e76f51",
    "#264653",
    "#e9c46a",
    "#8ab17d",
    "#9b5de5",
    "#f4a261",
    "#577590",
    "#d62828",
    "#6a994e",
    "#bc6c25",
    "#3a86ff",
)


def slice_columns(images: pd.DataFrame) -> list[str]:
    """The columns a table can be sliced by: label and prediction first, then other scalar columns, leaving out the
    per-image bookkeeping and text columns of one value per image (a path slices nothing)."""
    skip = {"image_id", "correct", "error", *SLICE_STATISTICS}
    lists = {c for c in images.columns if images[c].map(lambda v: isinstance(v, list | np.ndarray)).any()}
    numeric = {c for c in images.columns if pd.api.types.is_numeric_dtype(images[c])}
    unique = {c for c in images.columns if c not in numeric | lists and images[c].nunique() == len(images) > 1}
    usable = [c for c in images.columns if c not in skip | lists | unique]
    return [c for c in ("label", "prediction") if c in usable] + [c for c in usable if c not in ("label", "prediction")]


def bar(parts: pd.DataFrame, measure: str, name: str | None = None, colour: str = COLOURS[0]) -> go.Bar:
    """One trace of bars: each slice's ``measure`` with its count at its foot and, when the table has them, its
    interval as error bars; customdata[0] is the slice's name (what a click selects)."""
    value, low, high, words = MEASURES[measure]
    intervals = low in parts.columns and high in parts.columns
    extra = (
        np.stack([parts["slice"], parts[low], parts[high]], axis=1)
        if intervals
        else np.stack([parts["slice"], parts[value], parts[value]], axis=1)
    )
    hover = "%{customdata[0]}: " + words + " %{y:.1%}"
    if intervals:
        hover += f" ({LEVEL:.0%} interval " + "%{customdata[1]:.1%} to %{customdata[2]:.1%})"
    return go.Bar(
        x=parts["x"] if "x" in parts.columns else parts["slice"],
        y=parts[value],
        name=name,
        text=[f"n={n}" for n in parts["images"]],
        # each count at its bar's foot: above the bars, counts ran into the overall line and its label
        textposition="inside",
        insidetextanchor="start",
        textfont_color="white",
        customdata=extra,
        hovertemplate=hover + ", %{text}<extra></extra>",
        marker_color=colour,
        error_y=dict(
            type="data",
            array=(parts[high] - parts[value]).to_numpy(np.float64),
            arrayminus=(parts[value] - parts[low]).to_numpy(np.float64),
            color="#444",
            thickness=1.5,
        )
        if intervals
        else None,
    )


def chart(table: pd.DataFrame, by: str | list[str], measure: str = "accuracy") -> go.Figure:
    """Each slice's ``measure`` as a bar with its count and interval, and the figure over all images as a line across.
    Two columns: bars grouped by the first column's values, one colour per value of the second (its MAX_GROUPS most
    frequent)."""
    columns = [by] if isinstance(by, str) else list(by)
    value, _, _, words = MEASURES[measure]
    overall = table.iloc[0]
    parts = table.iloc[1:]
    axis: dict = {}
    if len(columns) == 1:
        traces = [bar(parts.iloc[:MAX_SLICES], measure)]
    else:
        first, second = columns
        parts = drawn_crossed(parts, first, second)
        groups = sorted(parts[second].unique(), key=str)
        traces = [
            bar(parts[parts[second] == g].assign(x=lambda f: f[first]), measure, f"{g}", COLOURS[i % len(COLOURS)])
            for i, g in enumerate(groups)
        ]
        # the axis in the values' own order, whichever group's bars come first
        axis = dict(categoryorder="array", categoryarray=sorted(parts[first].unique(), key=str))
    figure = go.Figure(traces)
    figure.add_hline(
        y=overall[value],
        line_dash="dash",
        annotation_text=f"all images {overall[value]:.1%}",
        annotation_position="top left",
    )
    figure.update_layout(
        xaxis=dict(title=columns[0], **axis),
        yaxis=dict(title=words, tickformat=".0%", range=[0, 1.1]),
        height=380,
        margin=dict(l=0, r=0, t=30, b=0),
        barmode="group",
        legend=dict(title=columns[1] if len(columns) > 1 else None, orientation="h", y=-0.25),
        showlegend=len(columns) > 1,
    )
    return figure


def drawn_crossed(parts: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """The slices a crossed chart draws: every slice whose first value is among the MAX_FIRSTS most frequent and
    whose second is among the MAX_GROUPS most frequent (all of them for up to that many values): never a cut that
    leaves some groups' bars out at random."""
    firsts = parts.groupby(first)["images"].sum().sort_values(ascending=False, kind="stable").index[:MAX_FIRSTS]
    groups = parts.groupby(second)["images"].sum().sort_values(ascending=False, kind="stable").index[:MAX_GROUPS]
    return parts[parts[first].isin(firsts) & parts[second].isin(groups)]


def chart_note(table: pd.DataFrame, columns: list[str]) -> str:
    """What the chart leaves out of the table, in words ("" when it draws every slice)."""
    parts = table.iloc[1:]
    drawn = len(parts) if len(columns) == 1 else len(drawn_crossed(parts, *columns))
    drawn = min(drawn, MAX_SLICES) if len(columns) == 1 else drawn
    if drawn == len(parts):
        return ""
    if len(columns) == 1:
        return f"the chart shows {MAX_SLICES} slices, the table all {len(parts)}"
    return (
        f"the chart shows {drawn} of the {len(parts)} slices (the {MAX_FIRSTS} most frequent values of "
        f"{columns[0]}, the {MAX_GROUPS} most frequent of {columns[1]}), the table all"
    )


def slice_ids(images: pd.DataFrame, by: list[str], bins: int, name: str) -> list[int]:
    """The image ids of the slice named ``name`` (its values joined by SLICE_JOIN), in image_id order."""
    keys = slice_keys(images, by, bins)
    names = keys[by[0]] if len(by) == 1 else keys[by[0]] + SLICE_JOIN + keys[by[1]]
    return sorted(int(i) for i in images.loc[names == name, "image_id"])


def slice_words(by: list[str], name: str) -> str:
    return "the slice " + " and ".join(f"{c} = {v}" for c, v in zip(by, name.split(SLICE_JOIN)))


def draw(page: DatasetPage) -> None:
    index = page.index
    images = index.query("SELECT * FROM images", limit=min(index.count, MAX_ROWS))
    if "correct" not in images.columns or images["correct"].notna().sum() == 0:
        st.info("No image has both a label and a prediction: there is no accuracy to slice.")
        return
    columns = slice_columns(images)
    first_field, second_field, measure_field, bins_field = st.columns([2, 2, 2, 1], vertical_alignment="bottom")
    by = first_field.selectbox("Slice by", columns, key=dataset_key("slice_by"))
    second = second_field.selectbox(
        "and by",
        [NONE, *(c for c in columns if c != by)],
        key=dataset_key("slice_by_2"),
        help="A second column crossed with the first: label and prediction, or label and a metadata column",
    )
    measure = measure_field.radio("Bars", list(MEASURES), horizontal=True, key=dataset_key("slice_measure"))
    bins = int(bins_field.number_input("Bins", 2, 20, 5, key=dataset_key("slice_bins"), help="Of numeric columns"))
    chosen = [by] if second in (NONE, by) else [by, second]
    table = slice_summary(images, chosen, bins, LEVEL)
    overall = table[table["slice"] == OVERALL].iloc[0]
    st.markdown(
        f"**All images**: accuracy {overall['accuracy']:.1%} ({LEVEL:.0%} interval {overall['accuracy_low']:.1%} to "
        f"{overall['accuracy_high']:.1%}) over {int(overall['labelled']):,} labelled images, mean top-class "
        f"probability {overall['mean_probability']:.1%} ({int(overall['images']):,} images)."
    )
    st.caption(
        f"Error bars: {LEVEL:.0%} intervals, Wilson's score interval for accuracy (a proportion; it stays in 0 to "
        "100 % and is wide for small slices) and Student's t for the mean probability. Click a bar (or tick a row "
        "of the table) to see its " + (f"images; {note}." if (note := chart_note(table, chosen)) else "images.")
    )
    event = st.plotly_chart(chart(table, chosen, measure), on_select="rerun", selection_mode="points", key=CHART)
    clicked = [p["customdata"][0] for p in drawing.chart_points(event) if p.get("customdata")]
    shares = ["accuracy", "accuracy_low", "accuracy_high", "mean_probability", "probability_low", "probability_high"]
    ticked = st.dataframe(  # a row ticked opens its slice too: a bar of accuracy 0 has nothing to click
        # one column: its values are the slices' names already
        (table.drop(columns=chosen) if len(chosen) == 1 else table).style.format(
            dict.fromkeys(shares, "{:.1%}"), na_rep="-"
        ),
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key=dataset_key("slice_table"),
    )
    clicked += [table["slice"].iloc[r] for r in ticked.selection.rows if r > 0]  # row 0: all images
    if clicked and clicked != st.session_state.get(SEEN):  # a new click, not the same one on a rerun
        ids = sorted({i for name in clicked for i in slice_ids(images, chosen, bins, str(name))})
        words = " or ".join(slice_words(chosen, str(name)) for name in clicked)
        grid.select(index, ids, words, "slice")
    st.session_state[SEEN] = clicked
    selection = grid.current(index)
    if selection is not None and selection.source == "slice":
        grid.select_button(
            index, selection.ids, selection.title, "slice", "Open them in the Grid tab", dataset_key("slice_grid")
        )
        grid.grid(index, selection, page.photo_page, page.colormap, page.alpha)
