"""Faithfulness: perturbation curves (Chefer et al. 2021's positive and negative tests) for rollout, the
attention of the tokens the head reads, and the class-specific relevance; for a model that attends in windows
(Swin), for the maps that read its windows and stages (``windowed_curves``), all on the first stage's grid."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from vitviz import explain
from vitviz.analysis import WindowedAnalysis
from vitviz.model import Swin
from vitviz.render import figures
from vitviz_dashboard.cache.budget import kept
from vitviz_dashboard.cache.results import class_map, faithfulness_curves
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.names import class_name, has_classifier, without_classes
from vitviz_dashboard.page import Page
from vitviz_dashboard.widgets.controls import class_picker

NEEDS_CLASSES = (
    "The perturbation test replaces patches and watches the probability of the predicted class fall, "
    "so it needs classes."
)


RUN = "Run the perturbation test (7 batched forward passes)"
OFF = (
    f"Nothing is drawn until you switch on '{RUN.split(' (')[0]}' above: it re-runs the model on the photo with "
    "patches replaced, so it runs only when asked. Once on, it stays on for every photo and class you choose."
)
SEPARABLE = 0.02  # areas closer than this, on one image in 10 % steps, do not rank the maps
# the maps of a windowed model (Swin) that the test compares, by its name for them: each over the first stage's grid
WINDOWED_MAPS = {
    "rollout": "rollout",
    "relevance (Chefer et al.)": "relevance",
    "grad-rollout": "grad-rollout",
    "Grad-CAM": "gradcam",
}


@kept(spinner="Replacing patches and re-running the model...")
def windowed_curves(
    key, image_key: str, target: int, baseline: str, *, _analysis: WindowedAnalysis, _model: Swin
) -> dict[str, dict]:
    """``faithfulness_curves`` for a model that attends in windows: the methods that read its windows and stages,
    each map on the first stage's patches (the patches the test replaces)."""
    pixels = _analysis.pixel_values
    curves = {}
    for name, method in WINDOWED_MAPS.items():
        relevance = torch.from_numpy(class_map(key, image_key, target, method, _analysis=_analysis, _model=_model))
        curves[name] = explain.faithfulness(_model, pixels, relevance, target, baseline, precision=key.precision)
    return curves


@st.fragment
def draw(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    if not has_classifier(model):
        st.info(f"{without_classes(settings)}. {NEEDS_CLASSES}")
        return
    target = class_picker(page)
    st.caption(
        f"Patches are replaced 10 % at a time, most- or least-relevant first, and the probability of "
        f"'{class_name(model, target)}' is recorded (Chefer et al. 2021's positive and negative tests, on "
        "patches). A faithful map drops fast when its top patches go (small area, most-relevant first) and "
        "slowly when its bottom patches go (large area). One image says little: `vitviz benchmark` runs "
        "the pixel-level protocols over a data set."
    )
    baseline = st.radio(
        "Replace patches by",
        ["mean", "blur"],
        horizontal=True,
        key=page.widget_key("baseline", "mean"),
        format_func=lambda b: {"mean": "the mean colour", "blur": "a blur"}[b],
    )
    # per model, not per image: once on, the test runs for every image chosen after
    if not st.toggle(RUN, key=page.widget_key("run", False)):
        st.info(OFF)
        return
    curves = windowed_curves if isinstance(analysis, WindowedAnalysis) else faithfulness_curves
    results = curves(page.model_key, page.photo.key, target, baseline, _analysis=analysis, _model=model)
    x = explain.fraction_replaced()
    st.plotly_chart(
        figures.perturbation_figure(x, {name: (r["most_first"], r["least_first"]) for name, r in results.items()}),
        theme=None,
    )
    st.table(
        {
            "map": list(results),
            "area, most-relevant first (lower is better)": [f"{r['auc_most_first']:.3f}" for r in results.values()],
            "area, least-relevant first (higher is better)": [f"{r['auc_least_first']:.3f}" for r in results.values()],
        }
    )
    for kind in ("auc_most_first", "auc_least_first"):
        areas = [r[kind] for r in results.values()]
        if max(areas) - min(areas) < SEPARABLE:
            order = "most" if kind == "auc_most_first" else "least"
            st.warning(
                f"The {order}-relevant-first areas differ by less than {SEPARABLE}: on this one image the test "
                "cannot tell these maps apart. Run `vitviz benchmark` over many images to rank them."
            )
    curves = {
        f"{name}, {order} first": result[f"{order}_first"]
        for name, result in results.items()
        for order in ("most", "least")
    }
    downloads(
        page,
        f"faithfulness_{baseline}",
        {"fraction_replaced": np.asarray(x)} | {k: np.asarray(v) for k, v in curves.items()},
    )
