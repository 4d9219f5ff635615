"""Class-specific: gradient maps for any class (Chefer et al.'s relevance, LeGrad, TAM, Grad-CAM...) and the
patch-level logit lens, block by block over the photo."""

from __future__ import annotations

import html

import numpy as np
import streamlit as st

from vitviz.explain.lens import LENS
from vitviz.explain.registry import METHODS, refusals
from vitviz.render import figures
from vitviz.render.overlays import is_flat
from vitviz_dashboard.cache.pictures import cached_figure, overlay_picture, vote_picture
from vitviz_dashboard.cache.results import class_map, logit_lens
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.names import (
    class_name,
    classes_by_probability,
    has_classifier,
    is_zero_shot,
    probability_kind,
    top_class,
    without_classes,
)
from vitviz_dashboard.page import Page
from vitviz_dashboard.widgets.controls import class_picker, colour_legend, index_slider

NEEDS_CLASSES = (
    "Class-specific maps follow the gradient of one class's score back through the attention, so "
    "they need classes. Every other tab works."
)
# every class-specific method of the registry; the lens has its own section below
GRADIENT_METHODS = [name for name, method in METHODS.items() if method.class_specific and method is not LENS]
DEFAULT_METHODS = ["relevance", "legrad"]
DEFAULT_WINDOWED = ["relevance", "gradcam"]  # for a model that attends in windows (Swin), which LeGrad cannot read
# the costlier ones say what they cost: in the picker's help and while they are computed
SLOW = ("backward per block", "repeated passes")
SLOW_COSTS = "; ".join(f"{m} costs {METHODS[m].cost_note}" for m in GRADIENT_METHODS if METHODS[m].cost in SLOW)
METHODS_HELP = "\n".join(
    [f"- **{m}**: {METHODS[m].summary}" for m in GRADIENT_METHODS]
    + ["", f"Each map is computed once per image and class; {SLOW_COSTS}."]
)


def method_label(method: str) -> str:
    """A method and its paper, short enough for a chip at 800 px: "relevance (Chefer et al. 2021)"; the whole
    description is in the picker's help and under each map."""
    paper = METHODS[method].paper
    return f"{method} ({paper})" if paper else method


@st.fragment
def draw(page: Page) -> None:
    model = page.model
    if not has_classifier(model):
        st.info(f"{without_classes(page.settings)}. {NEEDS_CLASSES}")
        return
    pick, against = st.columns(2)
    with pick:
        target = class_picker(page)
    with against:
        other = compare_picker(page, target)
    # a model that attends in windows (Swin) gets the methods that read windows; the others say why in one line
    refused = refusals(model, [*GRADIENT_METHODS, LENS.name])
    offered = [m for m in GRADIENT_METHODS if m not in refused]
    methods = st.multiselect(
        "Methods",
        offered,
        key=page.widget_key("class_methods", DEFAULT_WINDOWED if refused else DEFAULT_METHODS),
        format_func=method_label,
        help=METHODS_HELP,
    )
    if refused:
        st.caption("Not for this model: " + "; ".join(refused.values()) + ".")
    maps = method_maps(page, target, methods) if other is None else compared_maps(page, target, other, methods)
    arrays = dict(maps)
    if LENS.name not in refused:
        lens = lens_section(page, target)
        arrays |= {f"lens_probability_class{target}": lens["probability"], f"lens_votes_class{target}": lens["votes"]}
    first = next(iter(maps), None)
    downloads(page, f"class{target}", arrays, overlay=first)


NO_COMPARISON = -1


def compare_picker(page: Page, target: int) -> int | None:
    """A second class (or prompt) whose maps are drawn beside the first's, on one colour scale; None: no comparison."""
    probabilities = page.analysis.probabilities
    others = [NO_COMPARISON] + [i for i in classes_by_probability(probabilities) if i != target]
    what = "prompt" if is_zero_shot(page.model) else "class"
    choice = st.selectbox(
        f"Compare with another {what}",
        others,
        key=page.widget_key("compare_class", NO_COMPARISON, per_image=True, options=others),
        format_func=lambda i: "none" if i == NO_COMPARISON else f"{class_name(page.model, i)} ({probabilities[i]:.1%})",
        help="Each method's two maps side by side, on one colour scale: a brighter map is a "
        "stronger explanation of its class.",
    )
    return None if choice == NO_COMPARISON else choice


def method_maps(page: Page, target: int, methods: list[str]) -> dict[str, np.ndarray]:
    """One column per chosen method: the map over the photo, its colour scale, what it is, and its patch grid."""
    if not methods:
        st.caption("Choose one or more methods above.")
        return {}
    maps = {}
    top = top_class(page.analysis.probabilities)
    by_top = st.toggle(
        "Compare classes: colour every class's map on the top class's scale",
        key=page.widget_key("class_scale_by_top", True),
        help="On: each method's colours run from 0 to the largest value of its map for the top "
        "prediction, so a class the model hardly sees looks faint. Off: each map from its own "
        "smallest to its largest value, which shows the pattern of any class but makes every "
        "class look equally strong.",
    )
    for column, method in zip(st.columns(len(methods)), methods):
        with column:
            maps[f"{method}_class{target}"] = value = cached_class_map(page, target, method)
            top_map = value if target == top else cached_class_map(page, top, method)
        high = float(top_map.max())
        value_range = (0.0, high) if by_top and high > 0 else None
        with column:
            draw_map(page, method, target, value, value_range, "on the top class's scale")
    return maps


def compared_maps(page: Page, target: int, other: int, methods: list[str]) -> dict[str, np.ndarray]:
    """For each method, a row of two maps: ``target``'s and ``other``'s, coloured from 0 to the larger maximum of
    the two, so the class the model sees more strongly looks brighter."""
    if not methods:
        st.caption("Choose one or more methods above.")
        return {}
    maps = {}
    for method in methods:
        pair = {index: cached_class_map(page, index, method) for index in (target, other)}
        high = max(float(m.max()) for m in pair.values())
        for column, (index, value) in zip(st.columns(2), pair.items()):
            maps[f"{method}_class{index}"] = value
            with column:
                draw_map(page, method, index, value, (0.0, high) if high > 0 else None, "on one scale for both")
    return maps


def cached_class_map(page: Page, target: int, method: str) -> np.ndarray:
    cost = f" ({METHODS[method].cost_note})" if METHODS[method].cost in SLOW else ""
    with st.spinner(f"Computing {method} for '{class_name(page.model, target)}'{cost}..."):
        return class_map(page.model_key, page.photo.key, target, method, _analysis=page.analysis, _model=page.model)


def draw_map(page: Page, method: str, target: int, value: np.ndarray, value_range, scale: str) -> None:
    """One map over the photo, its colour legend, what it shows and its patch grid, in the current column."""
    settings = page.settings
    flat = is_flat(value)
    if flat:  # on a scale from 0 a flat map is one bright wash: draw it on its own (empty) range, dark
        value_range = None
    st.image(
        overlay_picture(page.photo, value, page.analysis.box, settings, value_range),
        width="stretch",
        caption=f"{method} for '{class_name(page.model, target)}'",
    )
    if flat:
        spread = float(value.max() - value.min())
        st.caption(
            f"Flat map: every patch is {float(value.mean()):.4g} (all within {spread:.2g}), so it picks out no patch; "
            "drawn dark, not on the shared scale."
        )
    elif value_range:
        colour_legend(settings, 0.0, value_range[1], f"{method} {scale}")
    else:
        colour_legend(settings, float(value.min()), float(value.max()), f"{method}, this map's range")
    summary = METHODS[method].summary
    st.caption(f"{summary[0].upper()}{summary[1:]}. {METHODS[method].caption}")
    with st.expander("The patch grid, with the values on hover"):
        st.plotly_chart(
            cached_figure("heatmap_figure", value, "", settings.colormap), key=f"class_{method}_{target}", theme=None
        )


def lens_section(page: Page, target: int) -> dict[str, np.ndarray]:
    """The logit lens: each patch token of a chosen block read by the final norm and head, as if that block were
    the last. Where, and from which block on, can the class be read?"""
    model, settings = page.model, page.settings
    if is_zero_shot(model):  # the head is the prompts' text embeddings: a text lens
        st.subheader("Text lens", divider="gray")
        st.caption(
            "Each patch token after the chosen block, read on its own by the model's final norm and image "
            "projection against every prompt's text embedding. Left: the probability of "
            f"'{class_name(model, target)}' from each patch ({probability_kind(model)}), on a fixed scale from "
            "0 (dark) to 100 % (bright). Right: the prompt each patch votes for."
        )
    else:
        st.subheader("Logit lens", divider="gray")
        st.caption(
            "Each patch token after the chosen block, read on its own by the model's final norm and head. "
            f"Left: the probability of '{class_name(model, target)}' from each patch, on a fixed scale from 0 "
            "(dark) to 100 % (bright). Right: the class each patch votes for."
        )
    lens = logit_lens(page.model_key, page.photo.key, target, _analysis=page.analysis, _model=model)
    layers = range(len(lens["probability"]))
    first = model.config.num_layers - len(layers)  # a Swin's lens reads its last stage's blocks only
    if first:
        st.caption(
            f"Swin: blocks {first} to {model.config.num_layers - 1}, its last stage (blocks counted from 0 over every "
            "stage, as on every tab): "
            "the head reads that stage's tokens, and the earlier stages' are narrower. Each patch of the first "
            "stage shows the last-stage token that holds it."
        )
    numbers = range(first, first + len(layers))  # every tab numbers a Swin's blocks from 0 over all its stages
    block = index_slider("Block", len(layers), page.widget_key("lens_block", numbers[-1], options=numbers), first)
    # two pictures of the photo in two equal columns: the same size at every width
    left, right = st.columns(2)
    left.image(
        overlay_picture(page.photo, lens["probability"][block], page.analysis.box, settings, (0.0, 1.0)),
        width="stretch",
        caption=f"block {first + block}: P('{class_name(model, target)}') read from each patch",
    )
    with left:
        colour_legend(settings, 0.0, 1.0, "the class's probability, one fixed scale for every block")
    with right:
        votes_view(page, lens["votes"][block], target, first + block)
    share = (lens["votes"] == target).mean(axis=(1, 2))
    st.plotly_chart(cached_figure("lens_depth_figure", lens["readout"], share, block), key="lens_depth", theme=None)
    return lens


def votes_view(page: Page, votes: np.ndarray, target: int, block: int) -> None:
    """The class each patch votes for, painted over the photo (as big as the probability map beside it), a legend
    naming every class drawn with its count of patches, and the votes on hover in an expander."""
    model = page.model
    shown, other = figures.vote_classes(votes, len(model.class_names), target)
    what = "prompt" if is_zero_shot(model) else "class"
    st.image(
        vote_picture(page.photo, votes, tuple(shown), page.analysis.box, page.settings.alpha),
        width="stretch",
        caption=f"block {block}: the {what} each patch votes for",
    )
    counts = figures.vote_codes(votes, shown).ravel()
    entries = [
        (colour, class_name(model, index), int((counts == code).sum()))
        for code, (colour, index) in enumerate(zip(figures.VOTE_COLOURS, shown))
    ]
    entries += [(figures.OTHER_COLOUR, "other", int((counts == len(shown)).sum()))] if other else []
    st.html(
        "<div style='font-size: 0.875rem; line-height: 1.6'>Patches voting for each: "
        + " ".join(
            f"<span style='display: inline-block; margin-right: 0.8em'><span style='color: {colour}'>&#9632;</span> "
            f"{html.escape(name)} ({count})</span>"
            for colour, name, count in entries
        )
        + "</div>"
    )
    with st.expander("The votes, patch by patch, on hover"):
        st.plotly_chart(cached_figure("votes_figure", votes, model.class_names, target), key="lens_votes", theme=None)
