"""The tabs for a model that attends in windows and merges tokens between stages (Swin, Swin v2).

Such a model has no [CLS] or prefix tokens, a different number of tokens and heads in each stage, and one small
attention matrix per window instead of one (T, T) matrix per block, so the ViT tabs' views do not apply as they
are. Here: Overview (the predictions and the rollout across windows and stages), Heads & layers (a stage and block
picker; a clicked patch's attention over its own window, per head), Class-specific (class_specific.py itself, with
the methods that read windows); every other tab says in one line why it does not apply.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable

import numpy as np
import streamlit as st
from PIL import Image, ImageDraw

from vitviz.render import overlays
from vitviz_dashboard.cache.pictures import grid_picture_uri, thumbnail
from vitviz_dashboard.cache.results import class_map, window_maps
from vitviz_dashboard.downloads import downloads
from vitviz_dashboard.names import top_class
from vitviz_dashboard.page import Page
from vitviz_dashboard.tabs import class_specific, overview
from vitviz_dashboard.widgets.click_picture import click_picture
from vitviz_dashboard.widgets.controls import colour_legend, rerun_tab

# why each ViT tab that is not drawn here does not apply, in one line
NOT_FOR_WINDOWS = {
    "Click a patch": "Swin attends inside windows: a clicked patch's attention over its own window, per head and "
    "for every stage and block, is in Heads & layers.",
    "Features": "Not for Swin yet: the feature views read one grid of tokens of one width through every block, and "
    "Swin merges its tokens into a coarser, wider grid at each stage.",
    "Model anatomy": "Not for Swin: its positions are a relative bias inside each window (no position table to "
    "compare), and its head statistics are not yet measured inside windows.",
    "Tokens": "Not for Swin: it has no [CLS], register or other prefix tokens to attend to or take out; its head "
    "reads the mean of the last stage's tokens.",
    "Faithfulness": "Not for Swin yet: the perturbation curves compare maps read through the [CLS] or readout row of "
    "one global attention, which Swin's windows do not have.",
    "SAE features": "Not for Swin: a sparse autoencoder reads one block's tokens of a ViT; Swin's tokens change "
    "grid and width at every stage, and vitviz trains none for them.",
}


def tabs(vit_tabs: dict[str, Callable[[Page], None]]) -> dict[str, Callable[[Page], None]]:
    """The page's tabs, in the ViT page's order and names, each drawn for a windowed model."""
    drawn = {"Overview": draw_overview, "Heads & layers": draw_heads, "Class-specific": class_specific.draw}
    return {name: drawn.get(name) or functools.partial(not_for_windows, NOT_FOR_WINDOWS[name]) for name in vit_tabs}


def not_for_windows(reason: str, page: Page) -> None:
    st.info(reason)


@st.fragment
def draw_overview(page: Page) -> None:
    analysis = page.analysis
    left, right = st.columns([3, 2])
    with right:
        overview.predictions(page)
    target = top_class(analysis.probabilities) if len(analysis.probabilities) else 0
    rollout = class_map(page.model_key, page.photo.key, target, "rollout", _analysis=analysis, _model=page.model)
    with left:
        overview.draw_rollout(
            page,
            rollout,
            "Attention rollout across windows and stages",
            "Each block's attention, the mean over heads, placed at its window's tokens (0 across windows), with the "
            "identity added for the residual connection; at each patch merging the product is carried to the merged "
            "tokens; read out by the mean over the last stage's tokens (what Swin's head reads). Drawn on the first "
            "stage's grid. It is the same for every class: see Class-specific for relevance and Grad-CAM.",
        )
    downloads(page, "rollout", {"rollout": rollout}, overlay="rollout")


def block_names(page: Page) -> list[tuple[int, int, int]]:
    """(stage, block within the stage, block index) of every block."""
    depths = page.model.config.depths
    return [(s, i, sum(depths[:s]) + i) for s, depth in enumerate(depths) for i in range(depth)]


def stage_line(page: Page, stage: int) -> str:
    """E.g. "stage 2: 28x28 tokens, windows 7x7, 2 blocks"."""
    c, (rows, cols) = page.model.config, page.analysis.stage_grids[stage]
    window = c.windows[stage]
    return f"stage {stage + 1}: {rows}x{cols} tokens, windows {window[0]}x{window[1]}, {c.depths[stage]} blocks"


def block_line(page: Page, block: int) -> str:
    """E.g. "block 4 (shifted by 3x3)" or "block 3 (not shifted)", numbered from 1 within its stage."""
    shift = shift_of(page, block)
    _, index, _ = block_names(page)[block]
    return f"block {index + 1} ({f'shifted by {shift[0]}x{shift[1]}' if shift else 'not shifted'})"


def shift_of(page: Page, block: int) -> tuple[int, int] | None:
    """The block's cyclic shift on this input, or None for none."""
    stage, index, _ = block_names(page)[block]
    shift = page.model.block_shift(stage, index, page.analysis.stage_grids[stage])
    return shift if any(shift) else None


@st.fragment
def draw_heads(page: Page) -> None:
    analysis, c = page.analysis, page.model.config
    st.caption(
        "Swin attends inside windows: each token only to the tokens of its own window, in every other block on a "
        "grid rolled by half a window (the shift), and each stage after the first merges 2x2 tokens into one. "
        "Choose a stage and a block, then click a patch: each head's weights over that patch's window."
    )
    stages = range(len(c.depths))
    stage = st.radio(
        "Stage",
        stages,
        format_func=lambda s: stage_line(page, s),
        key=page.widget_key("window_stage", 0, options=stages),
    )
    blocks = [b for s, _, b in block_names(page) if s == stage]
    block = st.radio(
        "Block",
        blocks,
        format_func=lambda b: block_line(page, b),
        horizontal=True,
        key=page.widget_key(f"window_block_{stage}", blocks[-1], options=blocks),
    )
    rows, cols = analysis.stage_grids[stage]
    # the clicked place, kept on the first stage's grid so that it stays where it was when the stage changes
    first_rows, first_cols = analysis.grid_size
    place = page.widget_key("window_patch", (first_rows // 2, first_cols // 2), per_image=True)
    first = st.session_state[place]
    scale = 2**stage
    row, col = min(first[0] // scale, rows - 1), min(first[1] // scale, cols - 1)
    a, b, _ = st.columns([1, 1, 2])
    new_row, new_col = a.number_input("Row", 0, rows - 1, row), b.number_input("Column", 0, cols - 1, col)
    if (new_row, new_col) != (row, col):
        row, col = int(new_row), int(new_col)
        st.session_state[place] = (row * scale, col * scale)
    per_head, fused, window = window_maps(page.model_key, page.photo.key, block, row, col, _analysis=analysis)
    left, right = st.columns(2)
    with left:
        picture = grid_picture_uri(page.photo, analysis.box, (rows, cols), (row, col))
        click = click_picture(picture, f"{page.photo.name} with stage {stage + 1}'s grid", key="window_click")
        st.caption(f"Stage {stage + 1}'s {rows}x{cols} grid (lines up to 40 a side), the chosen patch outlined.")
        clicked = clicked_place(click, page, (rows, cols))
        if clicked is not None and clicked != (row, col):  # known only once the picture is drawn: draw again
            st.session_state[place] = (clicked[0] * scale, clicked[1] * scale)
            rerun_tab()
    top = float(np.nanmax(per_head)) if np.isfinite(per_head).any() else 1.0
    value_range = (0.0, top if top > 0 else 1.0)
    where = f"patch ({row}, {col}) of stage {stage + 1}, {block_line(page, block)}"
    with right:
        st.image(
            window_picture(page.photo.image, fused, window, (row, col), analysis.box, page.settings, value_range),
            width="stretch",
            caption=f"{where}: mean over heads, over its window (outlined; the rest dimmed)",
        )
    st.subheader(f"Each head: what {where} attends to in its window")
    st.caption(
        f"{int(window.sum())} tokens in this window"
        + (" (a shifted window can wrap round the grid's edge)" if shift_of(page, block) else "")
        + ". Each head's weights over them sum to 1 (slots of padding, if any, left out); one colour scale for all."
    )
    small, shrink = thumbnail(page.photo)
    box = tuple(v * shrink for v in analysis.box)
    columns = st.columns(min(len(per_head), 6))
    for head, values in enumerate(per_head):
        columns[head % len(columns)].image(
            window_picture(small.image, values, window, (row, col), box, page.settings, value_range),
            width="stretch",
            caption=f"head {head}",
        )
    colour_legend(page.settings, *value_range, "attention weight, every head")
    name = f"patch_{row}_{col}_block{block}"
    maps = {name: np.nan_to_num(fused), f"{name}_per_head": np.nan_to_num(per_head)}
    downloads(page, name, maps, overlay=name)


def clicked_place(click: dict | None, page: Page, grid: tuple[int, int]) -> tuple[int, int] | None:
    """The (row, col) of ``grid`` under this run's click on the picture, or None (no click, or outside the input)."""
    if not click:
        return None
    place = overlays.patch_at(
        click["x"], click["y"], (click["width"], click["height"]), page.photo.image.size, grid, page.analysis.box
    )
    if place is None:
        st.toast("That point is outside the part of the photo the model saw (the dimmed border).")
    return place


def window_picture(
    image: Image.Image,
    values: np.ndarray,
    window: np.ndarray,
    mark: tuple[int, int],
    box,
    settings,
    value_range: tuple[float, float],
) -> bytes:
    """``values`` (rows, cols) coloured over the window's cells (``window``, bool), the rest of the photo dimmed, the
    window outlined and the ``mark`` patch outlined: JPEG bytes."""
    coloured = overlays.overlay(
        image, np.where(window, values, 0.0), settings.colormap, settings.alpha, box, value_range
    )
    dimmed = overlays.masked_image(image, np.zeros_like(window), box)  # every pixel at a fifth of its brightness
    keep = Image.fromarray(_cells_in_pixels(window, box, image.size).astype(np.uint8) * 255)
    picture = Image.composite(coloured, dimmed, keep)
    _outline_region(picture, window, box, (255, 255, 255))
    picture = overlays.mark_patch(picture, mark, window.shape, box)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _cells_in_pixels(cells: np.ndarray, box, size: tuple[int, int]) -> np.ndarray:
    """(height, width) bool: the pixels of the image (``size`` width, height) that the True cells cover."""
    width, height = size
    rows, cols = cells.shape
    left, top, right, bottom = box
    ys = ((np.arange(height) + 0.5 - top) / (bottom - top) * rows).astype(int)
    xs = ((np.arange(width) + 0.5 - left) / (right - left) * cols).astype(int)
    inside = (ys[:, None] >= 0) & (ys[:, None] < rows) & (xs[None] >= 0) & (xs[None] < cols)
    return inside & cells[np.clip(ys, 0, rows - 1)[:, None], np.clip(xs, 0, cols - 1)[None]]


def _outline_region(image: Image.Image, cells: np.ndarray, box, colour) -> None:
    """Draw the border of the True cells of ``cells`` (rows, cols) over ``box``, in place: each cell side whose
    neighbour is not in the region (a shifted window that wraps round the grid is outlined in its parts)."""
    rows, cols = cells.shape
    left, top, right, bottom = box
    cell_w, cell_h = (right - left) / cols, (bottom - top) / rows
    line = max(2, round(min(cell_w, cell_h) / 8))
    draw = ImageDraw.Draw(image)
    inside = np.pad(cells, 1)
    for r, c in zip(*np.nonzero(cells)):
        x0, y0 = left + c * cell_w, top + r * cell_h
        x1, y1 = x0 + cell_w, y0 + cell_h
        if not inside[r, c + 1]:  # the cell above
            draw.line([(x0, y0), (x1, y0)], fill=colour, width=line)
        if not inside[r + 2, c + 1]:  # below
            draw.line([(x0, y1 - 1), (x1, y1 - 1)], fill=colour, width=line)
        if not inside[r + 1, c]:  # left
            draw.line([(x0, y0), (x0, y1)], fill=colour, width=line)
        if not inside[r + 1, c + 2]:  # right
            draw.line([(x1 - 1, y0), (x1 - 1, y1)], fill=colour, width=line)
