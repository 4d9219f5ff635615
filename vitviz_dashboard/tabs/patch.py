"""Click a patch: what any one patch attends to in a layer, fused over heads and per head."""

from __future__ import annotations

import streamlit as st

from vitviz_dashboard.cache.pictures import grid_picture_uri, overlay_picture
from vitviz_dashboard.cache.results import patch_maps
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.page import Page
from vitviz_dashboard.state import PATCH
from vitviz_dashboard.widgets.click_picture import click_picture, clicked_patch
from vitviz_dashboard.widgets.controls import index_slider, rerun_tab
from vitviz_dashboard.widgets.small_multiples import head_maps


@st.fragment
def draw(page: Page) -> None:
    analysis, settings = page.analysis, page.settings
    rows, cols = analysis.grid_size
    row, col = PATCH.setdefault((rows // 2, cols // 2))
    row, col = min(row, rows - 1), min(col, cols - 1)
    layers = range(page.model.config.num_layers)
    layer = index_slider("Layer", len(layers), page.widget_key("patch_layer", layers[-1], options=layers))
    st.caption(
        "Click a patch on the picture (or set its row and column) to see what it attends to: its row of "
        "the chosen block's attention, which sums to 1 over all tokens, prefix tokens included."
    )
    # the inputs come first, so a typed row or column is drawn in this same run; then picture and result side by side
    a, b, _ = st.columns([1, 1, 2])
    new_row = a.number_input("Row", 0, rows - 1, row)
    new_col = b.number_input("Column", 0, cols - 1, col)
    if (new_row, new_col) != (row, col):
        row, col = int(new_row), int(new_col)
        PATCH.set((row, col))
    left, right = st.columns(2)
    with left:
        picture = grid_picture_uri(page.photo, analysis.box, analysis.grid_size, (row, col))
        click = click_picture(picture, f"{page.photo.name} with the model's patch grid", key="patch_click")
        st.caption("The model's patch grid (lines up to 40 patches a side), the chosen patch outlined.")
        clicked = clicked_patch(click, page.photo.image.size, analysis)
        if clicked is not None and clicked != (row, col):  # known only once the picture is drawn: draw again
            PATCH.set(clicked)
            rerun_tab()
    fused, per_head = patch_maps(page.model_key, page.photo.key, layer, row, col, _analysis=analysis, _model=page.model)
    with right:
        st.image(
            overlay_picture(page.photo, fused, analysis.box, settings, mark=(row, col)),
            width="stretch",
            caption=f"patch ({row}, {col}), layer {layer}, mean over heads (the patch outlined)",
        )
    st.subheader(f"Each head: what patch ({row}, {col}) attends to in layer {layer}")
    head_maps(page, per_head, "patch_shared_scale", mark=(row, col))
    name = f"patch_{row}_{col}_layer{layer}"
    downloads(page, name, {name: fused, f"{name}_per_head": per_head}, overlay=name)
