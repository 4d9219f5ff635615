"""The Dataset page: an index folder typed into the sidebar, then one tab per view; only the open tab runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz_dashboard.dataset import (
    compare,
    confusion_matrix,
    embedding,
    grid,
    heads,
    link,
    queries_keys,
    sae_features,
    saved,
    search,
    slices,
    table,
)
from vitviz_dashboard.dataset.drawing import COLORMAPS
from vitviz_dashboard.dataset.indexing import index_form
from vitviz_dashboard.dataset.opening import manifest_stamp, open_typed_index, page_roots
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, check_model_path
from vitviz_dashboard.state import DATASET_ALPHA, DATASET_COLORMAP, DATASET_FOLDER, DATASET_TAB, INDEXED

# In the page's narrow grid columns (four thumbnails across an 800 px window), a button's label wraps onto a second
# line instead of being cut to "Open i...", Streamlit's default for a label wider than its button
NARROW_COLUMNS_CSS = """<style>
[data-testid="stColumn"] [data-testid="stButton"] button { height: auto; max-width: 100%; }
[data-testid="stColumn"] [data-testid="stButton"] button [data-testid="stMarkdownContainer"],
[data-testid="stColumn"] [data-testid="stButton"] button [data-testid="stMarkdownContainer"] p {
    white-space: normal; overflow: visible; text-overflow: clip; overflow-wrap: normal;
}
</style>"""
FOLDER_HELP = (
    "An index made by `vitviz index SOURCE --model SPEC --out DIR`, inside the folders that the server's owner allows "
    "(VITVIZ_MODEL_DIRS; by default the checkpoints folder and the working directory)."
)


@dataclass(frozen=True)
class DatasetPage:
    """What every Dataset tab draws from, as the Photo page's tabs get its ``Page``: the open index, the Photo page
    (where a chosen image opens) and the sidebar's display settings."""

    index: DatasetIndex
    photo_page: st.Page
    colormap: str  # drawing.COLORMAPS
    alpha: float  # the opacity of a map drawn over a photo


# the tabs in their order: name -> draw(page); only the open one runs
TABS: dict[str, Callable[[DatasetPage], None]] = {
    "Table": table.draw,
    grid.GRID_TAB: grid.draw,
    "Embedding map": embedding.draw,
    "Errors": confusion_matrix.draw,
    "Slices": slices.draw,
    "Heads": heads.draw,
    "Queries & keys": queries_keys.draw,
    "Patch search": search.draw,
    "Features (SAE)": sae_features.draw,
    "Compare": compare.draw,
}


def dataset_page(photo_page: st.Page) -> None:
    """The page; ``photo_page`` is the Photo page, where a chosen image opens."""
    st.title("vitviz: a whole dataset")
    st.html(NARROW_COLUMNS_CSS)
    st.sidebar.header("Index")
    if INDEXED.present:  # indexed in the run before: open it (before its field exists in this run)
        DATASET_FOLDER.set(INDEXED.pop())
    else:  # a reload, or a shared link: its index folder, and its tab and filters once that index opens
        link.read_link()
    folder = st.sidebar.text_input(
        "Index folder", key=str(DATASET_FOLDER), help=FOLDER_HELP, placeholder="cifar-index/"
    )
    st.sidebar.header("Display")
    colormap = st.sidebar.selectbox("Colormap", COLORMAPS, key=str(DATASET_COLORMAP))
    DATASET_ALPHA.setdefault(0.55)  # the default in the state, not the widget (Streamlit warns of both)
    alpha = st.sidebar.slider("Overlay opacity", 0.0, 1.0, step=0.05, key=str(DATASET_ALPHA))
    index_form()
    index = open_typed_index(folder)
    if index is None:
        st.session_state.pop(link.LINK, None)
        link.clear_link()
        return
    link.hold_filters(str(index.folder))  # each index its own filters: none carried into a sub-index
    if link.LINK in st.session_state:  # a link's tab and filters, checked against this index
        link.apply_link(str(index.folder), table.classes(index), table.image_columns(index), list(TABS))
    # in the address: a reload or a shared link opens the same view again (through the same checks)
    link.write_link(folder.strip(), DATASET_TAB.get())
    saved.draw(index)  # named views beside the index, in the sidebar
    describe(index)
    page = DatasetPage(index, photo_page, colormap, alpha)
    for tab, draw in zip(st.tabs(list(TABS), key=str(DATASET_TAB), on_change="rerun"), TABS.values()):
        if tab.open:
            with tab:
                draw(page)


def describe(index: DatasetIndex) -> None:
    manifest, layout = index.manifest, index.layout
    unreadable = int(index.query("SELECT count(*) AS n FROM images WHERE error IS NOT NULL")["n"][0])
    rows, cols = index.grid
    parent = subset_words(index)
    source = manifest["source"].get("description", "?")
    st.caption(
        f"**{index.count:,} images** ({unreadable:,} unreadable) {parent or f'from {source}'}, "
        f"indexed with `{manifest['model'].get('spec', '?')}` ({layout['layers']} layers x {layout['heads']} heads, "
        f"a {rows}x{cols} patch grid) by vitviz {manifest.get('vitviz_version', '?')}"
        + ("." if parent else f" on {manifest.get('created', '?')}.")
    )


def subset_words(index: DatasetIndex) -> str:
    """For a sub-index (its manifest's ``subset_of``): "a subset of `PARENT` (n of m images, made DATE)", the date
    its own manifest's (the copied manifest keeps the parent's source and date); "" for any other index."""
    parent = index.manifest.get("subset_of")
    if not parent:
        return ""
    folder = str(parent.get("folder", "?"))
    whole = parent.get("of") or parent_count(folder)
    share = f"{index.count:,} of {whole:,} images" if whole else f"{index.count:,} images"
    made = datetime.fromtimestamp(manifest_stamp(index.folder) / 1e9).isoformat(sep=" ", timespec="seconds")
    return f"a subset of `{folder}` ({share}, made {made})"


def parent_count(folder: str) -> int | None:
    """The number of images of the index in ``folder`` (a sub-index's parent), when this page may open it."""
    try:
        return int(json.loads((check_model_path(folder, page_roots()) / "manifest.json").read_text())["count"])
    except (ModelRefused, OSError, ValueError, KeyError, TypeError):
        return None
