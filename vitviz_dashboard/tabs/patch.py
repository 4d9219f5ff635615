"""Click a patch: what any one patch attends to in a layer, fused over heads and per head."""

from __future__ import annotations

import streamlit as st

from vitviz.render import overlays
from vitviz_dashboard.cached import grid_picture_uri, overlay_picture, patch_maps
from vitviz_dashboard.click_picture import click_picture
from vitviz_dashboard.common import Page, downloads, index_slider, rerun_tab
from vitviz_dashboard.small_multiples import head_maps


@st.fragment
def draw(page: Page) -> None:
    analysis, settings = page.analysis, page.settings
    rows, cols = analysis.grid_size
    if "patch" not in st.session_state:
        st.session_state.patch = (rows // 2, cols // 2)
    row, col = st.session_state.patch
    row, col = min(row, rows - 1), min(col, cols - 1)
    layers = range(page.model.config.num_layers)
    layer = index_slider("Layer", len(layers), page.key("patch_layer", layers[-1], options=layers))
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
        st.session_state.patch = (row, col)
    left, right = st.columns(2)
    with left:
        picture = grid_picture_uri(page.photo, analysis.box, analysis.grid_size, (row, col))
        click = click_picture(picture, f"{page.photo.name} with the model's patch grid", key="patch_click")
        st.caption("The model's patch grid (lines up to 40 patches a side), the chosen patch outlined.")
        clicked = clicked_patch(click, page.photo.image.size, analysis)
        if clicked is not None and clicked != (row, col):  # known only once the picture is drawn: draw again
            st.session_state.patch = clicked
            rerun_tab()
    fused, per_head = patch_maps(
        settings.model_spec, page.photo.key, settings.precision, layer, row, col, _analysis=analysis, _model=page.model
    )
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


def clicked_patch(click: dict | None, photo_size: tuple[int, int], analysis) -> tuple[int, int] | None:
    """The patch of this run's click on the picture, or None: no click, or a click outside the part of the photo
    the model saw. The picture is the shown photo made smaller evenly, so a click maps straight onto the shown
    photo, whose pixels ``analysis.box`` is in."""
    if not click:
        return None
    patch = overlays.patch_at(
        click["x"], click["y"], (click["width"], click["height"]), photo_size, analysis.grid_size, analysis.box
    )
    if patch is None:
        st.toast("That point is outside the part of the photo the model saw (the dimmed border).")
    return patch
