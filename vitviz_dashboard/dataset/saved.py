"""Named views of the open index, in the sidebar (FiftyOne's saved views): *Save this view* keeps what the address
holds (tab and filters, link.py) with the ticked rows, the Grid's selection (and its similarity scores) and the Grid's
map under a name, in a file beside the index (vitviz/dataset/saved_views.py); *Open* brings one back through the
address's own checks (a value that no longer fits is left out with one warning), *Delete* forgets one. A views file
that cannot be read gives one warning, never a traceback."""

from __future__ import annotations

import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.saved_views import SavedView, SavedViewError, delete_view, read_views, save_view
from vitviz_dashboard.dataset import grid, link
from vitviz_dashboard.state import dataset_key

NAME = dataset_key("view_name")  # the name typed for a view to save
PICKED = dataset_key("view_picked")  # the saved view chosen in the picker
MESSAGE = dataset_key("view_message")  # ("success" | "warning" | "error", what the last action did)


def draw(index: DatasetIndex) -> None:
    """The sidebar's Saved views: a name and *Save this view*, then a picker of the saved ones with Open and Delete."""
    sidebar = st.sidebar
    sidebar.header("Saved views")
    try:
        views = read_views(index.folder)
    except SavedViewError as error:
        sidebar.warning(f"Saved views not read: {error}")
        views = {}
    sidebar.text_input(
        "View name", key=NAME, placeholder="wrong cats, blurry", max_chars=64, help="letters, digits, spaces, _ . : + -"
    )
    sidebar.button(
        "Save this view",
        key=dataset_key("view_save"),
        icon=":material/bookmark_add:",
        on_click=save_current,
        args=(index,),
        help="the tab, the Table's filters and order, the ticked rows, the Grid's selection and map, beside the index",
    )
    if views:
        if st.session_state.get(PICKED) not in views:
            st.session_state[PICKED] = next(iter(views))
        picked = sidebar.selectbox(
            "Saved views of this index",
            list(views),
            key=PICKED,
            format_func=lambda name: f"{name} ({views[name].saved.replace('T', ' ')})",
        )
        left, right = sidebar.columns(2)
        left.button(
            "Open", key=dataset_key("view_open"), icon=":material/bookmark:", on_click=open_view, args=(index, picked)
        )
        right.button(
            "Delete", key=dataset_key("view_delete"), icon=":material/delete:", on_click=forget, args=(index, picked)
        )
    if message := st.session_state.pop(MESSAGE, None):
        kind, words = message
        {"success": sidebar.success, "warning": sidebar.warning}.get(kind, sidebar.error)(words)


def current_view(index: DatasetIndex) -> SavedView:
    """The view open now: the address's values but the index, the ticked rows, the Grid's selection and map."""
    folder = str(index.folder)
    params = {name: st.query_params.get_all(name) for name in st.query_params if name != link.URL_INDEX}
    selection = link.current_selection(folder)
    return SavedView(
        params=params,
        ticked=tuple(link.ticked(folder).get() or ()),
        selection=selection.ids if selection else (),
        title=selection.title if selection else "",
        scores=selection.scores if selection else None,
        grid_map=st.session_state.get(grid.LAST_MAP),
    )


def save_current(index: DatasetIndex) -> None:
    """*Save this view* (a callback)."""
    try:
        name = save_view(index.folder, st.session_state.get(NAME, ""), current_view(index))
    except SavedViewError as error:
        st.session_state[MESSAGE] = ("error", f"Not saved: {error}")
        return
    st.session_state[PICKED] = name
    st.session_state[MESSAGE] = ("success", f"Saved the view `{name}` beside the index.")


def open_view(index: DatasetIndex, name: str) -> None:
    """*Open* (a callback, before the page is drawn): the view's address values go through link.apply_link's checks
    in this run; its ticks, selection and map replace the session's."""
    folder = str(index.folder)
    try:
        view = read_views(index.folder)[name]
    except (SavedViewError, KeyError) as error:
        st.session_state[MESSAGE] = ("error", f"Not opened: {error}")
        return
    for key in link.FILTERS:  # a filter the view does not set is at its default in the view
        key.pop()
    st.session_state[link.LINK] = dict(view.params)
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(dataset_key("table|"))]:
        del st.session_state[key]  # the table's own ticks: its widget starts again from the view's
    outside = [i for i in (*view.ticked, *view.selection) if i >= index.count]
    link.ticked(folder).set([i for i in view.ticked if i < index.count])
    if view.selection:
        kept = [(i, s) for i, s in zip(view.selection, view.scores or [None] * len(view.selection)) if i < index.count]
        scores = [s for _, s in kept] if view.scores is not None else None
        grid.select(index, [i for i, _ in kept], view.title or f"the view {name}", "saved view", scores=scores)
    else:
        st.session_state.pop(link.SELECTION, None)
    if view.grid_map is not None:
        st.session_state[grid.GRID_MAP] = view.grid_map  # checked against the index's maps by the Grid
    left_out = f" ({len(outside)} image ids beyond this index's {index.count} left out)" if outside else ""
    st.session_state[MESSAGE] = ("warning" if outside else "success", f"Opened the view `{name}`{left_out}.")


def forget(index: DatasetIndex, name: str) -> None:
    """*Delete* (a callback)."""
    try:
        gone = delete_view(index.folder, name)
    except SavedViewError as error:
        st.session_state[MESSAGE] = ("error", f"Not deleted: {error}")
        return
    st.session_state.pop(PICKED, None)
    st.session_state[MESSAGE] = ("success", f"Deleted the view `{name}`." if gone else f"No view `{name}` to delete.")
