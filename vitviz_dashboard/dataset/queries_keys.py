"""Queries and keys of one head, jointly (AttentionViz, Yeh et al. 2023): the patch tokens' queries and keys of a
sample of the index's images, the keys shifted by mean(q) - mean(k) (every softmax unchanged), in one PCA space.
Coloured by query/key, row, column or image; a click on a point shows its patch in its photo.

The index stores no queries or keys, so the index's model runs again on the sample's photos, in the library
(vitviz.dataset.views.query_key_points), through the page's cache (cache/dataset.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.express as px
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz_dashboard.cache.dataset import query_key_points
from vitviz_dashboard.dataset import drawing
from vitviz_dashboard.dataset.opening import index_key, model_of, photo, read_photo
from vitviz_dashboard.state import dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

COLOUR_BY = ["query or key", "row", "column", "image"]
POINT = dataset_key("qk_point")  # the point whose patch is shown: typed, or set by a click on the chart
CLICKED = dataset_key("qk_clicked")  # the chart's clicked point in the run before: only a new click sets POINT


def sample_ids(index: DatasetIndex, count: int) -> list[tuple[int, str]]:
    """``count`` readable images in a seeded random order: (image_id, path)."""
    readable = index.query("SELECT image_id, path FROM images WHERE error IS NULL ORDER BY image_id", limit=10_000_000)
    chosen = np.sort(np.random.default_rng(0).permutation(len(readable))[:count])
    return [(int(readable["image_id"].iloc[i]), str(readable["path"].iloc[i])) for i in chosen]


KIND_COLOURS = {"query": "#1b9e77", "key": "#d95f02"}  # AttentionViz's convention: two hues, not two shades


def draw(page: DatasetPage) -> None:
    index = page.index
    layers, heads = index.layout["layers"], index.layout["heads"]
    # two rows of two: in one row of four, "Colour by" was cut to "query or l" at 800 px
    layer_field, head_field = st.columns(2)
    count_field, colour_field = st.columns(2)
    layer = layer_field.number_input("Layer", 0, layers - 1, layers - 1, key=dataset_key("qk_layer"))
    head = head_field.number_input("Head", 0, heads - 1, 0, key=dataset_key("qk_head"))
    count = count_field.number_input(
        "Images", 1, 64, 8, key=dataset_key("qk_images"), help="the sample the model runs on"
    )
    colour = colour_field.selectbox("Colour by", COLOUR_BY, key=dataset_key("qk_colour"))
    sample = sample_ids(index, int(count))
    if not sample:
        st.info("No image of this index could be read.")
        return
    model = model_of(index)
    if model is None:
        return
    read = [read_photo(index, image_id, path) for image_id, path in sample]
    failed = [(image_id, path, reason) for (image_id, path), (data, reason) in zip(sample, read) if data is None]
    if failed:  # one message for the sample, not one per image
        image_id, path, reason = failed[0]
        others = f", and {len(failed) - 1} more" if len(failed) > 1 else ""
        st.warning(
            f"The model cannot be run on the sample: {len(failed)} of its {len(sample)} images cannot be read. "
            f"Image {image_id} ({path}): {reason}{others}."
        )
        return
    photos = [data for data, _ in read]
    precision = str(index.manifest["options"].get("precision", "fp32"))
    frame = query_key_points(
        index_key(index), int(layer), int(head), tuple(sample), precision, _model=model, _photos=tuple(photos)
    )
    column = {"query or key": "kind", "row": "row", "column": "column", "image": "image"}[colour]
    shown = frame.assign(image=frame["image"].astype(str)) if column == "image" else frame
    figure = px.scatter(
        shown,
        x="pc1",
        y="pc2",
        color=column,
        color_discrete_map=KIND_COLOURS,  # used when colouring by kind only
        hover_data=["kind", "image", "row", "column"],
        title=f"Layer {int(layer)}, head {int(head)}: queries and keys of {len(sample)} images<br>"  # two short lines:
        f"<sup>PCA, {sum(frame.attrs['explained']):.0%} of the variance</sup>",  # a Plotly title never wraps
    )
    figure.update_traces(marker=dict(size=5, opacity=0.7))
    figure.update_layout(height=520, margin=dict(l=0, r=0, t=60, b=0), title_font_size=14)
    event = st.plotly_chart(figure, on_select="rerun", selection_mode="points", key=dataset_key("qk_chart"))
    points = drawing.chart_points(event)
    clicked = (points[0]["x"], points[0]["y"]) if points else None
    if clicked and clicked != st.session_state.get(CLICKED):  # a new click on the chart picks the point below
        chosen = frame[(frame.pc1 == clicked[0]) & (frame.pc2 == clicked[1])]
        if len(chosen):
            st.session_state[POINT] = int(chosen.index[0])
    st.session_state[CLICKED] = clicked
    if not 0 <= st.session_state.get(POINT, 0) < len(frame):  # a smaller sample since
        st.session_state[POINT] = 0
    st.session_state.setdefault(POINT, 0)  # the default in the state only: a click sets the state (Streamlit warns
    # of a widget given both a value and a state)
    number = st.number_input("Point", 0, len(frame) - 1, key=POINT, help="or click one in the chart")
    point = frame.iloc[int(number)]
    shown_photo = photo(index, int(point.image), str(point.path))
    if shown_photo is not None:
        image, box = shown_photo
        st.image(
            drawing.marked_thumbnail(image, (int(point.row), int(point.column)), index.grid, box, side=320),
            caption=f"The {point.kind} of patch ({point.row}, {point.column}) of image {point.image} "
            f"({drawing.breakable(point.path)})",
        )
