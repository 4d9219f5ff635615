"""Heads & layers: what the tokens the head reads attend to, for every head of a layer, two (image,
layer, head) choices side by side, every layer x head at once, and which heads the prediction depends on (each
knocked out in turn, and direct logit attribution), with heads to knock out of the page."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.preprocessing import ImageError
from vitviz.render.heads import signed_layer_head_figure
from vitviz_dashboard.cache.pictures import cached_figure, overlay_picture
from vitviz_dashboard.cache.results import head_ranking, logit_parts, readout_maps, session_photo
from vitviz_dashboard.downloads import chart_download, downloads
from vitviz_dashboard.knockout import head_label, head_labels, parse_head, removed, what_changes
from vitviz_dashboard.names import (
    Readout,
    class_name,
    has_classifier,
    readout_file_name,
    readout_kind,
    readout_title,
    without_classes,
)
from vitviz_dashboard.page import Page
from vitviz_dashboard.state import knocked_heads
from vitviz_dashboard.widgets.controls import class_picker, index_slider
from vitviz_dashboard.widgets.small_multiples import head_maps

FUSIONS = {"mean": np.mean, "max": np.max, "min": np.min}  # over heads
READS = {  # what each head's map is, by what the head reads
    Readout.CLS: "the [CLS] token's attention row: what the token the classifier reads looks at",
    Readout.MEAN: "the mean of every patch's attention row, since the head reads the mean patch token",
    Readout.POOLING_HEAD: "every token's attention row, weighted as the attention-pooling head "
    "weighs the final tokens (its weights averaged over its heads)",
    Readout.ATTENTIVE: "every token's attention row, weighted as the attentive pooler reads the final tokens (its "
    "query's weights averaged over its heads, carried back through its blocks by rollout)",
    Readout.CLS_AND_MEAN: "half the [CLS] row and half the mean patch row, as the head reads "
    "[CLS] and the mean patch token",
    Readout.DISTILLED: "the mean of the [CLS] and distillation tokens' rows, whose two heads are averaged",
}


@st.fragment
def draw(page: Page) -> None:
    c, settings = page.model.config, page.settings
    title = readout_title(c)
    stem = readout_file_name(c)
    layers = range(c.num_layers)
    layer = index_slider("Layer", c.num_layers, page.widget_key("heads_layer", c.num_layers - 1, options=layers))
    maps = readout_maps(page.analysis)  # (L, H, r, c)
    st.subheader(f"Every head in layer {layer}: {title}")
    st.caption(f"Each map is {READS[readout_kind(c)]}, over the patches, for one head.")
    head_maps(page, maps[layer], "heads_shared_scale")
    st.subheader("Compare two (image, layer, head) choices")
    chosen = {}
    names = list(page.images)
    for side, column in zip("AB", st.columns(2)):
        with column:
            # per image: choosing another main image resets both sides to it
            image_name = st.selectbox(
                f"{side}: image",
                names,
                key=page.widget_key(f"image_{side}", page.photo.name, per_image=True, options=names),
            )
            try:  # another image of the session is decoded only when chosen here
                side_photo, side_analysis = session_photo(page, image_name)
            except ImageError as error:
                st.error(f"Could not read {image_name}: {error}")
                continue
            pick_layer = st.number_input(
                f"{side}: layer",
                0,
                c.num_layers - 1,
                key=page.widget_key(f"layer_{side}", layers[-1] if side == "A" else 0, options=layers),
            )
            heads = ["mean", "max", "min", *range(c.num_heads)]
            pick_head = st.selectbox(f"{side}: head", heads, key=page.widget_key(f"head_{side}", "mean", options=heads))
            side_maps = maps if side_analysis is page.analysis else readout_maps(side_analysis)
            per_head = side_maps[int(pick_layer)]  # (H, rows, cols)
            patch_map = per_head[pick_head] if isinstance(pick_head, int) else FUSIONS[pick_head](per_head, axis=0)
            if image_name == page.photo.name:
                chosen[f"{stem}_layer{pick_layer}_head{pick_head}"] = patch_map
            st.image(
                overlay_picture(side_photo, patch_map, side_analysis.box, settings),
                width="stretch",
                caption=f"{image_name}: layer {pick_layer}, head {pick_head}",
            )
    # a figure of layers x heads heatmaps is slow to build for big models, so only on request
    if st.toggle("Show every layer x head", key=page.widget_key("all_layers_heads", c.num_layers * c.num_heads <= 64)):
        flat = maps.reshape(-1, *maps.shape[-2:])
        titles = [f"L{layer} H{h}" for layer in range(c.num_layers) for h in range(c.num_heads)]
        st.plotly_chart(cached_figure("grid_figure", flat, titles, c.num_heads, settings.colormap), theme=None)
    downloads(page, f"{stem}_attention", chosen | {f"{stem}_all_layers_heads": maps}, overlay=next(iter(chosen), None))
    st.divider()
    head_causes(page)


def head_causes(page: Page) -> None:
    """Which heads the prediction depends on: each removed in turn (knockout), and what each writes to the logit
    directly (direct logit attribution); clicking a head, or choosing heads below, knocks them out of the page."""
    c = page.model.config
    st.subheader("Which heads the prediction depends on")
    if not has_classifier(page.model):
        st.info(f"{without_classes(page.settings)}: head importance and logit attribution need classes.")
        return
    target = class_picker(page)
    name = class_name(page.model, target)
    spec = page.model_key.spec  # knock-outs are kept per image tower
    heads = list(page.model.interventions.heads)  # what this run's model has removed
    passes = sum(c.num_layers - layer for layer in range(c.num_layers)) * c.num_heads / c.num_layers
    if c.num_layers * c.num_heads > 64 and not st.toggle(
        f"Rank every head (about {passes:.0f} forward passes' work)", key=page.widget_key("rank_heads", False)
    ):
        st.caption("Ranking every head removes each of the model's heads in turn: turn it on to compute it.")
    else:
        ranking = head_ranking(
            page.model_key,
            page.photo.key,
            target,
            _analysis=page.analysis,
            _model=page.model,
        )
        left, right = st.columns(2)
        st.caption(
            f"Left: how much the logit of '{name}' drops when each head alone is removed (its output zeroed, the "
            "rest of the model re-run; Michel et al. 2019). Right: what each head writes straight into the logit "
            "through the residual stream, with the final norm's scale held fixed (direct logit attribution, Elhage "
            "et al. 2021); it leaves out what a head does through later blocks. On both, red heads push the class up "
            "and blue ones down. Crossed heads are knocked out. Click a head on the left to knock it out of the whole "
            "page."
        )
        # short titles, the class in the picker and the caption: at 800 px a chart is about 220 px wide
        figure = signed_layer_head_figure(-ranking["logit_change"], "Logit drop when removed", "drop", heads)
        event = left.plotly_chart(
            figure, theme=None, on_select="rerun", selection_mode="points", key=f"head_ranking|{spec}"
        )
        clicked_head(event, spec)
        parts = logit_parts(
            page.model_key,
            page.photo.key,
            target,
            _analysis=page.analysis,
            _model=page.model,
        )
        if isinstance(parts, str):
            right.info(f"No direct logit attribution: {parts}.")
        else:
            right.plotly_chart(
                signed_layer_head_figure(parts["heads"], "Direct logit attribution", "logit", heads),
                theme=None,
            )
            right.caption(
                f"Logit {parts['logit']:.3f} = embeddings {parts['embeddings']:.3f} + heads "
                f"{parts['heads'].sum():.3f} + MLPs {parts['mlps'].sum():.3f} + biases {parts['biases']:.3f}"
                + (f" + the SAE edit {parts['edits']:.3f}." if page.model_key.sae_edit else ".")
            )
        chart_download(
            st,
            page,
            f"head importance for {name}",
            {k: np.asarray(v) for k, v in ranking.items()}
            | ({} if isinstance(parts, str) else {f"logit_attribution_{k}": v for k, v in parts.items()}),
        )
    st.multiselect(
        "Knock out heads",
        head_labels(page.model),
        key=str(knocked_heads(spec)),
        help="The chosen heads' outputs are removed from every forward pass of the page: the prediction, "
        "the predictions and the maps of every tab then show the intervened model.",
    )
    if removed(page.model, spec)[0] != list(page.model.interventions.heads):
        st.rerun()  # this tab runs alone (a fragment): the whole page must run again, with the new model
    what_changes(page)


def clicked_head(event, spec: str) -> None:
    """A click on a head of the ranking toggles it in the knocked-out heads, once per click (the chart keeps its
    selection across runs, so the one already handled is remembered)."""
    points = (event or {}).get("selection", {}).get("points", [])
    handled_key = f"handled_click|{spec}"
    click = sorted({(int(p["y"]), int(p["x"])) for p in points})  # a cell once, whichever of its traces answered
    if not click or click == st.session_state.get(handled_key):
        st.session_state[handled_key] = click
        return
    st.session_state[handled_key] = click
    chosen = set(knocked_heads(spec).get() or [])
    for layer, head in click:
        chosen ^= {head_label(layer, head)}
    knocked_heads(spec).set(sorted(chosen, key=parse_head))
    st.rerun()
