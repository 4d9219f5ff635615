"""The table of images: filters by class, correctness, confidence and tag, sorting by any column (and by similarity
when a search made the Grid's selection), a page at a time (a million-row index is never drawn whole), row selection
and the ticked rows' tags (tagging.py); the selection's thumbnails with a chosen map, each with a
button that opens it in the Photo page; and the read-only SQL box (sql_box.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.tags import MAX_TAG
from vitviz.dataset.views import quote
from vitviz.messages import counted
from vitviz_dashboard.dataset import drawing
from vitviz_dashboard.dataset.link import SIMILARITY, TABLE_TAGS, similarity_scores, ticked
from vitviz_dashboard.dataset.opening import open_in_photo_page, photo
from vitviz_dashboard.dataset.sql_box import sql_box
from vitviz_dashboard.state import (
    TABLE_CLASSES,
    TABLE_CONFIDENCE,
    TABLE_CORRECTNESS,
    TABLE_DESCENDING,
    TABLE_SORT,
    dataset_key,
)

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

PAGE_ROWS = 100  # rows the table shows at once
MAX_THUMBNAILS = 24  # selected images drawn at once
# what a reader looks at first comes first, so that it is in sight at 800 px: the file's path and size after it
COLUMNS = ["image_id", "label", "prediction", "probability", "correct", "path", "width", "height", "error"]
CORRECTNESS = ["all", "correct", "wrong", "unlabelled"]
MAX_SCORED = 2_000  # similarity scores the table joins (a search gives at most 64)
TAG_TEXT, TAG_MESSAGE = dataset_key("tag_text"), dataset_key("tag_message")  # the tag form's field; what it did
TAGS_COLUMN = ", (SELECT list(tag ORDER BY tag) FROM tags WHERE tags.image_id = images.image_id) AS tags"


def image_columns(index: DatasetIndex) -> list[str]:
    stored = set(index.query("SELECT * FROM images", limit=1).columns)
    return [c for c in COLUMNS if c in stored]  # in COLUMNS' order


def classes(index: DatasetIndex) -> list[str]:
    frame = index.query("SELECT DISTINCT label FROM images WHERE label IS NOT NULL ORDER BY label", limit=5000)
    return frame["label"].astype(str).tolist()


def filter_clause(
    chosen: Sequence[str],
    correctness: str,
    confidence: tuple[float, float],
    predicted: bool,
    tags: Sequence[str] = (),
) -> str:
    """The WHERE clause of the filters (``tags``: images with any of them, from the index's ``tags`` table)."""
    conditions = []
    if tags:
        conditions.append(f"image_id IN (SELECT image_id FROM tags WHERE tag IN ({', '.join(quote(t) for t in tags)}))")
    if chosen:
        conditions.append(f"label IN ({', '.join(quote(c) for c in chosen)})")
    if predicted:
        conditions.append({"all": "TRUE", "correct": "correct", "wrong": "NOT correct"}.get(correctness, "TRUE"))
        if confidence != (0.0, 1.0):
            conditions.append(f"probability BETWEEN {float(confidence[0])} AND {float(confidence[1])}")
    if correctness == "unlabelled":
        conditions.append("label IS NULL")
    return " AND ".join(conditions) or "TRUE"


def draw(page: DatasetPage) -> None:
    index = page.index
    columns = image_columns(index)
    predicted = "prediction" in columns  # a backbone's index has no prediction columns
    left, middle, right = st.columns(3)
    chosen = left.multiselect("Class", classes(index), key=str(TABLE_CLASSES), placeholder="every class")
    correctness = middle.radio("Correctness", CORRECTNESS, horizontal=True, key=str(TABLE_CORRECTNESS))
    # the default in the state, not the widget: the kept value is written back in every run (state.keep_widgets),
    # and a widget with both logs Streamlit's warning
    TABLE_CONFIDENCE.setdefault((0.0, 1.0))
    confidence = right.slider("Confidence (top class's probability)", 0.0, 1.0, step=0.01, key=str(TABLE_CONFIDENCE))
    tag_field, sort, descending, page_field = st.columns([2, 2, 1, 1], vertical_alignment="bottom")
    known = known_tags(index)
    tags = tag_filter(known, tag_field)
    scores = similarity_scores(str(index.folder))  # the Grid's selection, when a similarity search made it
    scores = scores if len(scores) <= MAX_SCORED else {}  # joined as literals: a search's few, not a saved million
    orders = [*columns, SIMILARITY] if scores else columns
    if TABLE_SORT.get() not in (None, *orders):  # "similarity" of a selection since replaced
        TABLE_SORT.set(columns[0])
    order = sort.selectbox("Sort by", orders, key=str(TABLE_SORT))
    down = descending.checkbox("descending", key=str(TABLE_DESCENDING))
    where = filter_clause(chosen, correctness, confidence, predicted, tags)
    total = int(index.query(f"SELECT count(*) AS n FROM images WHERE {where}")["n"][0])
    pages = max(1, -(-total // PAGE_ROWS))
    number = page_field.number_input(f"Page (of {pages})", 1, pages, 1, key=dataset_key("page"))
    listed = index.query(
        f"SELECT {', '.join(columns)}{TAGS_COLUMN if known else ''}{scored(scores)} WHERE {where} "
        f"ORDER BY {order} {'DESC' if down else 'ASC'} NULLS LAST, image_id",
        limit=PAGE_ROWS,
        offset=(int(number) - 1) * PAGE_ROWS,
    )
    st.caption(
        f"{counted(total, 'image')} {'matches' if total == 1 else 'match'}; rows {(number - 1) * PAGE_ROWS + 1:,} to "
        f"{(number - 1) * PAGE_ROWS + len(listed):,}"
        + (f"; *{SIMILARITY}*: the Grid's selection's ({len(scores)} images)" if scores else "")
    )
    # the ticked rows are kept by image id for each index: back from the Photo page, the table ticks them again
    kept = ticked(str(index.folder))
    before = set(kept.get() or [])
    event = st.dataframe(
        listed,
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        # other rows listed (a new page, filter or sort, or a tag changed under a tag filter) start a new selection:
        # of the kept ticks, those it lists. Streamlit's selection is of row positions, so a table whose rows changed
        # under the same key would tick whatever image came to sit where a ticked one was
        key=dataset_key(f"table|{rows_digest(listed['image_id'])}"),
        selection_default={"selection": {"rows": [i for i, n in enumerate(listed["image_id"]) if n in before]}},
    )
    selected = listed.iloc[list(event.selection.rows)] if event.selection.rows else listed.iloc[:0]
    kept.set([int(i) for i in selected["image_id"]])
    tag_form(index, [int(i) for i in selected["image_id"]])
    thumbnails(index, selected, page.photo_page, page.colormap, page.alpha, "table")
    sql_box(index)


def rows_digest(ids: pd.Series) -> str:
    """A short digest of the image ids a table lists, in their order: the table widget's key."""
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=8).hexdigest()


def known_tags(index: DatasetIndex) -> list[str]:
    """The index's tags, each once, sorted; none (said once) when its tags file cannot be read."""
    try:
        return sorted(index.tags()["tag"].unique().tolist())
    except ValueError as error:
        st.warning(f"Tags not read: {error}")
        return []


def tag_filter(known: list[str], field) -> list[str]:
    """The Tag filter (images with any chosen tag), its options the index's tags ``known``; the chosen ones."""
    if TABLE_TAGS.present:  # a link's or a saved view's tag the index no longer has is dropped, not an error
        TABLE_TAGS.set([t for t in TABLE_TAGS.get() or [] if t in known])
    return field.multiselect(
        "Tag",
        known,
        key=str(TABLE_TAGS),
        placeholder="any tag" if known else "no tags yet",
        help="images with any of the chosen tags; tag the ticked rows below the table",
    )


def tag_form(index: DatasetIndex, ids: list[int]) -> None:
    """A tag typed in, and buttons that put it on the ticked rows (``ids``) or take it off; one line says what was
    done, or why not."""
    text, add, remove = st.columns([2, 1, 1], vertical_alignment="bottom")
    text.text_input("Tag the ticked rows", key=TAG_TEXT, placeholder="e.g. blurry", max_chars=MAX_TAG)
    add.button(
        f"Tag {len(ids)} ticked" if ids else "Tag ticked",
        key=dataset_key("tag_add"),
        icon=":material/sell:",
        on_click=change_tags,
        args=(index, ids, True),
        disabled=not ids,
        width="stretch",
    )
    remove.button(
        "Untag",
        key=dataset_key("tag_remove"),
        icon=":material/label_off:",
        on_click=change_tags,
        args=(index, ids, False),
        disabled=not ids,
        width="stretch",
    )
    if message := st.session_state.pop(TAG_MESSAGE, None):
        kind, words = message
        (st.error if kind == "error" else st.success)(words)


def change_tags(index: DatasetIndex, ids: list[int], add: bool) -> None:
    """The tag form's buttons (a callback: the table's Tag filter, drawn after it, lists a new tag at once)."""
    tag = str(st.session_state.get(TAG_TEXT, ""))
    try:
        changed = index.tag(ids, tag) if add else index.untag(ids, tag)
    except ValueError as error:  # TagError: the name, or the file beside the index
        st.session_state[TAG_MESSAGE] = ("error", f"No tag {'added' if add else 'removed'}: {error}")
        return
    tag = tag.strip()
    if add:
        words = f"Tagged {changed} of the {len(ids)} ticked images `{tag}`" + (
            f" ({len(ids) - changed} already were)." if changed < len(ids) else "."
        )
    else:
        words = f"Took `{tag}` off {changed} of the {len(ids)} ticked images."
    st.session_state[TAG_MESSAGE] = ("success", words)


def scored(scores: dict[int, float]) -> str:
    """The FROM of the table's query: the images, with a similarity column joined when the selection has scores."""
    if not scores:
        return " FROM images"
    values = ", ".join(f"({int(i)}, {float(v)!r})" for i, v in scores.items())
    return f", {SIMILARITY} FROM images LEFT JOIN (VALUES {values}) AS scores(image_id, {SIMILARITY}) USING (image_id)"


def map_kinds(index: DatasetIndex) -> list[str]:
    heads = index.layout["heads"]
    stored = set().union(*(s["files"] for s in index.shards))
    kinds = ["rollout", "readout", *(f"readout:{h}" for h in range(heads))]
    return kinds + (["relevance"] if "relevance.npy" in stored else [])


MAP_NAMES = {
    "rollout": "attention rollout",
    "readout": "last block's readout attention, heads averaged",
    "relevance": "relevance",
}


def map_name(kind: str) -> str:
    """A stored map's name as the page shows it (``readout:3``: the last block's readout attention, head 3)."""
    if kind.startswith("readout:"):
        return f"last block's readout attention, head {kind.removeprefix('readout:')}"
    return MAP_NAMES.get(kind, kind)


def thumbnails(
    index: DatasetIndex, rows: pd.DataFrame, photo_page: st.Page, colormap: str, alpha: float, where: str
) -> None:
    """The rows' photos with a chosen stored map over each, and a button per photo that opens it in the Photo page."""
    if rows.empty:
        st.caption("Select rows (the boxes at the left of the table) to see their photos with a map.")
        return
    if len(rows) > MAX_THUMBNAILS:
        st.caption(f"The first {MAX_THUMBNAILS} of the {len(rows)} images.")
        rows = rows.iloc[:MAX_THUMBNAILS]
    kind = st.selectbox(
        "Map over each photo",
        map_kinds(index),
        key=dataset_key(f"map|{where}"),
        format_func=map_name,
    )
    maps = index.maps(rows["image_id"].tolist(), kind)
    grid = st.columns(4)
    for position, (row, patch_map) in enumerate(zip(rows.itertuples(), maps)):
        with grid[position % 4]:
            shown = photo(index, row.image_id, row.path)
            if shown is not None:
                image, box = shown
                st.image(drawing.map_thumbnail(image, patch_map, box, colormap, alpha), caption=caption(row))
            if st.button(
                "Open in Photo", key=dataset_key(f"open|{where}|{row.image_id}"), icon=":material/open_in_new:"
            ):
                open_in_photo_page(index, row.image_id, row.path, photo_page)


def caption(row) -> str:
    label = getattr(row, "label", None)
    prediction = getattr(row, "prediction", None)
    text = f"{row.image_id}: {drawing.breakable(row.path)}"  # breaks between folders at 800 px, not in a name
    if label is not None and not pd.isna(label):
        text += f", {label}"
    if prediction is not None and not pd.isna(prediction):
        text += f" → {prediction} ({row.probability:.0%})"
    return text
