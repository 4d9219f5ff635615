"""Overview: the top-k predictions and the attention rollout (Abnar & Zuidema 2020) on the photo."""

from __future__ import annotations

import streamlit as st

from vitviz import explain
from vitviz_dashboard.cache.pictures import cached_figure, overlay_picture
from vitviz_dashboard.cache.results import rollout_map
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.names import (
    class_name,
    classes_by_probability,
    describe_pooling,
    has_classifier,
    is_zero_shot,
    probability_kind,
    without_classes,
)
from vitviz_dashboard.page import Page
from vitviz_dashboard.widgets.controls import colour_legend, index_slider


@st.fragment
def draw(page: Page) -> None:
    model, analysis = page.model, page.analysis
    left, right = st.columns([3, 2])
    with right:
        predictions(page)
        st.subheader("Rollout settings")
        fusion = st.selectbox(
            "Head fusion", explain.HEAD_FUSIONS, key=page.widget_key("fusion", explain.HEAD_FUSIONS[0])
        )
        discard = st.slider(
            "Discard ratio",
            0.0,
            0.95,
            step=0.05,
            key=page.widget_key("discard", 0.0),
            help="weakest patch-to-patch weights dropped",
        )
        layers = range(model.config.num_layers)
        start = index_slider("Start layer", len(layers), page.widget_key("start_layer", 0, options=layers))
    rollout = rollout_map(
        page.model_key,
        page.photo.key,
        fusion,
        discard,
        start,
        _analysis=analysis,
        _model=model,
    )
    with left:
        draw_rollout(
            page,
            rollout,
            "Attention rollout",
            "Abnar & Zuidema 2020: each block's attention, fused over heads, with the identity added for "
            "the residual connection and each row renormalised, multiplied from the start layer to the last "
            "block, then read out by what the head reads. Bright patches reach the classifier through "
            "attention. It is the same for every class: see Class-specific for a class's own map.",
        )
    downloads(page, "rollout", {"rollout": rollout}, overlay="rollout")


def draw_rollout(page: Page, rollout, title: str, caption: str) -> None:
    """A rollout map over the photo with its legend and its raw grid: the ViT's Overview and a windowed model's."""
    settings = page.settings
    st.subheader(title)
    st.caption(caption)
    width, height = page.photo.full.size
    st.image(
        overlay_picture(page.photo, rollout, page.analysis.box, settings),
        width="stretch",
        caption=f"{page.photo.name}, {width}x{height} (full resolution in the PNG download)",
    )
    colour_legend(settings, float(rollout.min()), float(rollout.max()), "the rollout")
    with st.expander("The raw patch grid, with the values on hover"):
        st.plotly_chart(cached_figure("heatmap_figure", rollout, "", settings.colormap), theme=None)


def predictions(page: Page) -> None:
    """The top-k predictions as bars, or why there are none: in the current column."""
    model, analysis, settings = page.model, page.analysis, page.settings
    st.subheader("Predictions")
    if has_classifier(model):
        most = min(10, model.config.num_classes)
        top_k = (
            st.slider("Top-k", 1, most, key=page.widget_key("top_k", min(5, most), options=range(1, most + 1)))
            if most > 1
            else 1
        )
        top = classes_by_probability(analysis.probabilities)[:top_k]  # only these reach the cache key
        st.plotly_chart(
            cached_figure(
                "predictions_figure", analysis.probabilities[top], [class_name(model, i) for i in top], top_k
            ),
            theme=None,
            config={"displayModeBar": False},
        )  # its toolbar covered the top bar's label
        if is_zero_shot(model):
            st.caption(
                f"Zero-shot: the image's similarity to each prompt's text embedding, as "
                f"{probability_kind(model)}"
                + (" (the scores need not sum to 100 %)." if model.config.probabilities == "sigmoid" else ".")
            )
    else:
        st.info(
            f"{without_classes(settings)}: no predictions. Every map still reads what its pooling reads "
            f"({describe_pooling(model.config)}); class-specific maps and faithfulness curves need classes."
        )
