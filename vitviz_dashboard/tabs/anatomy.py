"""Model anatomy: the head statistics of this photo per layer and head (mean attention distance, entropy: the records
of explain.HEAD_STATISTICS), position-embedding similarity (and a rotary model's rotation similarity), principal
components of the patch-embedding filters (the ViT paper's Fig. 7)."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from vitviz.explain.head_statistics import DISTANCE_PX, HEAD_STATISTICS, HeadStatistic
from vitviz.render import overlays
from vitviz_dashboard.cache.pictures import cached_figure
from vitviz_dashboard.cache.results import model_anatomy
from vitviz_dashboard.downloads import chart_download
from vitviz_dashboard.page import Page

# the ViT paper's figure for the mean attention distance (every head a dot against depth); a layer x head map for
# every other statistic
FIGURES = {DISTANCE_PX.name: "attention_distance_figure"}


def draw(page: Page) -> None:
    model = page.model
    anatomy = model_anatomy(page.model_key, _model=model)
    shown = [s for s in HEAD_STATISTICS if s.shown and not s.per_prefix]  # the prefix shares: the Tokens tab's
    # headings in one row, charts in the next: each chart starts at the same height however long its caption
    for statistic, column in zip(shown, st.columns(len(shown)), strict=True):
        column.subheader(statistic.title())
        column.caption(f"For each head, {statistic.description}.")
    for statistic, column in zip(shown, st.columns(len(shown)), strict=True):
        head_statistic_chart(page, statistic, column)
    if anatomy["similarity"] is not None:
        similarity_grid(
            page,
            anatomy["similarity"],
            "Position-embedding similarity",
            "Cosine similarity of one patch's position embedding (the one named above each map, outlined in "
            "it) with every other patch's, on one shared scale (the colorbar). A learned grid shows as a "
            "bright blob around each patch, often with its row and column (Dosovitskiy et al. 2020, "
            "Fig. 7).",
            "position-embedding similarity",
        )
    if anatomy["rotary"] is not None:
        table = (
            "It has a learned position table too (above)"
            if anatomy["similarity"] is not None
            else "It has no learned position table"
        )
        similarity_grid(
            page,
            anatomy["rotary"],
            "Rotary embedding: how alike two patches' rotations are",
            f"Every block rotates the patch tokens' queries and keys by angles set by their position "
            f"({model.config.rotary} rotary embedding), so a score depends on where two patches are "
            f"relative to each other. {table}. Each map: for the patch named above it (outlined), the "
            "mean over channels of cos(its angle - another patch's angle), the factor by which the "
            "rotation scales a query there against the same key elsewhere, on one shared scale.",
            "rotary similarity",
        )
    st.subheader("Patch-embedding filters: principal components")
    st.caption(
        "The first principal components of the linear patch embedding's filters, as RGB pictures, with "
        "the share of variance each explains: what the model measures in a patch before any attention."
    )
    components, explained = anatomy["components"], anatomy["explained"]
    pictures = (
        components[:, :3].permute(0, 2, 3, 1) if components.shape[1] >= 3 else components[:, :1].permute(0, 2, 3, 1)
    )
    pictures = [(overlays.rescale(p) * 255).astype(np.uint8) for p in pictures.numpy()]
    st.image(
        [p if p.shape[-1] == 3 else p[..., 0] for p in pictures],
        width=64,
        caption=[f"{100 * v:.1f}%" for v in explained.tolist()],
    )
    chart_download(
        st,
        page,
        "patch-embedding components",
        {"components": components.numpy(), "explained_variance": explained.numpy()},
    )


def head_statistic_chart(page: Page, statistic: HeadStatistic, column) -> None:
    """One statistic of every layer and head of this photo (its heading and description are drawn above it) and its
    numbers (CSV)."""
    values = page.analysis.statistics[statistic.name].numpy()  # (layers, heads)
    name = FIGURES.get(statistic.name)
    figure = cached_figure(name, values) if name else cached_figure("layer_head_figure", values, "", statistic.unit)
    column.plotly_chart(figure, theme=None)
    chart_download(column, page, statistic.label, values, "layer", "head")


def similarity_grid(page: Page, similarity, title: str, caption: str, what: str) -> None:
    """Small maps of a (rows, cols, rows, cols) similarity: for up to 4 x 4 patches spread over the grid, corners
    included, that patch against every other, one shared colour scale. Each gets the page's width: side by side,
    the grid shrank to a few pixels a map; with more maps (7 x 7 at first) each was too small to read."""
    rows, cols = page.model.config.grid_size
    st.subheader(title)
    st.caption(caption)
    pick_rows, pick_cols = (sorted({round(i * (n - 1) / 3) for i in range(4)}) for n in (rows, cols))
    picks = [(r, c) for r in pick_rows for c in pick_cols]
    # one shared scale (a colorbar), each map's own patch outlined
    st.plotly_chart(
        cached_figure(
            "grid_figure",
            torch.stack([similarity[r, c] for r, c in picks]),
            [f"({r},{c})" for r, c in picks],
            len(pick_cols),
            "viridis",
            rescale_each=False,
            marks=picks,
            height=160 * len(pick_rows) + 40,
        ),
        theme=None,
        key=f"anatomy_{what}",
    )
    chart_download(st, page, what, {"similarity": similarity.numpy()})  # (rows, cols, rows, cols): every patch
