"""Faithfulness: perturbation curves (Chefer et al. 2021's positive and negative tests) for rollout, the
attention of the tokens the head reads, and the class-specific relevance."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz import explain, plots

from vitviz_dashboard.cached import faithfulness_curves
from vitviz_dashboard.common import Page, class_name, downloads, has_classifier

NEEDS_A_CLASSIFIER = ("The perturbation test replaces patches and watches the probability of the predicted class "
                      "fall, so it needs a classifier; this model has none (a backbone).")  # fmt: skip


@st.fragment
def draw(page: Page) -> None:
    model, analysis, settings = page.model, page.analysis, page.settings
    if not has_classifier(model):
        st.info(NEEDS_A_CLASSIFIER)
        return
    target = int(np.argmax(analysis.probabilities))
    st.caption(f"Patches are replaced 10 % at a time, most- or least-relevant first, and the probability of "
               f"'{class_name(model, target)}' is recorded. A faithful map drops fast when its top patches go "
               "(small area, most-relevant first) and slowly when its bottom patches go (large area).")  # fmt: skip
    baseline = st.radio("Replace patches by", ["mean", "blur"], horizontal=True, key=page.key("baseline", "mean"),
                        format_func=lambda b: {"mean": "the mean colour", "blur": "a blur"}[b])  # fmt: skip
    if not st.toggle("Run the perturbation test (7 batched forward passes)", key=page.key("run", False, per_image=True)):
        return
    results = faithfulness_curves(model, settings.model_spec, page.file, settings.precision, target, baseline)
    x = explain.fraction_replaced()
    curves = {}
    for name, result in results.items():
        curves[f"{name}, most first"] = (x, result["most_first"])
        curves[f"{name}, least first"] = (x, result["least_first"])
    st.plotly_chart(plots.perturbation_figure(curves), theme=None)
    st.table({"map": list(results), "area, most-relevant first (lower is better)":
              [f"{r['auc_most_first']:.3f}" for r in results.values()],
              "area, least-relevant first (higher is better)": [f"{r['auc_least_first']:.3f}" for r in results.values()]})  # fmt: skip
    downloads(page, f"faithfulness_{baseline}",
              {"fraction_replaced": np.asarray(x)} | {name: np.asarray(y) for name, (_, y) in curves.items()})  # fmt: skip
