"""Heads & layers: what the tokens the head reads attend to, for every head of a layer, two (image,
layer, head) choices side by side, and every layer x head at once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import streamlit as st

from vitviz.analysis import ImageAnalysis
from vitviz.images import ImageError, ImageFile

from vitviz_dashboard.cached import cached_figure, overlay_picture, readout_maps
from vitviz_dashboard.common import Page, Photo, downloads, index_slider, readout_file_name, readout_title
from vitviz_dashboard.small_multiples import head_maps

FUSIONS = {"mean": np.mean, "max": np.max, "min": np.min}  # over heads
READS = {
    "[CLS] attention": "the [CLS] token's attention row: what the token the classifier reads looks at",
    "mean of the patch rows": "the mean of every patch's attention row, since the head reads the mean patch token",
    "rows weighted by the pooling head": "every token's attention row, weighted as the attention-pooling head "
                                         "weighs the final tokens (its weights averaged over its heads)",
    "[CLS] row and mean patch row, half each": "half the [CLS] row and half the mean patch row, as the head reads "
                                               "[CLS] and the mean patch token",
    "[CLS] and distillation rows, half each": "the mean of the [CLS] and distillation tokens' rows, whose two "
                                              "heads are averaged",
}  # fmt: skip


@st.fragment
def draw(page: Page, images: dict[str, ImageFile], prepare: Callable[[str], tuple[Photo, ImageAnalysis]]) -> None:
    c, settings = page.model.config, page.settings
    title = readout_title(c)
    stem = readout_file_name(c)
    layers = range(c.num_layers)
    layer = index_slider("Layer", c.num_layers, page.key("heads_layer", c.num_layers - 1, options=layers))
    maps = readout_maps(page.analysis)  # (L, H, r, c)
    st.subheader(f"Every head in layer {layer}: {title}")
    st.caption(f"Each map is {READS[title]}, over the patches, for one head.")
    head_maps(page, maps[layer], "heads_shared_scale")
    st.subheader("Compare two (image, layer, head) choices")
    chosen = {}
    names = list(images)
    for side, column in zip("AB", st.columns(2)):
        with column:
            # per image: choosing another main image resets both sides to it
            image_name = st.selectbox(f"{side}: image", names,
                                      key=page.key(f"image_{side}", page.photo.name, per_image=True, options=names))  # fmt: skip
            try:  # another image of the session is decoded only when chosen here
                side_photo, side_analysis = (page.photo, page.analysis) if image_name == page.photo.name else prepare(image_name)
            except ImageError as error:
                st.error(f"Could not read {image_name}: {error}")
                continue
            pick_layer = st.number_input(f"{side}: layer", 0, c.num_layers - 1,
                                         key=page.key(f"layer_{side}", layers[-1] if side == "A" else 0, options=layers))  # fmt: skip
            heads = ["mean", "max", "min", *range(c.num_heads)]
            pick_head = st.selectbox(f"{side}: head", heads, key=page.key(f"head_{side}", "mean", options=heads))
            side_maps = maps if side_analysis is page.analysis else readout_maps(side_analysis)
            per_head = side_maps[int(pick_layer)]  # (H, rows, cols)
            patch_map = per_head[pick_head] if isinstance(pick_head, int) else FUSIONS[pick_head](per_head, axis=0)
            if image_name == page.photo.name:
                chosen[f"{stem}_layer{pick_layer}_head{pick_head}"] = patch_map
            st.image(overlay_picture(side_photo, patch_map, side_analysis.box, settings), width="stretch",
                     caption=f"{image_name}: layer {pick_layer}, head {pick_head}")  # fmt: skip
    # a figure of layers x heads heatmaps is slow to build for big models, so only on request
    if st.toggle("Show every layer x head", key=page.key("all_layers_heads", c.num_layers * c.num_heads <= 64)):
        flat = maps.reshape(-1, *maps.shape[-2:])
        titles = [f"L{l} H{h}" for l in range(c.num_layers) for h in range(c.num_heads)]
        st.plotly_chart(cached_figure("grid_figure", flat, titles, c.num_heads, settings.colormap), theme=None)
    downloads(page, f"{stem}_attention", chosen | {f"{stem}_all_layers_heads": maps}, overlay=next(iter(chosen), None))

