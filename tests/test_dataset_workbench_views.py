"""The Dataset page's views of issue 44 under AppTest, each test failing before its fix: a sub-index says what it is
a subset of, each index keeps its own filters (none carried into a sub-index, the parent's back on return), a box
over several confusion cells leaves the pickers saying how many cells are selected, ticked table rows outlive a visit
to the Photo page, the filters and tab are in the address and a link reproduces them (a bad one gives one warning),
and a patch-search caption never begins with a comma."""

import re

import numpy as np
from dataset_harness import checked, dataset_app, open_tab, page_fixtures
from streamlit.testing.v1 import AppTest

import vitviz
from vitviz.dataset.subset import write_subindex
from vitviz_dashboard.state import DATASET_FOLDER

# a folder holding a tiny model, 24 generated images (and a broken one) and their index; fresh caches per test
built, page_settings = page_fixtures("dataset_workbench_views")

CLASSES, CORRECTNESS = "kept|dataset|classes", "kept|dataset|correctness"


def matching(at: AppTest) -> int:
    """The Table tab's count of matching images."""
    [count] = [int(m[1]) for c in at.caption if (m := re.match(r"([\d,]+) images match", c.value))]
    return count


def open_folder(at: AppTest, folder) -> AppTest:
    at.sidebar.text_input(key=str(DATASET_FOLDER)).set_value(str(folder))
    return checked(at.run())


def a_subindex(built, ids) -> str:
    out = built / f"subset-{len(ids)}"
    if not out.exists():
        write_subindex(vitviz.open_index(built / "index"), ids, out)
    return str(out)


def to_photo_page_and_back(at: AppTest) -> AppTest:
    dataset_hash = at._page_hash
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") != "dataset")
    checked(at.run())
    checked(at.run())  # a second run of the Photo page: Streamlit has dropped the undrawn widgets by now
    at._page_hash = dataset_hash
    return checked(at.run())


def reopened(at: AppTest, params: dict) -> AppTest:
    """A new session (a reload, or a shared link) on the Dataset page with the address's ``params``."""
    again = AppTest.from_file(at._script_path, default_timeout=180)
    for name, value in params.items():
        again.query_params[name] = value
    again.run()
    again._page_hash = next(h for h, i in again._registered_pages.items() if i.get("url_pathname") == "dataset")
    return checked(again.run())


# 18. a sub-index: its caption, and filters per index


def test_a_subindex_says_what_it_is_a_subset_of(built):
    sub = a_subindex(built, list(range(12)))
    at = dataset_app(sub)
    [first] = [c.value for c in at.caption if c.value.startswith("**12 images**")]
    assert f"a subset of `{built / 'index'}` (12 of 25 images, made " in first, first
    assert "from folder" not in first  # not the parent's source and date as if it were its own


def test_each_index_keeps_its_own_filters(built):
    sub = a_subindex(built, list(range(12)))
    at = dataset_app(built / "index")
    at.multiselect(key=CLASSES).set_value(["cat"])
    checked(at.run())
    parent_filtered = matching(at)
    assert parent_filtered < 25
    at = open_folder(at, sub)
    assert at.multiselect(key=CLASSES).value == [] and matching(at) == 12  # the sub-index starts unfiltered
    at.radio(key=CORRECTNESS).set_value("correct")  # its own filter
    checked(at.run())
    at = open_folder(at, built / "index")
    assert at.multiselect(key=CLASSES).value == ["cat"] and at.radio(key=CORRECTNESS).value == "all"
    assert matching(at) == parent_filtered  # the parent's filter is back on return
    at = open_folder(at, sub)
    assert at.radio(key=CORRECTNESS).value == "correct" and at.multiselect(key=CLASSES).value == []


# 19. a box over several confusion cells


def test_a_box_over_several_cells_leaves_the_pickers_saying_how_many(built):
    from streamlit.elements.plotly_chart import PlotlySelectionState, PlotlyState

    from vitviz_dashboard.dataset.confusion_matrix import CELL_TRACE

    at = open_tab(dataset_app(built / "index"), "Errors")
    classes = at.selectbox(key="dataset|true").options
    box = [{"x": x, "y": y, "curve_number": CELL_TRACE} for y in range(2) for x in range(2)]  # 2 x 2 cells
    at.session_state["dataset|confusion"] = PlotlyState(
        selection=PlotlySelectionState(points=box, point_indices=[0, 1, 2, 3], box=[{"x": [0, 1], "y": [0, 1]}])
    )
    checked(at.run())
    for key in ("dataset|true", "dataset|predicted"):
        picker = at.selectbox(key=key)
        assert picker.value is None and picker.placeholder == "4 cells selected", (picker.value, picker.placeholder)
    assert any(c.value.startswith("4 cells (") for c in at.caption)
    at.selectbox(key="dataset|true").set_value(classes[1])  # a picker takes over: one cell, the other side filled
    checked(at.run())
    assert at.selectbox(key="dataset|predicted").value == classes[0]
    assert any(c.value.startswith(f"{classes[1]} predicted as {classes[0]}: ") for c in at.caption)


# 20. ticked rows and the address


def test_ticked_rows_outlive_a_visit_to_the_photo_page(built):
    at = dataset_app(built / "index")
    table = at.dataframe[0]
    ticked = table.value["image_id"].iloc[[0, 2]].tolist()
    at.session_state[table.key] = {"selection": {"rows": [0, 2], "columns": []}}
    checked(at.run())
    opened = lambda: sorted(int(b.key.rsplit("|", 1)[1]) for b in at.button if b.key.startswith("dataset|open|table"))  # noqa: E731
    assert opened() == sorted(ticked)
    at = to_photo_page_and_back(at)
    assert opened() == sorted(ticked)  # the same photos below the table


def test_the_filters_and_tab_are_in_the_address_and_a_link_reproduces_them(built):
    at = dataset_app(built / "index")
    at.multiselect(key=CLASSES).set_value(["cat"])
    at.radio(key=CORRECTNESS).set_value("wrong")
    checked(at.run())
    filtered = matching(at)
    at = open_tab(at, "Errors")
    checked(at.run())  # the address is written at the top of a run: the tab's, one run later
    params = {name: at.query_params[name] for name in at.query_params}
    assert params["class"] in ("cat", ["cat"]) and params["correctness"] in ("wrong", ["wrong"])
    assert params["tab"] in ("Errors", ["Errors"])
    again = reopened(at, params)
    assert again.session_state["kept|dataset|tab"] == "Errors"
    assert not again.warning
    again = open_tab(again, "Table")
    assert again.multiselect(key=CLASSES).value == ["cat"] and again.radio(key=CORRECTNESS).value == "wrong"
    assert matching(again) == filtered


def test_a_link_with_bad_values_gives_one_warning_and_opens_the_rest(built):
    at = dataset_app(built / "index")
    params = {
        "index": str(built / "index"),
        "class": ["cat", "zebra"],
        "correctness": "maybe",
        "confidence": "high",
        "sort": "no_such_column",
        "descending": "yes",
        "tab": "Nope",
        "colour": "red",
    }
    again = reopened(at, params)
    [warning] = again.warning
    for bad in ("class=zebra", "correctness=maybe", "confidence=high", "sort=no_such_column", "tab=Nope", "colour"):
        assert bad in warning.value, warning.value
    assert again.multiselect(key=CLASSES).value == ["cat"]  # the good part of the link
    assert again.radio(key=CORRECTNESS).value == "all"
    checked(again.run())
    assert not again.warning  # once


# 23. patch-search captions


def test_a_patch_search_caption_never_begins_with_a_comma(built):
    from vitviz_dashboard.dataset.search import match_caption

    for path in ("cat/001.png", "", None, np.nan):
        text = match_caption(3, path, (6, 6), 0.91234)
        lines = [line.strip() for line in text.split("\n")]
        assert all(line and not line.startswith(",") for line in lines), text
        assert lines[0] == "3: patch (6, 6), similarity 0.912"
    at = open_tab(dataset_app(built / "index"), "Patch search")
    shown = [c.value for c in at.caption if "similarity" in c.value]
    assert shown and all(re.match(r"\d+: patch \(\d+, \d+\), similarity", c) for c in shown), shown
