"""Features for a model that attends in windows and merges tokens between stages (Swin): any block's output tokens,
as PCA colours and as a chosen token's matches, each drawn over the photo on that block's own stage grid.

A stage's tokens are wider and fewer than the stage before's (the patch merging), so the views read one block at a
time: the PCA is fitted on that block's tokens and each token is painted over the pixels its box covers
(``layout.boxes``: 2^stage first-stage patches a side), so the views of every stage sit on the same photo.
"""

from __future__ import annotations

import streamlit as st
import torch

from vitviz import explain
from vitviz.model import Swin
from vitviz.render import overlays
from vitviz.render.feature_pictures import paint_patches
from vitviz_dashboard.cache.results import block_tokens
from vitviz_dashboard.downloads import chart_download
from vitviz_dashboard.page import Page
from vitviz_dashboard.widgets.controls import colour_legend


def block_label(model: Swin, block: int, grids: tuple[tuple[int, int], ...]) -> str:
    """E.g. "block 3: stage 2, 8x8 tokens of 384": the block's index over every stage, its stage and tokens."""
    depths = model.config.depths
    stage = next(s for s in range(len(depths)) if block < sum(depths[: s + 1]))
    rows, cols = grids[stage]
    return f"block {block}: stage {stage + 1}, {rows}x{cols} tokens of {model.config.width(stage)}"


@st.fragment
def draw(page: Page) -> None:
    model, analysis = page.model, page.analysis
    st.caption(
        "A block's output tokens, as PCA colours and as one token's matches. Swin's tokens change with the stage "
        "(each merging halves the grid and doubles the width), so each view reads one block, drawn over the "
        "photo on that block's stage grid."
    )
    blocks = list(range(model.config.num_layers))
    block = st.select_slider(
        "Block",
        blocks,
        format_func=lambda b: block_label(model, b, analysis.stage_grids),
        key=page.widget_key("swin_features_block", blocks[-1], options=blocks),
    )
    layout = analysis.layouts[block]
    _, rows, cols = layout.grid
    features = block_tokens(page.model_key, page.photo.key, block, _analysis=analysis, _model=model)
    st.subheader("PCA colours")
    result = explain.pca_rgb([torch.from_numpy(features)], n_components=3)
    colours = result.colours[0].numpy().reshape(rows, cols, 3)
    st.image(
        paint_patches(page.photo.image, colours, analysis.box, page.settings.alpha),
        width="stretch",
        caption=f"{block_label(model, block, analysis.stage_grids)}: the first three principal components as red, "
        f"green and blue (variance explained: {', '.join(f'{v:.1%}' for v in result.explained_variance.tolist())})",
    )
    st.subheader("A token's matches")
    a, b, _ = st.columns([1, 1, 2])
    row = int(a.number_input("Row", 0, rows - 1, rows // 2, key=page.widget_key(f"swin_match_row_{block}", rows // 2)))
    col = int(
        b.number_input("Column", 0, cols - 1, cols // 2, key=page.widget_key(f"swin_match_col_{block}", cols // 2))
    )
    similarity = explain.patch_similarity(torch.from_numpy(features[row * cols + col]), torch.from_numpy(features))
    similarity = similarity.numpy().reshape(rows, cols)
    picture = overlays.overlay(
        page.photo.image, similarity, page.settings.colormap, page.settings.alpha, analysis.box, (-1.0, 1.0)
    )
    st.image(
        overlays.mark_patch(picture, (row, col), (rows, cols), analysis.box),
        width="stretch",
        caption=f"Cosine similarity of token ({row}, {col}) of block {block} (outlined) with every token of the block",
    )
    colour_legend(page.settings, -1.0, 1.0, "cosine similarity")
    chart_download(st, page, f"block {block} features", {"features": features, "similarity": similarity})
