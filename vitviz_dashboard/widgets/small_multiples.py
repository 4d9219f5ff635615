"""Small multiples over the photo: one map per head, drawn on a thumbnail of the photo as DINO draws its heads,
on one colour scale by default, with the raw patch grids one click away."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz_dashboard.cache.pictures import cached_figure, overlay_picture, thumbnail
from vitviz_dashboard.page import Page
from vitviz_dashboard.widgets.controls import colour_legend


def head_maps(page: Page, per_head: np.ndarray, key: str, mark: tuple[int, int] | None = None) -> None:
    """Every head's (rows, cols) map of ``per_head`` (heads, rows, cols) over the photo; ``mark`` outlines a patch.
    ``key`` names this view's colour-scale toggle."""
    settings, heads = page.settings, len(per_head)
    shared = st.toggle(
        "One colour scale for every head",
        key=page.widget_key(key, True),
        help="On: colours compare across heads, from 0 to the largest weight of any head shown. Off: "
        "each head from its own smallest to its largest weight, which shows the pattern of a weak "
        "head but makes every head look equally strong.",
    )
    top = float(per_head.max())
    value_range = (0.0, top) if shared and top > 0 else None
    st.caption(
        f"Colour scale: 0 to {top:.3g}, shared by every head (the strip below)."
        if value_range
        else "Colour scale: each head from its own smallest to its largest weight (the strip below)."
    )
    small, scale = thumbnail(page.photo)
    box = tuple(v * scale for v in page.analysis.box)
    columns = st.columns(min(heads, 6))
    for head in range(heads):
        columns[head % len(columns)].image(
            overlay_picture(small, per_head[head], box, settings, value_range, mark),
            width="stretch",
            caption=f"head {head}",
        )
    if value_range:
        colour_legend(settings, 0.0, top, "attention weight, every head")
    else:
        colour_legend(settings, 0.0, 1.0, "each head's weight as a fraction of its own range")
    with st.expander("The raw patch grids, with the values on hover"):
        st.plotly_chart(
            cached_figure(
                "grid_figure",
                per_head,
                [f"head {h}" for h in range(heads)],
                min(heads, 6),
                settings.colormap,
                rescale_each=not shared,
            ),
            key=f"{key}_grid",
            theme=None,
        )
