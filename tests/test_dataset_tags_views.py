"""Tags on images, named saved views, similarity scores and patch-search results sent on (issue 44's "Dataset, against
FiftyOne and LIT"): the library (vitviz/dataset/tags.py, saved_views.py, ``index.tag``, the SQL view ``tags``) and
the Dataset page under AppTest."""

import io
import json
import multiprocessing
import os

import pandas as pd
import pytest
from dataset_harness import checked, dataset_app, open_tab, page_fixtures
from streamlit.delta_generator import DeltaGenerator

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.dataset import QueryError, saved_views, tags
from vitviz.dataset.saved_views import SavedView, SavedViewError
from vitviz.dataset.tags import TagError
from vitviz_dashboard.dataset import grid, saved, table
from vitviz_dashboard.dataset.link import SELECTION, TABLE_TAGS, Selection

built, page_settings = page_fixtures("dataset_tags_views")


@pytest.fixture(autouse=True)
def no_notes(built):
    """Each test starts with no tags and no saved views beside the module's index."""
    for name in (tags.TAGS, saved_views.VIEWS):
        (built / "index" / name).unlink(missing_ok=True)


# --- tags, the library ------------------------------------------------------------------------------------------------


def test_tags_are_kept_beside_the_index_and_queried_as_a_table(built):
    index = vitviz.open_index(built / "index")
    assert index.query("SELECT count(*) AS n FROM tags")["n"][0] == 0  # a view with no rows before any tag
    assert index.tag([3, 1, 2], "blurry") == 3
    assert index.tag([2, 5], "blurry") == 1  # 2 had it already
    assert index.tag(7, " odd ") == 1  # spaces around a tag dropped
    assert index.tags().values.tolist() == [[1, "blurry"], [2, "blurry"], [3, "blurry"], [5, "blurry"], [7, "odd"]]
    assert index.tags([2, 7]).values.tolist() == [[2, "blurry"], [7, "odd"]]
    joined = index.query(
        "SELECT i.image_id, i.label, t.tag FROM images i JOIN tags t USING (image_id) WHERE t.tag = 'blurry' "
        "ORDER BY i.image_id"
    )
    expected = index.query("SELECT image_id, label FROM images WHERE image_id IN (1, 2, 3, 5) ORDER BY image_id")
    assert joined["image_id"].tolist() == [1, 2, 3, 5] and joined["label"].tolist() == expected["label"].tolist()
    assert index.untag([2, 9], "blurry") == 1
    assert index.query("SELECT image_id FROM tags WHERE tag = 'blurry' ORDER BY 1")["image_id"].tolist() == [1, 3, 5]
    again = vitviz.open_index(built / "index")  # another process's view of the same folder
    assert again.tags().values.tolist() == index.tags().values.tolist()


def test_tags_leave_the_index_files_and_verify_untouched(built, capsys):
    index = vitviz.open_index(built / "index")
    index.tag(range(10), "checked")
    assert index_main(["--verify", str(built / "index")]) == 0, capsys.readouterr().out
    assert "verified" in capsys.readouterr().out
    assert sorted(p.name for p in (built / "index").iterdir() if "tags" in p.name) == ["tags.parquet"]  # no temp
    with pytest.raises(QueryError, match="outside the index|Permission"):  # the one file beside it, not others
        index.query(f"SELECT * FROM read_parquet('{built / 'index' / 'other.parquet'}')")


@pytest.mark.parametrize("bad", ["", " ", "two words", "-lead", "a" * 65, "semi;colon", "quote'", "é", None, 3])
def test_a_bad_tag_name_is_one_clear_error(built, bad):
    index = vitviz.open_index(built / "index")
    with pytest.raises(TagError, match=r"a tag is 1 to 64 letters, digits and _ \. : \+ -") as raised:
        index.tag([0], bad)
    assert "\n" not in str(raised.value)
    assert not (built / "index" / tags.TAGS).exists()


def test_ids_outside_the_index_are_refused(built):
    index = vitviz.open_index(built / "index")
    with pytest.raises(ValueError, match=r"image ids must be in \[0, 24\]"):
        index.tag([0, 25], "x")


def test_a_damaged_tags_file_is_one_line_and_the_other_tables_still_answer(built):
    index = vitviz.open_index(built / "index")
    (built / "index" / tags.TAGS).write_bytes(b"not parquet")
    with pytest.raises(TagError, match="is not a readable tags file"):
        index.tags()
    assert index.query("SELECT count(*) AS n FROM images")["n"][0] == 25
    with pytest.raises(QueryError, match="is not a readable tags file"):
        index.query("SELECT * FROM tags")
    (built / "index" / tags.TAGS).unlink()
    os.symlink("/etc/passwd", built / "index" / tags.TAGS)  # a link out of the index is neither read nor queried
    with pytest.raises(TagError, match="not a regular file"):
        index.tags()
    assert index.query("SELECT count(*) AS n FROM tags")["n"][0] == 0


def _tag_many(folder, worker):
    for round in range(8):
        tags.add_tag(folder, [worker * 3 + round % 3], f"w{worker}-{round}")
        tags.add_tag(folder, [round], "shared")


def test_sessions_tagging_at_once_keep_each_others_tags(built):
    folder = built / "index"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_tag_many, args=(folder, w)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    frame = tags.read_tags(folder)
    assert len(frame[frame.tag != "shared"]) == 4 * 8  # every worker's every tag
    assert sorted(frame.loc[frame.tag == "shared", "image_id"]) == list(range(8))


# --- saved views, the library ---------------------------------------------------------------------------------------


def test_views_are_saved_listed_and_deleted_beside_the_index(built):
    folder = built / "index"
    view = SavedView({"tab": ["Grid"], "class": ["cat", "dog"]}, ticked=(1, 2), selection=(4, 3), scores=(0.9, 0.5))
    assert saved_views.save_view(folder, " wrong cats ", view) == "wrong cats"
    saved_views.save_view(folder, "second", SavedView({"tab": ["Errors"]}))
    views = saved_views.read_views(folder)
    assert list(views) == ["wrong cats", "second"] and views["wrong cats"] == view
    assert saved_views.delete_view(folder, "wrong cats") and not saved_views.delete_view(folder, "wrong cats")
    assert list(saved_views.read_views(folder)) == ["second"]
    with pytest.raises(SavedViewError, match="a view's name is 1 to 64"):
        saved_views.save_view(folder, "../etc", view)


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"format": 2, "views": {}}', '{"format": 1, "views": {"a": {"params": {"tab": "Grid"}}}}', "[" * 5000],
)
def test_a_corrupt_views_file_is_one_line(built, text):
    (built / "index" / saved_views.VIEWS).write_text(text)
    with pytest.raises(SavedViewError) as raised:
        saved_views.read_views(built / "index")
    assert "\n" not in str(raised.value) and "delete it" in str(raised.value)
    with pytest.raises(SavedViewError):  # a file it cannot read is never overwritten
        saved_views.save_view(built / "index", "new", SavedView({}))
    assert (built / "index" / saved_views.VIEWS).read_text() == text


# --- the page ---------------------------------------------------------------------------------------------------------


def tick(at, rows):
    frame = at.dataframe[0]
    at.session_state[frame.key] = {"selection": {"rows": rows, "columns": []}}
    checked(at.run())
    return frame.value["image_id"].iloc[rows].tolist()


def test_the_table_tags_ticked_rows_filters_by_tag_and_shows_them(built):
    at = dataset_app(built / "index")
    ids = tick(at, [0, 2, 3])
    at.text_input(key=table.TAG_TEXT).set_value("needs review")
    at.button(key="dataset|tag_add").click()
    checked(at.run())
    [error] = at.error
    assert "a tag is 1 to 64 letters" in error.value and not (built / "index" / tags.TAGS).exists()
    at.text_input(key=table.TAG_TEXT).set_value("review")
    at.button(key="dataset|tag_add").click()
    checked(at.run())
    assert any("Tagged 3 of the 3 ticked images `review`" in s.value for s in at.success)
    assert vitviz.open_index(built / "index").tags()["image_id"].tolist() == sorted(ids)
    assert at.multiselect(key=str(TABLE_TAGS)).options == ["review"]
    at.multiselect(key=str(TABLE_TAGS)).set_value(["review"])
    checked(at.run())
    assert any(c.value.startswith("3 images match") for c in at.caption)
    shown = at.dataframe[0].value
    assert shown["image_id"].tolist() == sorted(ids) and [list(t) for t in shown["tags"]] == [["review"]] * 3
    assert at.query_params["tag"] in ("review", ["review"])  # the filter is in the address
    # the Grid's captions name the tags, and the export carries them
    at.session_state[SELECTION] = Selection(tuple(ids), "three", "sql", str(vitviz.open_index(built / "index").folder))
    at = open_tab(at, grid.GRID_TAB)
    captions = [i.proto.imgs[0].caption for i in at.get("image") if "tags:" in i.proto.imgs[0].caption]
    assert len(captions) == 3 and all(c.endswith("tags: review") for c in captions), captions


def test_a_search_selection_shows_and_exports_its_similarity_and_the_table_sorts_by_it(built, monkeypatch):
    downloads = {}
    download_button = DeltaGenerator.download_button

    def recorded(self, label, data, *args, **kwargs):
        downloads[label] = data
        return download_button(self, label, data, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", recorded)
    index = vitviz.open_index(built / "index")
    near = index.nearest_images(4, k=6)
    at = open_tab(dataset_app(built / "index"), grid.GRID_TAB)
    at.session_state[SELECTION] = Selection((0,), "one", "sql", str(index.folder))
    checked(at.run())
    at.button(key="dataset|similar|0").click()  # the existing button, on image 0
    checked(at.run())
    near = index.nearest_images(0, k=grid.SIMILAR)
    captions = [i.proto.imgs[0].caption for i in at.get("image") if "similarity" in i.proto.imgs[0].caption]
    assert captions[0].startswith("0: ") and captions[0].endswith(f"similarity {near.similarity[0]:.3f}")
    assert len(captions) == len(near)
    written = pd.read_csv(io.BytesIO(downloads["Rows as CSV"]))
    assert written.columns[:2].tolist() == ["image_id", "similarity"]
    assert written["image_id"].tolist() == near["image_id"].tolist()
    assert written["similarity"].to_numpy() == pytest.approx(near["similarity"].to_numpy(), abs=1e-6)
    parquet = pd.read_parquet(io.BytesIO(downloads["Rows as Parquet"]))
    assert parquet["similarity"].to_numpy() == pytest.approx(near["similarity"].to_numpy(), abs=1e-6)
    at.selectbox(key=grid.ORDER).set_value("similarity, lowest first")  # sorting the Grid by it
    checked(at.run())
    lowest = [i.proto.imgs[0].caption for i in at.get("image") if "similarity" in i.proto.imgs[0].caption]
    assert lowest == captions[::-1]
    at = open_tab(at, "Table")
    sort = at.selectbox(key="kept|dataset|sort")
    assert "similarity" in sort.options
    sort.set_value("similarity")
    at.checkbox(key="kept|dataset|descending").check()
    checked(at.run())
    shown = at.dataframe[0].value
    assert shown["image_id"].tolist()[: len(near)] == near["image_id"].tolist()
    assert shown["similarity"].iloc[len(near) :].isna().all()
    assert "sort" not in at.query_params  # not in the address: the selection is not


def test_patch_search_results_go_to_the_grid_and_open_in_photo(built):
    at = open_tab(dataset_app(built / "index"), "Patch search")
    [show] = [b for b in at.button if b.key == "dataset|search_grid"]
    assert show.label.startswith("Show in Grid (")
    show.click()
    checked(at.run())
    assert at.session_state["kept|dataset|tab"] == grid.GRID_TAB
    selection = at.session_state[SELECTION]
    assert selection.source == "patch search" and len(selection.scores) == len(selection.ids)
    assert list(selection.scores) == sorted(selection.scores, reverse=True)
    assert any("similarity" in i.proto.imgs[0].caption for i in at.get("image"))
    at = open_tab(at, "Patch search")
    opens = [b for b in at.button if b.key.startswith("dataset|search_open|")]
    assert len(opens) == 8
    image_id = int(opens[0].key.rsplit("|", 1)[1])
    checked(opens[0].click().run())  # the Grid's own Open in Photo: the Photo page, its picker on the photo
    path = vitviz.open_index(built / "index").query(f"SELECT path FROM images WHERE image_id = {image_id}")["path"][0]
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"
    [picker] = [s for s in at.selectbox if s.label == "Image"]
    assert picker.value == f"index: {path}"


def test_a_saved_view_brings_back_the_filters_ticks_selection_and_map(built):
    at = dataset_app(built / "index")
    at.multiselect(key="kept|dataset|classes").set_value(["cat"])
    checked(at.run())
    ticked = tick(at, [1])
    index = vitviz.open_index(built / "index")
    at.session_state[SELECTION] = Selection((5, 2), "two", "similar", str(index.folder), (0.8, 0.4))
    at = open_tab(at, grid.GRID_TAB)
    at.selectbox(key=grid.GRID_MAP).set_value("readout")
    checked(at.run())
    at.sidebar.text_input(key=saved.NAME).set_value("bad/name")
    at.sidebar.button(key="dataset|view_save").click()
    checked(at.run())
    assert "a view's name is 1 to 64" in at.sidebar.error[0].value
    at.sidebar.text_input(key=saved.NAME).set_value("cats")
    at.sidebar.button(key="dataset|view_save").click()
    checked(at.run())
    # another view: unfiltered, on the Table, nothing selected
    del at.session_state[SELECTION]
    at = open_tab(at, "Table")
    at.multiselect(key="kept|dataset|classes").set_value([])
    checked(at.run())
    assert at.sidebar.selectbox(key=saved.PICKED).options[0].startswith("cats (")
    at.sidebar.button(key="dataset|view_open").click()
    checked(at.run())
    assert at.session_state["kept|dataset|tab"] == grid.GRID_TAB
    assert at.session_state[SELECTION].ids == (5, 2) and at.session_state[SELECTION].scores == (0.8, 0.4)
    assert at.selectbox(key=grid.GRID_MAP).value == "readout"
    at = open_tab(at, "Table")
    assert at.multiselect(key="kept|dataset|classes").value == ["cat"]
    opened = sorted(int(b.key.rsplit("|", 1)[1]) for b in at.button if b.key.startswith("dataset|open|table"))
    assert opened == ticked
    at.sidebar.button(key="dataset|view_delete").click()
    checked(at.run())
    assert saved_views.read_views(built / "index") == {}


def test_a_corrupt_views_file_is_one_warning_on_the_page(built):
    (built / "index" / saved_views.VIEWS).write_text(json.dumps({"format": 1, "views": {"x": 3}}))
    at = dataset_app(built / "index")
    [warning] = at.sidebar.warning
    assert warning.value.startswith("Saved views not read: ") and "delete it" in warning.value


def test_a_tick_stays_with_its_image_when_the_rows_change_under_it(built):
    """Tag three images, filter by the tag, keep one ticked and untag it: the table then lists the other two, and
    neither is ticked (Streamlit's selection is of row positions: under one widget key the tick moved to the image
    that came to sit in the untagged one's row)."""
    at = dataset_app(built / "index")
    ids = tick(at, [1, 4, 6])
    at.text_input(key=table.TAG_TEXT).set_value("hard_case")
    at.button(key="dataset|tag_add").click()
    checked(at.run())
    at.multiselect(key=str(TABLE_TAGS)).set_value(["hard_case"])
    checked(at.run())
    assert at.dataframe[0].value["image_id"].tolist() == sorted(ids)
    [first] = tick(at, [0])  # the others unticked: only the first image stays ticked
    at.button(key="dataset|tag_remove").click()
    checked(at.run())
    assert any("Took `hard_case` off 1 of the 1 ticked images" in s.value for s in at.success)
    shown = at.dataframe[0]
    assert shown.value["image_id"].tolist() == sorted(set(ids) - {first})
    assert at.session_state[shown.key]["selection"]["rows"] == []  # no other image inherits the tick
    assert at.button(key="dataset|tag_remove").disabled  # nothing ticked: Untag has nothing to take the tag off
    assert vitviz.open_index(built / "index").tags()["image_id"].tolist() == sorted(set(ids) - {first})


def test_one_image_is_one_image():
    from vitviz.messages import counted

    assert [counted(n, "image") for n in (0, 1, 2, 1024)] == ["0 images", "1 image", "2 images", "1,024 images"]
    assert counted(1, "row") == "1 row" and counted(3, "query", "queries") == "3 queries"
