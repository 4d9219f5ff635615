"""The Dataset page through Streamlit's AppTest, on a tiny index of generated images: opening an index, filters,
selecting an image (it opens in the Photo page), the read-only SQL box, the confusion matrix, heads and their
clusters, queries and keys, patch search, and a message for each bad folder."""

import base64
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from app_harness import APP
from dataset_harness import checked, dataset_app, open_tab, page_fixtures
from streamlit.testing.v1 import AppTest
from tiny_text import clip_folder

import vitviz
from vitviz.dataset.analysis import cluster_heads
from vitviz.preprocessing import ImageFile
from vitviz_dashboard import images
from vitviz_dashboard.dataset import indexing
from vitviz_dashboard.dataset.opening import photo_prompts
from vitviz_dashboard.state import (
    DATASET_FOLDER,
    HISTORY,
    HUB_SPEC,
    MODEL_BOX,
    MODEL_HUB_SPEC,
    MODEL_PATH,
    MY_PROMPTS,
    PATH_OR_UPLOAD,
    PHOTO_ALPHA,
    PHOTO_COLORMAP,
    PHOTO_PRECISION,
    PHOTO_TAB,
    PROMPT_ENSEMBLE,
    PROMPT_SOURCE,
    PROMPTS,
)

# a folder holding a tiny model, 24 generated images (and a broken one) and their index; fresh caches per test
built, page_settings = page_fixtures("dataset_page")


def captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def image_captions(at: AppTest) -> list[str]:
    """The captions of the page's pictures, as read (the zero-width spaces that let a path break after "/" left out)."""
    return [image.proto.imgs[0].caption.replace("\u200b", "") for image in at.get("image")]


def test_open_filter_and_select_an_image_that_opens_in_the_photo_page(built):
    at = dataset_app(built / "index")
    assert not at.error
    assert captions(at)[0].startswith("**25 images** (1 unreadable)")
    assert "25 images match; rows 1 to 25" in captions(at)
    index = vitviz.open_index(built / "index")
    at.multiselect(key="kept|dataset|classes").set_value(["cat"])
    at.radio(key="kept|dataset|correctness").set_value("wrong")
    checked(at.run())
    wrong_cats = index.query("SELECT image_id FROM images WHERE label = 'cat' AND NOT correct ORDER BY image_id")
    assert f"{len(wrong_cats)} images match; rows 1 to {len(wrong_cats)}" in captions(at)
    table = at.dataframe[0]
    assert table.value["image_id"].tolist() == wrong_cats["image_id"].tolist()
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": []}}  # a click on the first row
    checked(at.run())
    first = wrong_cats["image_id"][0]
    path = index.query(f"SELECT path FROM images WHERE image_id = {first}")["path"][0]
    [caption] = image_captions(at)
    assert caption.startswith(f"{first}: {path}, cat")
    [button] = [b for b in at.button if b.label == "Open in Photo"]
    checked(button.click().run())
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"  # the Photo page
    assert at.selectbox(key=str(MODEL_BOX)).value == PATH_OR_UPLOAD
    assert at.sidebar.text_input(key=str(MODEL_PATH)).value == str(built / "model.pt")
    [picker] = [s for s in at.selectbox if s.label == "Image"]
    assert picker.value == f"index: {path}"  # the Image picker shows the image
    assert not at.error and "cat" in at.markdown[0].value + at.markdown[1].value


@pytest.mark.parametrize(
    "sql, message",
    [
        ("COPY images TO '/tmp/stolen.csv'", "only SELECT queries are allowed"),
        ("ATTACH '/tmp/other.db' AS other", "only SELECT queries are allowed"),
        ("SELECT * FROM read_csv('/etc/passwd')", "outside the index"),
        ("SELECT 1; SELECT 2", "exactly one SELECT"),
    ],
)
def test_the_sql_box_refuses_writes_attaches_and_other_files(built, sql, message):
    at = run_sql(dataset_app(built / "index"), sql)
    assert len(at.error) == 1 and message in at.error[0].value


def run_sql(at: AppTest, sql: str) -> AppTest:
    """Submit ``sql`` in the SQL box, then run the page again until the query has ended (it runs in a thread)."""
    at.text_area(key="dataset|sql").set_value(sql)
    at.button(key="dataset|sql_run").click()
    checked(at.run())
    for _ in range(200):
        if not any(text.value.startswith("Running for") for text in at.info):
            break
        time.sleep(0.3)
        checked(at.run())
    return at


def test_a_million_row_query_is_drawn_a_page_at_a_time(built):
    at = dataset_app(built / "index")
    at.number_input(key="dataset|sql_page").set_value(3)
    run_sql(at, "SELECT range AS n FROM range(1000000)")
    assert any(c.startswith("100 rows of page 3 (more on the next page)") for c in captions(at))
    assert at.dataframe[1].value["n"].tolist() == list(range(200, 300))


def test_confusion_cell_shows_its_images(built):
    at = open_tab(dataset_app(built / "index"), "Errors")
    assert not at.error and at.get("plotly_chart")
    at.selectbox(key="dataset|true").set_value("cat")
    at.selectbox(key="dataset|predicted").set_value("cat")
    checked(at.run())
    index = vitviz.open_index(built / "index")
    count = index.query("SELECT count(*) AS n FROM images WHERE label = 'cat' AND prediction = 'cat'")["n"][0]
    shown = [c for c in image_captions(at) if ", cat → cat" in c]
    assert len(shown) == min(count, 24)
    # the per-class mean maps, one per class
    assert sorted(c for c in image_captions(at) if c.startswith(("cat (", "dog ("))) == ["cat (12)", "dog (12)"]


def test_head_clusters_and_statistics(built):
    at = open_tab(dataset_app(built / "index"), "Heads")
    assert not at.error
    at.number_input(key="dataset|clusters").set_value(2)
    checked(at.run())
    index = vitviz.open_index(built / "index")
    means = index.query(
        "SELECT avg(entropy) e, avg(distance_px) d, avg(to_cls) c, avg(to_patches) p FROM heads "
        "GROUP BY layer, head ORDER BY layer, head"
    )
    expected = cluster_heads(means.to_numpy().reshape(2, 4, 4), 2)
    summary = next(d.value for d in at.dataframe if "cluster" in d.value.columns)
    assert summary["heads"].tolist() == [int((expected.labels == c).sum()) for c in range(2)]
    grid = json.loads(next(c.proto.spec for c in at.get("plotly_chart") if "clustered" in c.proto.spec))
    ordered = np.take_along_axis(expected.labels, expected.order, axis=1)
    z = grid["data"][0]["z"]  # plotly sends arrays as base64 with their dtype and shape
    shape = tuple(int(n) for n in z["shape"].split(","))
    assert np.frombuffer(base64.b64decode(z["bdata"]), z["dtype"]).reshape(shape).tolist() == ordered.tolist()
    assert grid["data"][0]["text"] == [[f"h{h}" for h in row] for row in expected.order]
    at.selectbox(key="dataset|extreme_what").set_value("distance_px DESC")  # attends farthest away
    checked(at.run())
    extremes = next(d.value for d in at.dataframe if "image_id" in d.value.columns)
    top = index.query("SELECT max(distance_px) AS m FROM heads WHERE layer = 0 AND head = 0")["m"][0]
    assert extremes["distance_px"].iloc[0] == pytest.approx(top)


def test_queries_and_keys_show_a_clicked_point(built):
    at = open_tab(dataset_app(built / "index"), "Queries & keys")
    assert not at.error
    at.number_input(key="dataset|qk_images").set_value(3)
    at.number_input(key="dataset|qk_point").set_value(16 * 3 + 5)  # the keys follow the 48 queries: key of patch 5
    checked(at.run())
    assert "3 images" in at.get("plotly_chart")[0].proto.spec
    assert image_captions(at)[0].startswith("The key of patch (1, 1) of image ")


def test_queries_and_keys_refuse_a_model_whose_weights_changed(built, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    fingerprint = json.loads((built / "index" / "manifest.json").read_text())["model"]["fingerprint"]
    folder = edited_manifest(built, tmp_path, lambda text: text.replace(fingerprint, "0" * 64))
    at = open_tab(dataset_app(folder), "Queries & keys")
    assert len(at.error) == 1 and "has other weights now than when this index was made" in at.error[0].value
    assert not at.get("plotly_chart")


def test_queries_and_keys_say_once_that_the_samples_photos_cannot_be_read(built, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    folder = edited_manifest(built, tmp_path, lambda text: text.replace(str(built / "images"), str(tmp_path / "gone")))
    at = open_tab(dataset_app(folder), "Queries & keys")
    at.number_input(key="dataset|qk_images").set_value(3)
    checked(at.run())
    assert len(at.warning) == 1, [w.value for w in at.warning]
    assert "3 of its 3 images cannot be read. Image " in at.warning[0].value and ", and 2 more." in at.warning[0].value
    assert not at.get("plotly_chart")


def test_patch_search_shows_the_nearest_patches(built):
    at = open_tab(dataset_app(built / "index"), "Patch search")
    at.number_input(key="dataset|search_image").set_value(3)
    at.number_input(key="dataset|search_row").set_value(1)
    at.number_input(key="dataset|search_col").set_value(2)
    at.number_input(key="dataset|search_k").set_value(5)
    at.checkbox(key="dataset|search_others").uncheck()  # the image's own patches too
    checked(at.run())
    assert not at.error
    found = vitviz.open_index(built / "index").nearest_patches(3, (1, 2), 5)
    shown = [c for c in captions(at) if "similarity" in c]
    assert len(shown) == 5 and shown[0].startswith("3: ") and "patch (1, 2), similarity 1.000" in shown[0]
    # drawn four to a row, the crops are listed column by column: compare them as a set
    table = vitviz.open_index(built / "index").query("SELECT image_id, path FROM images")
    found = found.merge(table, on="image_id")
    assert set(shown) == {
        # the path on a line of its own, breakable between folders (issue 44, item 23)
        f"{m.image_id}: patch ({m.row}, {m.col}), similarity {m.similarity:.3f}  \n" + m.path.replace("/", "/\u200b")
        for m in found.itertuples()
    }


def edited_manifest(built, tmp_path, edit) -> Path:
    folder = tmp_path / "index"
    shutil.copytree(built / "index", folder)
    manifest = folder / "manifest.json"
    manifest.write_text(edit(manifest.read_text()))
    return folder


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda built, tmp: "", "Enter the folder of an index"),
        (lambda built, tmp: "/etc", "only inside the folders that the server's owner allows"),
        (lambda built, tmp: built / "no such folder", "There is no folder"),
        (lambda built, tmp: (built / "empty").mkdir(exist_ok=True) or built / "empty", "is empty: make an index"),
        (lambda built, tmp: built / "images", "is not a vitviz index: it has no manifest.json"),
        (lambda built, tmp: edited_manifest(built, tmp, lambda text: text[:-40]), "is not valid JSON"),
        (
            lambda built, tmp: edited_manifest(built, tmp, lambda text: text.replace('"shards"', '"shard_list"')),
            "'shards' is missing",
        ),
        (
            lambda built, tmp: edited_manifest(
                built, tmp, lambda text: text.replace('"format_version": 1', '"format_version": 7')
            ),
            "upgrade vitviz",
        ),
    ],
    ids=["nothing", "outside", "absent", "empty", "not-an-index", "corrupt", "hand-edited", "newer"],
)
def test_each_bad_folder_gets_its_message(built, tmp_path, monkeypatch, make, message):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    at = dataset_app(make(built, tmp_path))
    shown = [e.value for e in at.error] + [i.value for i in at.info]
    assert len(shown) == 1 and message in shown[0], shown


# The page indexes a folder in one batch of up to 32 images (indexing.BATCH, shards of 1024), the command with
# --shard-size 8 in batches of at most 8: float32 matmuls block differently by batch size on some CPUs (AVX-512/AMX
# Xeons), so the same image's probability can differ in its last bits (seen: 1.8e-7) and its fp16 maps by one unit
# in the last place. Everything that is not a float (ids, paths, labels, predictions, checksums) must be equal.
PROBABILITY_ATOL = 1e-5  # float32 probabilities of the same image, batched differently
MAP_RTOL = 2e-3  # fp16 maps: a float32 difference of 1e-7 may round to the neighbouring fp16 value (2**-10 apart)


def assert_same_rows(made, command, sql: str) -> None:
    """The rows ``sql`` reads from both indexes: equal, but for ``probability`` within PROBABILITY_ATOL."""
    ours, theirs = made.query(sql), command.query(sql)
    exact = [column for column in ours.columns if column != "probability"]
    assert list(ours.columns) == list(theirs.columns) and "probability" in ours.columns
    assert ours[exact].equals(theirs[exact])
    np.testing.assert_allclose(ours["probability"], theirs["probability"], rtol=0, atol=PROBABILITY_ATOL)


def index_from_page(at: AppTest, source, out, model) -> AppTest:
    at.text_input(key="dataset|source").set_value(str(source))
    at.text_input(key="dataset|out").set_value(str(out))
    at.text_input(key="dataset|model").set_value(str(model))
    checked(at.run())  # the button is enabled once both folders are typed in
    return checked(at.button(key="dataset|index").click().run())


def test_a_folder_indexed_from_the_page_equals_the_command_and_opens(built, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    at = index_from_page(dataset_app(""), built / "images", tmp_path / "made", built / "model.pt")
    assert not at.error
    assert at.sidebar.text_input(key=str(DATASET_FOLDER)).value == str(tmp_path / "made")  # opened
    assert "25 images match; rows 1 to 25" in captions(at)
    made, command = vitviz.open_index(tmp_path / "made"), vitviz.open_index(built / "index")
    columns = "image_id, path, label, prediction, probability, sha256"
    sql = f"SELECT {columns} FROM images ORDER BY image_id"
    assert_same_rows(made, command, sql)
    np.testing.assert_allclose(
        made.maps(range(24), "rollout"), command.maps(range(24), "rollout"), rtol=MAP_RTOL, atol=1e-6
    )


@pytest.mark.parametrize(
    "source, out, message",
    [
        ("empty", "new", "is empty"),
        ("notes", "new", "has files, but none is an image"),
        ("images", "images", "is not empty: give a new folder"),
        ("/etc", "new", "only inside the folders that the server's owner allows"),
    ],
)
def test_indexing_from_the_page_refuses_bad_folders(built, tmp_path, monkeypatch, source, out, message):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no images here")
    folders = {"empty": tmp_path / "empty", "notes": tmp_path / "notes", "images": built / "images"}
    at = index_from_page(
        dataset_app(""), folders.get(source, source), folders.get(out, tmp_path / out), built / "model.pt"
    )
    assert len(at.error) == 1 and message in at.error[0].value, [e.value for e in at.error]


def photo_files(built, count: int) -> dict[str, ImageFile]:
    """``count`` of the generated photos, as the Photo page keeps uploads (images.py: name -> ImageFile)."""
    paths = sorted((built / "images" / "dog").glob("*.png"))[:count]
    return {f"upload {path.name}": ImageFile.of(path.read_bytes()) for path in paths}


def test_the_sessions_photos_are_indexed_with_the_photo_pages_model_and_opened(built, tmp_path, monkeypatch):
    monkeypatch.setattr(indexing, "SESSION_ROOT", tmp_path / "sessions")
    at = dataset_app("")
    at.session_state[str(HISTORY)] = photo_files(built, 3)
    at.session_state[str(MODEL_BOX)] = PATH_OR_UPLOAD  # the Photo page's model (kept through the visit)
    at.session_state[str(MODEL_PATH)] = str(built / "model.pt")
    checked(at.run())
    checked(at.button(key="dataset|index_session").click().run())
    assert not at.error, [e.value for e in at.error]
    folder = Path(at.sidebar.text_input(key=str(DATASET_FOLDER)).value)
    assert folder.is_relative_to(tmp_path / "sessions")  # outside VITVIZ_MODEL_DIRS, opened all the same
    assert captions(at)[0].startswith("**3 images** (0 unreadable)")
    made, command = vitviz.open_index(folder), vitviz.open_index(built / "index")
    assert made.manifest["model"]["spec"] == str(built / "model.pt")
    listed = ", ".join(f"'{sha}'" for sha in made.query("SELECT sha256 FROM images")["sha256"])
    sql = "SELECT sha256, prediction, probability FROM images WHERE sha256 IN ({}) ORDER BY sha256"
    assert_same_rows(made, command, sql.format(listed))  # as the command indexed them (3 images in one batch)
    table = at.dataframe[0]
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": []}}
    checked(at.run())
    assert len(image_captions(at)) == 1 and not at.warning  # its photo is read back from the session's folder
    other = dataset_app(folder)  # another session may not open it
    assert len(other.error) == 1 and "only inside the folders that the server's owner allows" in other.error[0].value


def test_open_in_photo_carries_a_zero_shot_indexs_prompts(built, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    folder = edited_manifest(
        built, tmp_path, lambda text: text.replace('"prompts": null', '"prompts": ["a cat", "a dog"]')
    )
    at = dataset_app(folder)
    table = at.dataframe[0]
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": []}}
    checked(at.run())
    checked(at.button(key=next(b.key for b in at.button if b.label == "Open in Photo")).click().run())
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"
    assert at.session_state[str(PROMPT_SOURCE)] == MY_PROMPTS
    assert at.session_state[str(PROMPTS)] == "a cat\na dog"


def test_photo_prompts_follow_the_commands_options():
    assert photo_prompts({"prompts": None, "prompt_set": None, "templates": None}) == {}
    assert photo_prompts({"prompt_set": "cifar10", "templates": None}) == {
        str(PROMPT_SOURCE): "cifar10",
        str(PROMPT_ENSEMBLE): False,
    }
    assert photo_prompts({"prompt_set": "cifar10", "templates": "openai-80"})[str(PROMPT_ENSEMBLE)] is True
    typed = photo_prompts({"prompts": ["dog", "cat"], "templates": "photo"})
    assert typed == {str(PROMPT_SOURCE): MY_PROMPTS, str(PROMPTS): "a photo of a dog.\na photo of a cat."}


def test_open_in_photo_keeps_the_sessions_limits(built, monkeypatch):
    monkeypatch.setattr(images, "MAX_SESSION_IMAGES", 2)
    at = dataset_app(built / "index")
    earlier = photo_files(built, 2)
    at.session_state[str(HISTORY)] = dict(earlier)
    table = at.dataframe[0]
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": []}}
    checked(at.run())
    path = table.value["path"].iloc[0]
    checked(at.button(key=next(b.key for b in at.button if b.label == "Open in Photo")).click().run())
    assert list(at.session_state[str(HISTORY)]) == [list(earlier)[1], f"index: {path}"]  # the oldest dropped


def test_the_photo_pages_sidebar_and_tab_survive_a_visit_to_the_dataset_page(built):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state[str(HISTORY)] = photo_files(built, 1)
    at.session_state[str(MODEL_BOX)] = PATH_OR_UPLOAD
    at.session_state[str(MODEL_PATH)] = str(built / "model.pt")
    checked(at.run())
    photo_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") != "dataset")
    at.sidebar.selectbox(key=str(PHOTO_COLORMAP)).set_value("viridis")
    at.sidebar.radio(key=str(PHOTO_PRECISION)).set_value("fp32")
    at.sidebar.slider(key=str(PHOTO_ALPHA)).set_value(0.3)
    at.session_state[str(PHOTO_TAB)] = "Tokens"
    checked(at.run())
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "dataset")
    checked(at.run())
    checked(at.run())  # a second run of the Dataset page: Streamlit has dropped the undrawn widgets by now
    at._page_hash = photo_hash
    checked(at.run())
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"
    assert at.sidebar.selectbox(key=str(PHOTO_COLORMAP)).value == "viridis"
    assert at.sidebar.radio(key=str(PHOTO_PRECISION)).value == "fp32"
    assert at.sidebar.slider(key=str(PHOTO_ALPHA)).value == 0.3
    assert at.sidebar.text_input(key=str(MODEL_PATH)).value == str(built / "model.pt")
    assert at.session_state[str(PHOTO_TAB)] == "Tokens"


def test_a_typed_hub_spec_survives_a_visit_to_the_dataset_page(built):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state[str(MODEL_BOX)] = HUB_SPEC
    at.session_state[str(MODEL_HUB_SPEC)] = "hf:not a repository id"  # refused at once, offline: the value still stays
    checked(at.run())
    photo_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") != "dataset")
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") == "dataset")
    checked(at.run())
    checked(at.run())  # Streamlit has dropped the undrawn widgets by now
    at._page_hash = photo_hash
    checked(at.run())
    assert at.sidebar.text_input(key=str(MODEL_HUB_SPEC)).value == "hf:not a repository id"


def test_the_sessions_photos_with_a_text_tower_make_a_zero_shot_index_whose_prompts_go_back(
    built, tmp_path, monkeypatch
):
    monkeypatch.setattr(indexing, "SESSION_ROOT", tmp_path / "sessions")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", f"{built}:{tmp_path}")
    clip = clip_folder(tmp_path / "clip")[2]
    at = dataset_app("")
    at.session_state[str(HISTORY)] = photo_files(built, 2)
    at.session_state[str(MODEL_BOX)] = PATH_OR_UPLOAD
    at.session_state[str(MODEL_PATH)] = str(clip)
    at.session_state[str(PROMPT_SOURCE)] = MY_PROMPTS
    at.session_state[str(PROMPTS)] = "a photo of a dog\na photo of a cat"
    checked(at.run())
    checked(at.button(key="dataset|index_session").click().run())
    assert not at.error, [e.value for e in at.error]
    made = vitviz.open_index(at.sidebar.text_input(key=str(DATASET_FOLDER)).value)
    assert made.manifest["model"]["prompts"] == ["a photo of a dog", "a photo of a cat"]
    assert made.manifest["model"]["class_names"] == ["a photo of a dog", "a photo of a cat"]
    assert set(made.query("SELECT prediction FROM images")["prediction"]) <= {"a photo of a dog", "a photo of a cat"}
    at.session_state[str(PROMPTS)] = "something else"  # changed since; Open in Photo puts the index's back
    table = at.dataframe[0]
    at.session_state[table.key] = {"selection": {"rows": [0], "columns": []}}
    checked(at.run())
    checked(at.button(key=next(b.key for b in at.button if b.label == "Open in Photo")).click().run())
    assert at.session_state[str(PROMPTS)] == "a photo of a dog\na photo of a cat"


def test_session_folders_unused_for_a_day_are_swept_and_the_current_one_kept(tmp_path):
    root = tmp_path / "sessions"
    old, recent, mine = (root / name for name in ("old", "recent", "mine"))
    for folder in (old, recent, mine):
        (folder / "abc" / "index").mkdir(parents=True)
    day = indexing.SESSION_MAX_AGE_S
    now = time.time()
    os.utime(old, (now - day - 60, now - day - 60))
    os.utime(mine, (now - 2 * day, now - 2 * day))  # old too, but it is the caller's own
    os.utime(recent, (now - day + 600, now - day + 600))
    assert indexing.sweep_session_folders(root, keep=mine) == [old]
    assert sorted(p.name for p in root.iterdir()) == ["mine", "recent"]
    assert indexing.sweep_session_folders(tmp_path / "none yet", keep=mine) == []


def test_thumbnails_shrink_big_photos_and_enlarge_tiny_ones_by_whole_pixels():
    from PIL import Image

    from vitviz_dashboard.dataset import drawing

    tiny = Image.new("RGB", (32, 32), (10, 20, 30))
    tiny.putpixel((0, 0), (255, 255, 255))
    shown = drawing.marked_thumbnail(tiny, (3, 3), (4, 4), (0, 0, 32, 32), side=192)
    assert shown.size == (192, 192)  # 6x, each pixel a 6 x 6 block
    assert shown.getpixel((5, 5)) == (255, 255, 255) and shown.getpixel((6, 6)) == (10, 20, 30)
    assert drawing.marked_thumbnail(Image.new("RGB", (1000, 500)), (0, 0), (4, 4), (250, 0, 750, 500)).size == (192, 96)
    assert drawing.marked_thumbnail(Image.new("RGB", (150, 100)), (0, 0), (4, 4), (25, 0, 125, 100)).size == (150, 100)


def test_the_tables_filters_survive_a_visit_to_the_photo_page(built):
    at = dataset_app(built / "index")
    at.multiselect(key="kept|dataset|classes").set_value(["cat"])
    at.radio(key="kept|dataset|correctness").set_value("wrong")
    checked(at.run())
    dataset_hash = at._page_hash
    at._page_hash = next(h for h, info in at._registered_pages.items() if info.get("url_pathname") != "dataset")
    checked(at.run())
    checked(at.run())  # a second run of the Photo page: Streamlit has dropped the undrawn widgets by now
    at._page_hash = dataset_hash
    checked(at.run())
    assert at.multiselect(key="kept|dataset|classes").value == ["cat"]
    assert at.radio(key="kept|dataset|correctness").value == "wrong"
