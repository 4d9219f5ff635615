"""Class-specific: Chefer et al.'s (2021) relevance and gradient-weighted rollout for any class."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz_dashboard.cached import cached_figure, overlay_picture, relevance_maps
from vitviz_dashboard.common import Page, class_name, downloads, has_classifier

NEEDS_A_CLASSIFIER = ("Class-specific maps follow the gradient of one class's score back through the attention, "
                      "so they need a classifier; this model has none (a backbone). Every other tab works.")  # fmt: skip


@st.fragment
def draw(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    if not has_classifier(model):
        st.info(NEEDS_A_CLASSIFIER)
        return
    order = [int(i) for i in np.argsort(analysis.probabilities)[::-1]]
    target = st.selectbox("Explain the class", order, key=page.key("class", order[0], per_image=True, options=order),
                          format_func=lambda i: f"{class_name(model, i)} ({analysis.probabilities[i]:.1%})")  # fmt: skip
    maps = relevance_maps(model, settings.model_spec, page.file, settings.precision, target)
    for column, (name, patch_map) in zip(st.columns(len(maps)), maps.items()):
        column.image(overlay_picture(page.photo, patch_map, analysis.box, settings), width="stretch",
                     caption=f"{name} for '{class_name(model, target)}'")  # fmt: skip
        column.plotly_chart(cached_figure("heatmap_figure", patch_map, "", settings.colormap), key=f"class_{name}", theme=None)
    downloads(page, f"class{target}", {f"{name}_class{target}": m for name, m in maps.items()},
              overlay=f"relevance_class{target}")  # fmt: skip
