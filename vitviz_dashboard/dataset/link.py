"""The Dataset page's view, kept per index and written into the page's address.

Each index keeps its own Table filters and order: opening another index (a sub-index made from a selection, say) puts
the open one's filters aside and brings back the other's, or none, so a filter never carries silently into another
index and is back on return. Ticked table rows are kept per index too, by image id, so they outlive a visit to the
Photo page. The session's one selection of images (``Selection``, which the Grid shows) is kept here too, with its
similarity scores when a search made it. The open index, tab and filters (a tag filter included) are written into the
address (``/dataset?index=DIR&tab=Errors&class=cat&correctness=wrong&tag=blurry``) in every run, so a reload or a
shared link opens the same filtered view; a link's values that do not fit the index are left out with one warning that
names them, never a traceback. Named views (saved.py) keep the same values, and the selection, beside the index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import streamlit as st

from vitviz.dataset.tags import check_tag
from vitviz_dashboard.state import (
    DATASET_FOLDER,
    DATASET_TAB,
    TABLE_CLASSES,
    TABLE_CONFIDENCE,
    TABLE_CORRECTNESS,
    TABLE_DESCENDING,
    TABLE_SORT,
    Key,
    dataset_key,
    kept,
)

URL_INDEX = "index"  # the query parameter that holds the open index's folder
URL_TAB, URL_CLASS, URL_CORRECTNESS, URL_CONFIDENCE, URL_SORT, URL_DESCENDING, URL_TAG = (
    "tab",
    "class",  # repeated, one per chosen class
    "correctness",
    "confidence",  # "low,high"
    "sort",
    "descending",  # "1"
    "tag",  # repeated, one per chosen tag (images with any of them)
)
TABLE_TAGS: Key[list[str]] = Key(kept(dataset_key("table_tags")))  # the Table's tag filter (vitviz/dataset/tags.py)
SIMILARITY = "similarity"  # the Table's sort by the selection's scores: not in the address (the selection is not)
FILTERS = (TABLE_CLASSES, TABLE_CORRECTNESS, TABLE_CONFIDENCE, TABLE_SORT, TABLE_DESCENDING, TABLE_TAGS)
HELD = dataset_key("filters_folder")  # the index whose filters the Table's widget keys hold now
PUT_ASIDE = dataset_key("filters_of")  # folder -> {key: value}: the filters of the indexes not open now
TICKED = dataset_key("ticked")  # folder -> image ids ticked in the table
LINK = dataset_key("link")  # the address's values read at the session's start, until the index they name opens
CORRECTNESS = ("all", "correct", "wrong", "unlabelled")
SELECTION = dataset_key("selection")  # the session's one Selection (grid.py shows it)


@dataclass(frozen=True)
class Selection:
    """A selection of images: their ids in the order to show them, a title that says what they are, and the view that
    made it (``"confusion"``, ``"latent"``, ``"sql"``, ``"embedding"``, ``"similar"``, ``"patch search"``, ...)."""

    ids: tuple[int, ...]
    title: str
    source: str
    folder: str  # the index they belong to: a selection of another index is not shown
    scores: tuple[float, ...] | None = None  # each image's similarity, when a search made the selection


def current_selection(folder: str) -> Selection | None:
    """The session's selection, when it belongs to the index in ``folder``."""
    selection = st.session_state.get(SELECTION)
    return selection if selection is not None and selection.folder == folder else None


def similarity_scores(folder: str) -> dict[int, float]:
    """image id -> similarity of the session's selection of this index, when a search made it; else empty."""
    selection = current_selection(folder)
    if selection is None or selection.scores is None:
        return {}
    return dict(zip(selection.ids, selection.scores))


def read_link() -> None:
    """At a session's start (no index folder typed yet), the address's index folder into the sidebar's field and its
    other values kept until that index opens (``apply_link``)."""
    if DATASET_FOLDER.present or not st.query_params.get(URL_INDEX):
        return
    DATASET_FOLDER.set(st.query_params[URL_INDEX])
    st.session_state[LINK] = {name: st.query_params.get_all(name) for name in st.query_params if name != URL_INDEX}


def apply_link(folder: str, classes: Sequence[str], columns: Sequence[str], tabs: Sequence[str]) -> None:
    """The kept link's tab and filters, those that fit this index (its ``classes`` and table ``columns``) and the
    page's ``tabs``, into the session; one warning names the values left out."""
    link = st.session_state.pop(LINK, None)
    if not link:
        return
    hold_filters(folder)
    wrong: list[str] = []

    def one(name: str, check: Callable[[str], object]) -> None:
        values = link.pop(name, [])
        if not values:
            return
        try:
            check(values[-1])
        except (ValueError, TypeError):
            wrong.append(f"{name}={values[-1]}")

    def tab(text: str) -> None:
        if text not in tabs:
            raise ValueError(text)
        DATASET_TAB.set(text)

    def correctness(text: str) -> None:
        if text not in CORRECTNESS:
            raise ValueError(text)
        TABLE_CORRECTNESS.set(text)

    def confidence(text: str) -> None:
        low, high = (float(part) for part in text.split(","))
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(text)
        TABLE_CONFIDENCE.set((low, high))

    def sort(text: str) -> None:
        if text not in columns:
            raise ValueError(text)
        TABLE_SORT.set(text)

    def descending(text: str) -> None:
        if text not in ("0", "1"):
            raise ValueError(text)
        TABLE_DESCENDING.set(text == "1")

    for name, check in (
        (URL_TAB, tab),
        (URL_CORRECTNESS, correctness),
        (URL_CONFIDENCE, confidence),
        (URL_SORT, sort),
        (URL_DESCENDING, descending),
    ):
        one(name, check)
    chosen = link.pop(URL_CLASS, [])
    known = [c for c in chosen if c in classes]
    wrong += [f"{URL_CLASS}={c}" for c in chosen if c not in classes]
    if known:
        TABLE_CLASSES.set(list(dict.fromkeys(known)))
    named, tags = link.pop(URL_TAG, []), []
    for tag in named:
        try:
            tags.append(check_tag(tag))
        except ValueError:
            wrong.append(f"{URL_TAG}={tag}")
    if tags:
        TABLE_TAGS.set(list(dict.fromkeys(tags)))
    wrong += [f"{name}={values[-1] if values else ''}" for name, values in link.items()]
    if wrong:
        st.warning(
            f"The link's {', '.join(f'`{w}`' for w in wrong)} do not fit this index or page and were left out; "
            "the rest of the link is applied."
        )


def hold_filters(folder: str) -> None:
    """Make the Table's filters those of the index in ``folder``: the open index's put aside, this one's brought
    back (none the first time). Call before the Table's widgets are drawn."""
    held = st.session_state.get(HELD)
    if held == folder:
        return
    aside = st.session_state.setdefault(PUT_ASIDE, {})
    if held is not None:
        aside[held] = {str(key): key.get() for key in FILTERS if key.present}
    for key in FILTERS:
        key.pop()
    for name, value in aside.pop(folder, {}).items():
        st.session_state[name] = value
    st.session_state[HELD] = folder


def write_link(folder: str, tab: str | None) -> None:
    """The open index, tab and filters into the address (values at their defaults left out, so links stay short)."""
    wanted: dict[str, str | list[str]] = {URL_INDEX: folder}
    if tab:
        wanted[URL_TAB] = tab
    if classes := list(TABLE_CLASSES.get() or []):
        wanted[URL_CLASS] = classes
    if (correctness := TABLE_CORRECTNESS.get()) not in (None, "all"):
        wanted[URL_CORRECTNESS] = str(correctness)
    low, high = TABLE_CONFIDENCE.get((0.0, 1.0)) or (0.0, 1.0)
    if (low, high) != (0.0, 1.0):
        wanted[URL_CONFIDENCE] = f"{low:g},{high:g}"
    if (sort := TABLE_SORT.get()) not in (None, "image_id", SIMILARITY):  # the table's first column, its default
        wanted[URL_SORT] = str(sort)
    if TABLE_DESCENDING.get():
        wanted[URL_DESCENDING] = "1"
    if tags := list(TABLE_TAGS.get() or []):
        wanted[URL_TAG] = tags
    current = {name: st.query_params.get_all(name) for name in st.query_params}
    if current != {name: value if isinstance(value, list) else [value] for name, value in wanted.items()}:
        st.query_params.from_dict(wanted)


def clear_link() -> None:
    """No index open: nothing of the view in the address."""
    if len(st.query_params):
        st.query_params.clear()


def ticked(folder: str) -> Key[list[int]]:
    """The image ids ticked in the table of the index in ``folder``: a plain key, which a visit to another page
    does not clear as it clears a widget's."""
    return Key(f"{TICKED}|{folder}")
