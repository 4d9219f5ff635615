"""The tabs for a model that attends in windows and merges tokens between stages (Swin, Swin v2).

Such a model has no [CLS] or prefix tokens, a different number of tokens and heads in each stage, and one small
attention matrix per window instead of one (T, T) matrix per block, so the ViT tabs' views do not apply as they
are. Here: Overview (the predictions and the rollout across windows and stages), Heads & layers (a stage and block
picker; a clicked patch's attention over its own window, per head, padded slots drawn past the grid's edge; each
head knocked out in turn), Class-specific (class_specific.py itself, with
the methods that read windows), Model anatomy (entropy and mean attention distance per block and head, measured
inside the windows), Faithfulness (faithfulness.py itself: the perturbation curves of the maps that read windows),
Features (windowed_features.py: any block's tokens as PCA colours and matches on its stage's grid); every other tab
says in one line why it does not apply.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable

import numpy as np
import streamlit as st
import torch
from PIL import Image, ImageDraw

from vitviz import explain
from vitviz.explain.head_statistics import DISTANCE_PX, ENTROPY
from vitviz.model.windows import window_cells
from vitviz.render import overlays
from vitviz.render.heads import signed_layer_head_figure
from vitviz_dashboard.cache.pictures import grid_picture_uri, thumbnail
from vitviz_dashboard.cache.results import class_map, head_ranking, window_maps
from vitviz_dashboard.downloads import chart_download, downloads
from vitviz_dashboard.names import class_name, has_classifier, top_class, without_classes
from vitviz_dashboard.page import Page
from vitviz_dashboard.tabs import anatomy, class_specific, faithfulness, overview, windowed_features
from vitviz_dashboard.widgets.click_picture import click_picture
from vitviz_dashboard.widgets.controls import class_picker, colour_legend, rerun_tab

# why each ViT tab that is not drawn here does not apply, in one line
NOT_FOR_WINDOWS = {
    "Click a patch": "Swin attends inside windows: a clicked patch's attention over its own window, per head and "
    "for every stage and block, is in Heads & layers.",
    "Tokens": "Not for Swin: it has no [CLS], register or other prefix tokens to attend to or take out; its head "
    "reads the mean of the last stage's tokens.",
    "SAE features": "Not for Swin: a sparse autoencoder reads one block's tokens of a ViT; Swin's tokens change "
    "grid and width at every stage, and vitviz trains none for them.",
}


def tabs(vit_tabs: dict[str, Callable[[Page], None]]) -> dict[str, Callable[[Page], None]]:
    """The page's tabs, in the ViT page's order and names, each drawn for a windowed model."""
    drawn = {
        "Overview": draw_overview,
        "Heads & layers": draw_heads,
        "Class-specific": class_specific.draw,
        "Model anatomy": draw_anatomy,
        "Faithfulness": faithfulness.draw,
        "Features": windowed_features.draw,
    }
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


def draw_anatomy(page: Page) -> None:
    """The head statistics inside the windows, one row per block (stages one after another), one column per head:
    a stage with fewer heads leaves its last columns blank."""
    st.caption(
        "Measured inside each window: a query sees only its window's tokens, so a head's distance is bounded by the "
        "window (7 tokens of 4, 8, 16 and 32 px at 224 px for Swin-T), and padded slots are left out. Swin has no "
        "position table: its positions are a relative bias inside each window."
        + " Blocks: "
        + "; ".join(stage_line(page, s) for s in range(len(page.model.config.depths)))
        + "."
    )
    shown = (ENTROPY, DISTANCE_PX)
    for statistic, column in zip(shown, st.columns(len(shown)), strict=True):
        column.subheader(statistic.title())
        column.caption(f"For each head, {statistic.description}; here over the query's window.")
    for statistic, column in zip(shown, st.columns(len(shown)), strict=True):
        anatomy.head_statistic_chart(page, statistic, column)


def block_names(page: Page) -> list[tuple[int, int, int]]:
    """(stage, block within the stage, block index) of every block."""
    depths = page.model.config.depths
    return [(s, i, sum(depths[:s]) + i) for s, depth in enumerate(depths) for i in range(depth)]


def stage_line(page: Page, stage: int) -> str:
    """E.g. "stage 2: 28x28 tokens, windows 7x7, blocks 2 to 3" (blocks counted from 0 over every stage)."""
    c, (rows, cols) = page.model.config, page.analysis.stage_grids[stage]
    window = c.windows[stage]
    first = sum(c.depths[:stage])
    blocks = f"block {first}" if c.depths[stage] == 1 else f"blocks {first} to {first + c.depths[stage] - 1}"
    return f"stage {stage + 1}: {rows}x{cols} tokens, windows {window[0]}x{window[1]}, {blocks}"


def block_line(page: Page, block: int) -> str:
    """E.g. "block 3 (shifted by 3x3)" or "block 2 (not shifted)": numbered from 0 over every stage, as the
    Features tab and the logit lens number them."""
    shift = shift_of(page, block)
    return f"block {block} ({f'shifted by {shift[0]}x{shift[1]}' if shift else 'not shifted'})"


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
    cells, padding = padded_slots(page, block, (row, col))  # (P, 2), (heads, P): none where the window has none
    left, right = st.columns(2)
    with left:
        picture = grid_picture_uri(page.photo, analysis.box, (rows, cols), (row, col))
        click = click_picture(picture, f"{page.photo.name} with stage {stage + 1}'s grid", key="window_click")
        st.caption(f"Stage {stage + 1}'s {rows}x{cols} grid (lines up to 40 a side), the chosen patch outlined.")
        clicked = clicked_place(click, page, (rows, cols))
        if clicked is not None and clicked != (row, col):  # known only once the picture is drawn: draw again
            st.session_state[place] = (clicked[0] * scale, clicked[1] * scale)
            rerun_tab()
    top = max(float(np.nanmax(per_head)) if np.isfinite(per_head).any() else 1.0, float(padding.max(initial=0.0)))
    value_range = (0.0, top if top > 0 else 1.0)
    where = f"patch ({row}, {col}) of stage {stage + 1}, {block_line(page, block)}"
    with right:
        st.image(
            window_picture(
                page.photo.image,
                fused,
                window,
                (row, col),
                analysis.box,
                page.settings,
                value_range,
                (cells, padding.mean(axis=0)),
            ),
            width="stretch",
            caption=f"{where}: mean over heads, over its window (outlined; the rest dimmed)",
        )
    st.subheader(f"Each head: what {where} attends to in its window")
    st.caption(
        f"{int(window.sum())} tokens in this window"
        + (" (a shifted window can wrap round the grid's edge)" if shift_of(page, block) else "")
        + (
            f", and {len(cells)} padded slots (no pixels: the grid was padded to whole windows), drawn hatched past "
            f"the grid's edge where the padding put them; they take {padding.sum(axis=1).mean():.1%} of the weight, "
            "the mean over heads. "
            if len(cells)
            else ". Each head's weights over them sum to 1. "
        )
        + "One colour scale for all."
    )
    small, shrink = thumbnail(page.photo)
    box = tuple(v * shrink for v in analysis.box)
    columns = st.columns(min(len(per_head), 6))
    for head, values in enumerate(per_head):
        columns[head % len(columns)].image(
            window_picture(
                small.image, values, window, (row, col), box, page.settings, value_range, (cells, padding[head])
            ),
            width="stretch",
            caption=f"head {head}",
        )
    colour_legend(page.settings, *value_range, "attention weight, every head")
    name = f"patch_{row}_{col}_block{block}"
    maps = {name: np.nan_to_num(fused), f"{name}_per_head": np.nan_to_num(per_head)}
    downloads(page, name, maps, overlay=name)
    st.divider()
    head_knockouts(page)


def head_knockouts(page: Page) -> None:
    """Each head knocked out in turn, in every window of its block (explain.head_importance through Swin's head
    mask): how much the chosen class's logit drops, every block and head."""
    st.subheader("Which heads the prediction depends on")
    if not has_classifier(page.model):
        st.info(f"{without_classes(page.settings)}: head importance needs classes.")
        return
    c = page.model.config
    heads = sum(depth * count for depth, count in zip(c.depths, c.num_heads, strict=True))
    if not st.toggle(f"Knock out each head in turn ({heads} forward passes)", key=page.widget_key("swin_rank", False)):
        st.caption("Each of the model's heads is removed in turn (its output zeroed in every window of its block).")
        return
    target = class_picker(page)
    ranking = head_ranking(page.model_key, page.photo.key, target, _analysis=page.analysis, _model=page.model)
    drop = -ranking["logit_change"]  # (layers, heads), NaN past a stage's own heads
    figure = signed_layer_head_figure(np.nan_to_num(drop), "Logit drop when removed", "drop")
    figure.data[0].z = drop  # the heads a block does not have left blank
    st.plotly_chart(figure, theme=None, key="swin_head_ranking")
    st.caption(
        f"How much the logit of '{class_name(page.model, target)}' drops when each head alone is removed (its output "
        "zeroed in every window of its block, the rest of the model re-run; Michel et al. 2019): red heads push the "
        "class up, blue ones down; rows are blocks, stage after stage, blank past a stage's heads. Knocking heads "
        "out of the whole page is for ViTs."
    )
    chart_download(st, page, f"head importance for {class_name(page.model, target)}", ranking)


def padded_slots(page: Page, block: int, place: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The padded slots of the window that holds token ``place`` (row, col) of block ``block``: where each is drawn,
    past the grid's bottom or right edge (model.windows.window_cells), (P, 2), and each head's weight on it from
    that token, (heads, P). P = 0 for a window without padding."""
    analysis, config = page.analysis, page.model.config
    stage, index, _ = block_names(page)[block]
    grid = analysis.stage_grids[stage]
    heads = analysis.attentions[block].shape[1]
    views = [explain.window_attention_map(analysis.attentions, analysis.layouts, block, place, h) for h in range(heads)]
    if not len(views[0].padded_slots):
        return np.zeros((0, 2), dtype=np.int64), np.zeros((heads, 0), dtype=np.float32)
    cells = window_cells(grid, config.windows[stage], page.model.block_shift(stage, index, grid), config.padding)
    weights = torch.stack([view.padding[0] for view in views]).float().cpu().numpy()
    return cells[views[0].window][views[0].padded_slots].numpy(), weights


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
    padded: tuple[np.ndarray, np.ndarray] | None = None,
) -> bytes:
    """``values`` (rows, cols) coloured over the window's cells (``window``, bool), the rest of the photo dimmed, the
    window outlined and the ``mark`` patch outlined: JPEG bytes. ``padded`` (cells (P, 2), weights (P,)): the
    window's padded slots, each drawn hatched in its weight's colour at its cell past the grid's bottom or right
    edge (vitviz.model.windows.window_cells), on a grey margin added to the picture where they reach past it."""
    coloured = overlays.overlay(
        image, np.where(window, values, 0.0), settings.colormap, settings.alpha, box, value_range
    )
    dimmed = overlays.masked_image(image, np.zeros_like(window), box)  # every pixel at a fifth of its brightness
    keep = Image.fromarray(_cells_in_pixels(window, box, image.size).astype(np.uint8) * 255)
    picture = Image.composite(coloured, dimmed, keep)
    region, region_box = window, box
    if padded is not None and len(padded[0]):
        picture, region, region_box = _with_padding(picture, window, box, padded, settings, value_range)
    _outline_region(picture, region, region_box, (255, 255, 255))
    picture = overlays.mark_patch(picture, mark, window.shape, box)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _with_padding(picture: Image.Image, window: np.ndarray, box, padded, settings, value_range):
    """The picture on a canvas that reaches the padded cells, those cells drawn (their weight's colour, hatched), the
    window's cells with them, and the box of that larger grid."""
    cells, weights = padded
    rows, cols = window.shape
    more_rows, more_cols = max(0, int(cells[:, 0].max()) + 1 - rows), max(0, int(cells[:, 1].max()) + 1 - cols)
    left, top, right, bottom = box
    cell_w, cell_h = (right - left) / cols, (bottom - top) / rows
    grown = (left, top, right + more_cols * cell_w, bottom + more_rows * cell_h)
    size = (max(picture.width, int(np.ceil(grown[2]))), max(picture.height, int(np.ceil(grown[3]))))
    canvas = Image.new("RGB", size, (70, 70, 70))
    canvas.paste(picture.convert("RGB"), (0, 0))
    low, high = value_range
    colours = overlays.colorize(np.clip((np.asarray(weights) - low) / (high - low), 0, 1)[None], settings.colormap)[0]
    draw = ImageDraw.Draw(canvas)
    step = max(3, round(min(cell_w, cell_h) / 4))
    for (row, col), colour in zip(cells, colours, strict=True):
        x0, y0 = left + col * cell_w, top + row * cell_h
        x1, y1 = x0 + cell_w, y0 + cell_h
        draw.rectangle([x0, y0, x1, y1], fill=tuple(int(v) for v in colour))
        for offset in range(step, int(cell_w + cell_h), step):  # hatched: no pixels of the photo here
            start = (x0 + offset, y0) if offset <= cell_w else (x1, y0 + offset - cell_w)
            end = (x0, y0 + offset) if offset <= cell_h else (x0 + offset - cell_h, y1)
            draw.line([start, end], fill=(150, 150, 150), width=1)
        draw.rectangle([x0, y0, x1, y1], outline=(150, 150, 150))
    region = np.zeros((rows + more_rows, cols + more_cols), dtype=bool)
    region[:rows, :cols] = window
    region[cells[:, 0], cells[:, 1]] = True
    return canvas, region, grown


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
