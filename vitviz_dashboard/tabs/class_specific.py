"""Class-specific: gradient maps for any class (Chefer et al.'s relevance, LeGrad, TAM, Grad-CAM...) and the
patch-level logit lens, block by block over the photo."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.explain import CLASS_SPECIFIC
from vitviz.explain.methods import DESCRIPTIONS, TAM_STEPS

from vitviz_dashboard.cached import cached_figure, class_map, logit_lens, overlay_picture
from vitviz_dashboard.common import Page, class_name, class_picker, colour_legend, downloads, has_classifier, index_slider

NEEDS_A_CLASSIFIER = ("Class-specific maps follow the gradient of one class's score back through the attention, "
                      "so they need a classifier; this model has none (a backbone). Every other tab works.")  # fmt: skip
GRADIENT_METHODS = [m for m in CLASS_SPECIFIC if m != "lens"]  # the lens has its own section below
DEFAULT_METHODS = ["relevance", "legrad"]
READING = {  # how to read each map, in a sentence
    "relevance": "Bright: patches whose attention, weighted by its gradient, raises the class's score.",
    "grad-rollout": "Like rollout, but each block's heads count by how much they raise the class's score.",
    "legrad": "Bright: patches whose attention, at every block, the class's score is most sensitive to.",
    "tam": "Bright: patches the class's information flows from, through the attention as a Markov chain.",
    "gradcam": "Bright: patches whose last-block features, weighted by their gradient, raise the class's score.",
}
COST = {"tam": f"{TAM_STEPS} forward and backward passes", "legrad": "one backward pass per block"}


@st.fragment
def draw(page: Page) -> None:
    model = page.model
    if not has_classifier(model):
        st.info(NEEDS_A_CLASSIFIER)
        return
    target = class_picker(page)
    methods = st.multiselect("Methods", GRADIENT_METHODS, key=page.key("class_methods", DEFAULT_METHODS),
                             format_func=lambda m: f"{m}: {DESCRIPTIONS[m]}",
                             help="Each map is computed once per image and class; TAM costs "
                                  f"{TAM_STEPS} forward and backward passes.")  # fmt: skip
    maps = method_maps(page, target, methods)
    lens = lens_section(page, target)
    arrays = maps | {"lens_probability": lens["probability"], "lens_votes": lens["votes"]}
    downloads(page, f"class{target}", {f"{name}_class{target}": m for name, m in arrays.items()},
              overlay=f"{methods[0]}_class{target}" if methods else None)  # fmt: skip


def method_maps(page: Page, target: int, methods: list[str]) -> dict[str, np.ndarray]:
    """One column per chosen method: the map over the photo, its colour scale, what it is, and its patch grid."""
    if not methods:
        st.caption("Choose one or more methods above.")
        return {}
    settings, maps = page.settings, {}
    top_class = int(np.argmax(page.analysis.probabilities))
    by_top = st.toggle("Compare classes: colour every class's map on the top class's scale",
                       key=page.key("class_scale_by_top", True),
                       help="On: each method's colours run from 0 to the largest value of its map for the top "
                            "prediction, so a class the model hardly sees looks faint. Off: each map from its own "
                            "smallest to its largest value, which shows the pattern of any class but makes every "
                            "class look equally strong.")  # fmt: skip
    for column, method in zip(st.columns(len(methods)), methods):
        cost = f" ({COST[method]})" if method in COST else ""
        with column, st.spinner(f"Computing {method}{cost}..."):
            maps[method] = class_map(page.model, settings.model_spec, page.file, settings.precision, target, method)
            top_map = maps[method] if target == top_class else class_map(
                page.model, settings.model_spec, page.file, settings.precision, top_class, method)  # fmt: skip
        high = float(top_map.max())
        value_range = (0.0, high) if by_top and high > 0 else None
        column.image(overlay_picture(page.photo, maps[method], page.analysis.box, settings, value_range),
                     width="stretch", caption=f"{method} for '{class_name(page.model, target)}'")  # fmt: skip
        with column:
            if value_range:
                colour_legend(settings, 0.0, high, f"{method} on the top class's scale")
            else:
                colour_legend(settings, float(maps[method].min()), float(maps[method].max()), f"{method}, this map's range")
        column.caption(f"{DESCRIPTIONS[method][0].upper()}{DESCRIPTIONS[method][1:]}. {READING[method]}")
        with column.expander("The patch grid, with the values on hover"):
            st.plotly_chart(cached_figure("heatmap_figure", maps[method], "", settings.colormap),
                            key=f"class_{method}", theme=None)  # fmt: skip
    return maps


def lens_section(page: Page, target: int) -> dict[str, np.ndarray]:
    """The logit lens: each patch token of a chosen block read by the final norm and head, as if that block were
    the last. Where, and from which block on, can the class be read?"""
    model, settings = page.model, page.settings
    st.subheader("Logit lens", divider="gray")
    st.caption("Each patch token after the chosen block, read on its own by the model's final norm and head. Left: "
               f"the probability of '{class_name(model, target)}' from each patch, on a fixed scale from 0 (dark) to "
               "100 % (bright). Right: the class each patch votes for.")  # fmt: skip
    lens = logit_lens(model, settings.model_spec, page.file, settings.precision, target)
    layers = range(len(lens["probability"]))
    block = index_slider("Block", len(layers), page.key("lens_block", layers[-1], options=layers))
    left, right = st.columns(2)
    left.image(overlay_picture(page.photo, lens["probability"][block], page.analysis.box, settings, (0.0, 1.0)),
               width="stretch", caption=f"block {block}: P('{class_name(model, target)}') read from each patch")  # fmt: skip
    with left:
        colour_legend(settings, 0.0, 1.0, "the class's probability, one fixed scale for every block")
    right.plotly_chart(cached_figure("votes_figure", lens["votes"][block], model.class_names, target),
                       key="lens_votes", theme=None)  # fmt: skip
    share = (lens["votes"] == target).mean(axis=(1, 2))
    st.plotly_chart(cached_figure("lens_depth_figure", lens["readout"], share, block), key="lens_depth", theme=None)
    return lens
