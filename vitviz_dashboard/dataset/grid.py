"""The image grid: the main view of any selection of images (a confusion cell's, a latent's, a SQL result's, a lasso
on the embedding map, an image's nearest images). One selection is kept in the session (``Selection``: the ids and
where they came from); the grid shows it a page at a time, as thumbnails with a stored map drawn patch by patch on one
colour scale (its legend above), each with a button for its nearest images; and exports it (ids as CSV or Parquet, or
a sub-index folder that ``vitviz.open_index`` and `vitviz sae` read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz_dashboard.dataset import drawing, export
from vitviz_dashboard.dataset.opening import open_in_photo_page, photo
from vitviz_dashboard.dataset.table import caption, filter_clause, image_columns, map_kinds, map_name
from vitviz_dashboard.state import DATASET_TAB, SQL_JOB, TABLE_CLASSES, TABLE_CONFIDENCE, TABLE_CORRECTNESS, dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

SELECTION = dataset_key("selection")  # the session's one Selection
GRID_TAB = "Grid"  # the page's tab that shows it
PAGE = 24  # thumbnails a page of the grid shows
SIMILAR = 12  # nearest images a "Similar" click selects (the image itself first)
NO_MAP = "none"
THUMBNAIL = 192  # a thumbnail's side in pixels (drawing.patch_thumbnail's default), and its card's width


@dataclass(frozen=True)
class Selection:
    """A selection of images: their ids in the order to show them, a title that says what they are, and the view that
    made it (``"confusion"``, ``"latent"``, ``"sql"``, ``"embedding"``, ``"similar"``, ...)."""

    ids: tuple[int, ...]
    title: str
    source: str
    folder: str  # the index they belong to: a selection of another index is not shown


def select(index: DatasetIndex, ids: Sequence[int], title: str, source: str, show: bool = False) -> Selection:
    """Make these images the session's selection (duplicates dropped, the first kept); ``show`` opens the Grid tab
    (from a button's callback only, before the tabs are drawn)."""
    unique = tuple(int(i) for i in dict.fromkeys(int(i) for i in ids))
    selection = Selection(unique, title, source, str(index.folder))
    st.session_state[SELECTION] = selection
    st.session_state.pop(dataset_key("grid_page"), None)
    if show:
        DATASET_TAB.set(GRID_TAB)
    return selection


def current(index: DatasetIndex) -> Selection | None:
    """The session's selection, when it belongs to this index."""
    selection = st.session_state.get(SELECTION)
    return selection if selection is not None and selection.folder == str(index.folder) else None


def select_button(index: DatasetIndex, ids: Sequence[int], title: str, source: str, label: str, key: str) -> None:
    """A button that makes ``ids`` the selection and opens the Grid tab."""
    st.button(
        label,
        key=key,
        icon=":material/grid_view:",
        on_click=select,
        args=(index, list(ids), title, source, True),
        disabled=not len(ids),
    )


def sql_ids() -> list[int] | None:
    """The image ids of the SQL box's kept result (the Table tab), or None when it has none or no image_id column."""
    job = SQL_JOB.get()
    result = getattr(job, "result", None)
    if result is None or "image_id" not in result.columns:
        return None
    return [int(i) for i in result["image_id"].dropna()]


def similar(index: DatasetIndex, image_id: int) -> None:
    """Select the nearest images of ``image_id`` (by pooled embedding), itself first."""
    try:
        near = index.nearest_images(int(image_id), k=min(SIMILAR, index.count))
    except ValueError as error:  # an index made without an image search
        st.session_state[dataset_key("grid_message")] = f"No similar images: {error}"
        return
    select(index, near["image_id"].tolist(), f"the {len(near) - 1} images nearest to image {image_id}", "similar")


def table_ids(index: DatasetIndex) -> tuple[list[int], str] | None:
    """The image ids the Table tab's filters match (its own session-state keys), in image_id order, and the filters
    in words; None before the Table tab has drawn its filters."""
    correctness = TABLE_CORRECTNESS.get()
    if correctness is None:
        return None
    predicted = "prediction" in image_columns(index)
    chosen = list(TABLE_CLASSES.get() or [])
    confidence = tuple(TABLE_CONFIDENCE.get((0.0, 1.0)))
    where = filter_clause(chosen, correctness, confidence, predicted)
    ids = index.query(f"SELECT image_id FROM images WHERE {where} ORDER BY image_id", limit=index.count)
    words = f"{', '.join(chosen) or 'every class'}, {correctness}"
    if predicted and confidence != (0.0, 1.0):
        words += f", confidence {confidence[0]:.2f} to {confidence[1]:.2f}"
    return ids["image_id"].tolist(), f"the Table tab's filters ({words})"


def draw(page: DatasetPage) -> None:
    """The Grid tab: the Table tab's filters or the SQL result as a selection, then the selection's grid and its
    export."""
    index = page.index
    left, right = st.columns(2)
    with left:
        if (filtered := table_ids(index)) is not None:
            ids, words = filtered
            select_button(
                index,
                ids,
                words,
                "table",
                f"Show the table's filtered images ({len(ids):,})",
                dataset_key("table_grid"),
            )
    with right:
        if from_sql := sql_ids():
            select_button(
                index,
                from_sql,
                "the SQL box's result",
                "sql",
                f"Show the SQL result ({len(from_sql)})",
                dataset_key("sql_grid"),
            )
    if message := st.session_state.pop(dataset_key("grid_message"), None):
        st.warning(message)
    selection = current(index)
    if selection is None:
        st.info(
            "No selection yet: choose images with a confusion cell (Errors), a latent (Features), a lasso on the "
            "Embedding map, or a SQL query whose rows have image_id (Table), and they show here."
        )
        return
    grid(index, selection, page.photo_page, page.colormap, page.alpha)
    export.draw(index, selection)


def grid(index: DatasetIndex, selection: Selection, photo_page: st.Page, colormap: str, alpha: float) -> None:
    """The selection's thumbnails a page at a time, with a map drawn over each on one colour scale."""
    total = len(selection.ids)
    pages = max(1, -(-total // PAGE))
    head, kind_field, page_field = st.columns([3, 2, 1], vertical_alignment="bottom")
    head.markdown(f"**{total:,} images: {selection.title}**")
    kinds = [NO_MAP, *map_kinds(index)]
    kind = kind_field.selectbox(
        "Map over each photo",
        kinds,
        index=kinds.index("rollout") if "rollout" in kinds else 0,
        key=dataset_key("grid_map"),
        format_func=map_name,
    )
    page = int(page_field.number_input(f"Page (of {pages})", 1, pages, 1, key=dataset_key("grid_page")))
    ids = list(selection.ids[(page - 1) * PAGE : page * PAGE])
    rows = export.rows_of(index, ids)
    maps = index.maps(rows["image_id"].tolist(), kind) if kind != NO_MAP and len(rows) else None
    value_range = legend(maps, kind, colormap) if maps is not None else None
    st.caption(f"Images {(page - 1) * PAGE + 1:,} to {(page - 1) * PAGE + len(rows):,} of {total:,}.")
    # cards of a fixed width in a row that wraps: as many across as the page has room for (two at 800 px with the
    # sidebar open, seven at 1920 px), each photo scaled to its card, so nothing overlaps or is cut
    with st.container(horizontal=True, gap="medium", key=dataset_key("grid_cards")):
        for position, row in enumerate(rows.itertuples(index=False)):
            with st.container(width=THUMBNAIL):
                card(index, row, None if maps is None else maps[position], value_range, photo_page, colormap, alpha)


def card(index: DatasetIndex, row, patch_map, value_range, photo_page: st.Page, colormap: str, alpha: float) -> None:
    """One image of the grid: its thumbnail (with ``patch_map`` drawn over it, if any), caption and buttons."""
    shown = photo(index, row.image_id, row.path)
    if shown is not None:
        image, box = shown
        picture = (
            image
            if patch_map is None
            else drawing.patch_thumbnail(image, patch_map, box, colormap, alpha, value_range, THUMBNAIL)
        )
        st.image(picture, caption=caption(row), width="stretch")  # its path breakable already
    st.button(  # stacked, each as wide as the card
        "Similar",
        key=dataset_key(f"similar|{row.image_id}"),
        icon=":material/image_search:",
        on_click=similar,
        args=(index, row.image_id),
        help="Its nearest images by pooled embedding, as the selection",
        width="stretch",
    )
    if st.button(
        "Open in Photo",
        key=dataset_key(f"grid_open|{row.image_id}"),
        icon=":material/open_in_new:",
        width="stretch",
    ):
        open_in_photo_page(index, row.image_id, row.path, photo_page)


def legend(maps: np.ndarray, kind: str, colormap: str, scope: str = "the page") -> tuple[float, float]:
    """The colour scale of these maps (one range for all, so their colours compare), drawn with its ends; ``scope``
    says which maps share it."""
    low, high = float(np.min(maps)), float(np.max(maps))
    if not high > low:
        high = low + 1e-6
    left, middle, right = st.columns([1, 4, 1], vertical_alignment="center")
    left.caption(f"{low:.3g}")
    middle.image(drawing.colour_bar(colormap, 512, 14), caption=f"{map_name(kind)}: one scale for {scope}")
    right.caption(f"{high:.3g}")
    return low, high
