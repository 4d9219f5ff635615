"""The image grid: the main view of any selection of images (a confusion cell's, a latent's, a SQL result's, a lasso
on the embedding map, an image's nearest images). One selection is kept in the session (``Selection``: the ids and
where they came from); the grid shows it a page at a time, as thumbnails with a stored map drawn patch by patch on one
colour scale (its legend above), each captioned with its similarity (when a search made the selection, which can then
be ordered by it) and its tags, each with a button for its nearest images; and exports it (ids as CSV or Parquet, or
a sub-index folder that ``vitviz.open_index`` and `vitviz sae` read)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz_dashboard.dataset import drawing, export
from vitviz_dashboard.dataset.link import SELECTION, TABLE_TAGS, Selection, current_selection
from vitviz_dashboard.dataset.opening import open_in_photo_page, photo
from vitviz_dashboard.dataset.table import caption, filter_clause, image_columns, map_kinds, map_name
from vitviz_dashboard.state import DATASET_TAB, SQL_JOB, TABLE_CLASSES, TABLE_CONFIDENCE, TABLE_CORRECTNESS, dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

GRID_TAB = "Grid"  # the page's tab that shows it
PAGE = 24  # thumbnails a page of the grid shows
SIMILAR = 12  # nearest images a "Similar" click selects (the image itself first)
NO_MAP = "none"
GRID_MAP = dataset_key("grid_map")  # the map drawn over the grid's photos
LAST_MAP = dataset_key("grid_map_shown")  # that map, kept while the Grid is not drawn (a saved view keeps it)
ORDER = dataset_key("grid_order")  # the order of a selection with similarity scores (ORDERS)
ORDERS = ("similarity, highest first", "similarity, lowest first", "image id")
THUMBNAIL = 192  # a thumbnail's side in pixels (drawing.patch_thumbnail's default), and its card's width


def select(
    index: DatasetIndex,
    ids: Sequence[int],
    title: str,
    source: str,
    show: bool = False,
    scores: Sequence[float] | None = None,
) -> Selection:
    """Make these images the session's selection (duplicates dropped, the first kept, with its score: a search's
    results come best first); ``scores``, one per id, are their similarities; ``show`` opens the Grid tab (from a
    button's callback only, before the tabs are drawn)."""
    first: dict[int, float | None] = {}
    for position, image_id in enumerate(ids):
        first.setdefault(int(image_id), None if scores is None else float(scores[position]))
    kept = tuple(first.values()) if scores is not None else None
    selection = Selection(tuple(first), title, source, str(index.folder), kept)
    st.session_state[SELECTION] = selection
    st.session_state.pop(dataset_key("grid_page"), None)
    if show:
        DATASET_TAB.set(GRID_TAB)
    return selection


def current(index: DatasetIndex) -> Selection | None:
    """The session's selection, when it belongs to this index."""
    return current_selection(str(index.folder))


def select_button(
    index: DatasetIndex,
    ids: Sequence[int],
    title: str,
    source: str,
    label: str,
    key: str,
    scores: Sequence[float] | None = None,
) -> None:
    """A button that makes ``ids`` (with their similarity ``scores``, if any) the selection and opens the Grid tab."""
    st.button(
        label,
        key=key,
        icon=":material/grid_view:",
        on_click=select,
        args=(index, list(ids), title, source, True, None if scores is None else list(scores)),
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
    title = f"image {image_id} and the {len(near) - 1} images nearest to it"  # "12 images: image 94 and the 11 ..."
    select(index, near["image_id"].tolist(), title, "similar", scores=near["similarity"].tolist())


def table_ids(index: DatasetIndex) -> tuple[list[int], str] | None:
    """The image ids the Table tab's filters match (its own session-state keys), in image_id order, and the filters
    in words; None before the Table tab has drawn its filters."""
    correctness = TABLE_CORRECTNESS.get()
    if correctness is None:
        return None
    predicted = "prediction" in image_columns(index)
    chosen = list(TABLE_CLASSES.get() or [])
    confidence = tuple(TABLE_CONFIDENCE.get((0.0, 1.0)))
    tags = list(TABLE_TAGS.get() or [])
    where = filter_clause(chosen, correctness, confidence, predicted, tags)
    ids = index.query(f"SELECT image_id FROM images WHERE {where} ORDER BY image_id", limit=index.count)
    words = f"{', '.join(chosen) or 'every class'}, {correctness}"
    if predicted and confidence != (0.0, 1.0):
        words += f", confidence {confidence[0]:.2f} to {confidence[1]:.2f}"
    if tags:
        words += f", tagged {' or '.join(tags)}"
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
    if st.session_state.get(GRID_MAP) not in kinds:  # the default in the state, not the widget (a saved view sets it)
        st.session_state[GRID_MAP] = "rollout" if "rollout" in kinds else NO_MAP
    kind = kind_field.selectbox("Map over each photo", kinds, key=GRID_MAP, format_func=map_name)
    st.session_state[LAST_MAP] = kind
    page = int(page_field.number_input(f"Page (of {pages})", 1, pages, 1, key=dataset_key("grid_page")))
    ordered, scores = ordered_ids(selection)
    ids = ordered[(page - 1) * PAGE : page * PAGE]
    rows = export.rows_of(index, ids)
    maps = index.maps(rows["image_id"].tolist(), kind) if kind != NO_MAP and len(rows) else None
    value_range = legend(maps, kind, colormap) if maps is not None else None
    tagged = tags_by_image(index, rows["image_id"].tolist())
    st.caption(f"Images {(page - 1) * PAGE + 1:,} to {(page - 1) * PAGE + len(rows):,} of {total:,}.")
    # cards of a fixed width in a row that wraps: as many across as the page has room for (two at 800 px with the
    # sidebar open, seven at 1920 px), each photo scaled to its card, so nothing overlaps or is cut
    with st.container(horizontal=True, gap="medium", key=dataset_key("grid_cards")):
        for position, row in enumerate(rows.itertuples(index=False)):
            words = card_caption(row, scores.get(row.image_id), tagged.get(row.image_id, []))
            with st.container(width=THUMBNAIL):
                shown = None if maps is None else maps[position]
                card(index, row, shown, value_range, photo_page, colormap, alpha, words)


def ordered_ids(selection: Selection) -> tuple[list[int], dict[int, float]]:
    """The selection's ids in the order chosen (a selection with similarity scores offers ORDERS; others keep their
    own order), and the scores by id (empty without)."""
    if selection.scores is None:
        return list(selection.ids), {}
    scores = dict(zip(selection.ids, selection.scores))
    order = st.selectbox("Order", ORDERS, key=ORDER, help="the selection came from a similarity search")
    if order == ORDERS[2]:
        return sorted(selection.ids), scores
    return sorted(selection.ids, key=scores.__getitem__, reverse=order == ORDERS[0]), scores


def tags_by_image(index: DatasetIndex, ids: Sequence[int]) -> dict[int, list[str]]:
    """These images' tags (vitviz/dataset/tags.py), by id; a tags file that cannot be read is said once."""
    try:
        frame = index.tags(ids) if len(ids) else None
    except ValueError as error:
        st.warning(f"Tags not shown: {error}")
        return {}
    if frame is None:
        return {}
    return {int(i): group.tolist() for i, group in frame.groupby("image_id")["tag"]}


def card_caption(row, similarity: float | None, tags: Sequence[str]) -> str:
    """The table's caption of the image, then its similarity (when a search made the selection) and its tags."""
    text = caption(row)
    if similarity is not None:
        text += f", similarity {similarity:.3f}"
    if tags:
        text += f", tags: {', '.join(tags)}"
    return text


def card(
    index: DatasetIndex,
    row,
    patch_map,
    value_range,
    photo_page: st.Page,
    colormap: str,
    alpha: float,
    words: str | None = None,
) -> None:
    """One image of the grid: its thumbnail (with ``patch_map`` drawn over it, if any), caption (``words``, by
    default the table's) and buttons."""
    shown = photo(index, row.image_id, row.path)
    if shown is not None:
        image, box = shown
        picture = (
            image
            if patch_map is None
            else drawing.patch_thumbnail(image, patch_map, box, colormap, alpha, value_range, THUMBNAIL)
        )
        st.image(picture, caption=words or caption(row), width="stretch")  # its path breakable already
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
