"""Tokens: where the patches' attention goes among the prefix tokens ([CLS], distillation, registers),
the norm of every token with the high-norm outliers flagged (Darcet et al. 2023, "Vision Transformers
Need Registers"), the attention-pooling head's map (SigLIP), and prefix tokens taken out of the attention."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from vitviz import explain
from vitviz.explain.head_statistics import PREFIX_SHARES
from vitviz_dashboard.cache.pictures import cached_figure, outlined_picture, overlay_picture
from vitviz_dashboard.cache.results import intact_analysis
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.knockout import removed, what_changes
from vitviz_dashboard.names import describe_pooling, prefix_token_names, readout_title
from vitviz_dashboard.page import Page
from vitviz_dashboard.state import knocked_tokens
from vitviz_dashboard.widgets.controls import index_slider

PAPER = "Darcet et al. 2023, [Vision Transformers Need Registers](https://arxiv.org/abs/2309.16588)"
HEADS = ["mean", "max", "min"]


@st.fragment
def draw(page: Page) -> None:
    norms = page.analysis.token_norms.numpy()  # (layers, T)
    maps = {"token_norms": norms}
    prefix_tokens(page, page.analysis.statistics[PREFIX_SHARES.name].numpy(), maps)  # (layers, heads, P + 1)
    st.divider()
    overlay = token_norms(page, norms, maps)
    st.divider()
    pooling_head(page, maps)
    st.divider()
    take_out(page, maps)
    downloads(page, "tokens", maps, overlay=overlay)


def take_out(page: Page, maps: dict) -> None:
    """Take prefix tokens out of every query's attention (the whole page's model), and what that changes."""
    c = page.model.config
    names = prefix_token_names(c)
    st.subheader("Take tokens out of the attention")
    if not names:
        st.caption("This model has no prefix tokens to take out.")
        return
    st.caption(
        f"A token taken out gets no attention from any query in any block: each attention row is "
        f"renormalised over the other tokens. {PAPER} do this to registers to show what they hold. The whole "
        "page then shows the intervened model."
    )
    spec = page.model_key.spec  # knock-outs are kept per image tower
    st.multiselect("Take out of the attention", names, key=str(knocked_tokens(spec)))
    if removed(page.model, spec)[1] != list(page.model.interventions.tokens):
        st.rerun()  # this tab runs alone (a fragment): the whole page must run again, with the new model
    if page.intact_model is None:
        return
    what_changes(page)
    intact = intact_analysis(page)
    now = page.analysis
    last = c.num_layers - 1
    before, after = intact.readout_attention[last].mean(dim=0).numpy(), now.readout_attention[last].mean(dim=0).numpy()
    low, high = float(min(before.min(), after.min())), float(max(before.max(), after.max()))
    left, right = st.columns(2)
    title = readout_title(c)
    left.image(
        overlay_picture(page.photo, before, page.analysis.box, page.settings, (low, high)),
        width="stretch",
        caption=f"intact: {title}, last layer, mean over heads",
    )
    right.image(
        overlay_picture(page.photo, after, page.analysis.box, page.settings, (low, high)),
        width="stretch",
        caption=f"intervened: {title}, last layer, mean over heads (one scale for both)",
    )
    maps["readout_last_layer_intact"], maps["readout_last_layer_intervened"] = before, after


def prefix_tokens(page: Page, shares: np.ndarray, maps: dict) -> None:
    """Stacked bars per head for one layer, and the mean over heads against depth."""
    c = page.model.config
    names = prefix_token_names(c)
    st.subheader("Attention to the prefix tokens")
    if not names:
        st.caption(
            "This model has no prefix tokens ([CLS], distillation or registers): its patches attend only to each other."
        )
        return
    st.caption(
        "How the patches' attention (averaged over every patch query) splits between each prefix token and the "
        f"other patches; each bar is one head and sums to 100\u00a0%. {PAPER} found that large ViTs park attention "
        "they do not need on a few tokens: with registers, heads that look mostly at a register are parking "
        "attention there, not looking at the image."
    )
    layers = range(c.num_layers)
    layer = index_slider(
        "Layer (prefix tokens)", c.num_layers, page.widget_key("prefix_layer", layers[-1], options=layers)
    )
    left, right = st.columns(2)
    left.plotly_chart(
        cached_figure("prefix_attention_figure", shares[layer], [*names, "patches"], f"Layer {layer}, head by head"),
        theme=None,
    )
    right.plotly_chart(
        cached_figure("prefix_attention_by_layer_figure", shares, [*names, "patches"], layer), theme=None
    )
    maps["attention_to_prefix_tokens"] = shares


def token_norms(page: Page, norms: np.ndarray, maps: dict) -> str:
    """The norm of every patch token as a map on the photo, the outliers outlined, norms against depth."""
    c, analysis, settings = page.model.config, page.analysis, page.settings
    p = analysis.num_prefix_tokens
    st.subheader("Token norms")
    st.caption(
        f"The length (L2 norm) of every token after a block. {PAPER} found that large supervised and "
        "self-supervised ViTs (DINOv2, OpenCLIP, DeiT-III) turn a few background patches into scratch space for "
        "global information: their norms stand far above the rest and attention maps show "
        "them as bright spikes. Registers give that role tokens of their own, and the outliers go away."
    )
    layers = range(c.num_layers)
    a, b = st.columns(2)
    with a:
        layer = index_slider(
            "Layer (token norms)", c.num_layers, page.widget_key("norms_layer", layers[-1], options=layers)
        )
    factor = b.slider(
        "Flag patches above this many times the median norm",
        1.5,
        10.0,
        step=0.5,
        key=page.widget_key("norm_factor", 2.0),
    )
    norms_map = norms[layer, p:].reshape(analysis.grid_size)
    flagged = explain.high_norm_patches(torch.from_numpy(norms[layer]), p, factor).numpy().reshape(analysis.grid_size)
    median, count = float(np.median(norms_map)), int(flagged.sum())
    st.markdown(
        f"**{count} of {flagged.size}** patch tokens in layer {layer} have a norm above {factor:g}x "
        f"the median patch norm ({median:.2f}); the largest is {norms_map.max():.2f} "
        f"({norms_map.max() / max(median, 1e-12):.1f}x the median)."
    )
    left, right = st.columns(2)
    left.image(
        overlay_picture(page.photo, norms_map, analysis.box, settings),
        width="stretch",
        caption=f"norm of each patch token after block {layer} ({norms_map.min():.2f} to {norms_map.max():.2f})",
    )
    right.image(
        outlined_picture(page.photo, flagged, analysis.box),
        width="stretch",
        caption=f"outlined: {count} patch{'' if count == 1 else 'es'} above {factor:g}x the median norm",
    )
    st.plotly_chart(cached_figure("token_norms_figure", norms, prefix_token_names(c), layer), theme=None)
    prefix = ", and each prefix token's norm" if p else ""
    st.caption(f"Per layer: the median and the largest patch-token norm{prefix}; the dashed line is the chosen layer.")
    name = f"token_norms_layer{layer}"
    maps[name] = norms_map
    maps[f"high_norm_patches_layer{layer}"] = flagged
    return name


def pooling_head(page: Page, maps: dict) -> None:
    """SigLIP-style attention pooling: what the head's learned query looks at, fused and per head."""
    c, analysis, settings = page.model.config, page.analysis, page.settings
    st.subheader("The attention-pooling head")
    if analysis.pool_attention is None:
        st.caption(
            f"This model has no attention-pooling head: its head reads {describe_pooling(c)}. "
            "'Heads & layers' shows what those tokens attend to."
        )
        return
    st.caption(
        "SigLIP-style models pool with one learned query that attends to the final patch tokens (multi-head "
        "attention pooling). These are its weights over the patches: the image as the head reads it. All the "
        "other maps of this page read through them."
    )
    heads = analysis.pool_attention.shape[1]
    left, right = st.columns(2)
    fusion = left.selectbox("Fuse the pooling head's heads by", HEADS, key=page.widget_key("pool_fusion", "mean"))
    fused = explain.pooling_attention(analysis.pool_attention, fusion, analysis.grid_size)[0].numpy()
    per_head = np.stack(
        [explain.pooling_attention(analysis.pool_attention, h, analysis.grid_size)[0].numpy() for h in range(heads)]
    )
    left.image(
        overlay_picture(page.photo, fused, analysis.box, settings),
        width="stretch",
        caption=f"the pooling head's attention, {fusion} over its {heads} heads",
    )
    right.plotly_chart(
        cached_figure(
            "grid_figure", per_head, [f"head {h}" for h in range(heads)], 2 if heads <= 4 else 4, settings.colormap
        ),
        theme=None,
    )
    maps[f"pooling_attention_{fusion}"] = fused
    maps["pooling_attention_per_head"] = per_head
