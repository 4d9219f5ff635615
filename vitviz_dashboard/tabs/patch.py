"""Click a patch: what any one patch attends to in a layer, fused over heads and per head."""

from __future__ import annotations

import streamlit as st

from vitviz_dashboard.cached import cached_figure, overlay_picture, patch_maps, photo_data_uri
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
    st.caption("Click a patch on the picture (or set its row and column) to see what it attends to: its row of "
               "the chosen block's attention, which sums to 1 over all tokens, prefix tokens included.")  # fmt: skip
    # the inputs come first, so a typed row or column is drawn in this same run; then picture and result side by side
    a, b, _ = st.columns([1, 1, 2])
    new_row = a.number_input("Row", 0, rows - 1, row)
    new_col = b.number_input("Column", 0, cols - 1, col)
    if (new_row, new_col) != (row, col):
        row, col = int(new_row), int(new_col)
        st.session_state.patch = (row, col)
    left, right = st.columns(2)
    with left:
        # the photo as a small JPEG data URI: a pixel array would be millions of numbers in the page's JSON
        picture, scale = photo_data_uri(page.photo)
        picker = cached_figure("patch_picker_figure", picture, scale, tuple(analysis.box), analysis.grid_size, (row, col))
        # the chart's key names the image and the patch, so after any change of patch a fresh chart
        # (with no stale selection) is drawn, and clicking a previously clicked patch works again
        event = st.plotly_chart(picker, on_select="rerun",
                                selection_mode="points", key=f"patch_picker_{page.photo.key[:12]}_{row}_{col}",
                                theme=None)  # fmt: skip
        points = [p for p in (event.selection.points if event else []) if p.get("curve_number") == 1]
        clicked = divmod(int(points[0]["point_index"]), cols) if points else (row, col)
        if clicked != (row, col):  # a click: known only once the chart is drawn, so draw again with the new patch
            st.session_state.patch = clicked  # (clicking the current patch changes nothing, and must not rerun)
            rerun_tab()
    fused, per_head = patch_maps(settings.model_spec, page.photo.key, settings.precision, layer, row, col,
                                 _analysis=analysis, _model=page.model)  # fmt: skip
    with right:
        st.image(overlay_picture(page.photo, fused, analysis.box, settings, mark=(row, col)), width="stretch",
                 caption=f"patch ({row}, {col}), layer {layer}, mean over heads (the patch outlined)")  # fmt: skip
    st.subheader(f"Each head: what patch ({row}, {col}) attends to in layer {layer}")
    head_maps(page, per_head, "patch_shared_scale", mark=(row, col))
    name = f"patch_{row}_{col}_layer{layer}"
    downloads(page, name, {name: fused, f"{name}_per_head": per_head}, overlay=name)
