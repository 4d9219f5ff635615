"""The Dataset page's image grid (vitviz_dashboard/dataset/grid.py) under AppTest, on a tiny index of generated
images: a confusion cell's images, a SQL result's and an image's nearest images become the selection and the Grid
tab shows them a page at a time with a map drawn patch by patch; the selection's rows download as CSV and Parquet."""

import io
import os

import numpy as np
import pandas as pd
import pytest
from dataset_harness import checked, dataset_app, fresh_page, make_images, open_tab
from PIL import Image
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_command
from vitviz.render.overlays import overlay
from vitviz_dashboard.dataset import drawing, export
from vitviz_dashboard.dataset.grid import GRID_TAB, SELECTION
from vitviz_dashboard.state import DATASET_TAB


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset_grid")
    model = tiny_checkpoint(root / "model.pt")
    images = make_images(root / "images")
    assert index_command([str(images), "--model", str(model), "--out", str(root / "index"), "--shard-size", "8"]) == 0
    return root


@pytest.fixture(autouse=True)
def page_settings(monkeypatch, built):
    fresh_page(monkeypatch, built)


def shown_ids(at) -> list[int]:
    """The ids of the grid's thumbnails, sorted (AppTest lists a grid's columns one after another)."""
    return sorted(
        int(image.proto.imgs[0].caption.split(":")[0])
        for image in at.get("image")
        if image.proto.imgs[0].caption[:1].isdigit()
    )


def test_a_confusion_cell_goes_to_the_grid_and_a_similar_click_selects_the_nearest_images(built):
    index = vitviz.open_index(built / "index")
    at = open_tab(dataset_app(built / "index"), "Errors")
    at.selectbox(key="dataset|true").set_value("cat")
    at.selectbox(key="dataset|predicted").set_value("dog")
    checked(at.run())
    cell = index.query(
        "SELECT image_id FROM images WHERE label = 'cat' AND prediction = 'dog' AND error IS NULL "
        "ORDER BY probability DESC, image_id"
    )["image_id"].tolist()
    assert cell, "the tiny model should get some cats wrong"
    checked(at.button(key="dataset|cell_grid").click().run())
    assert at.session_state[str(DATASET_TAB)] == GRID_TAB
    selection = at.session_state[SELECTION]
    assert list(selection.ids) == cell and selection.source == "confusion"
    assert shown_ids(at) == sorted(cell[:24])
    assert any(f"{len(cell):,} images: cat predicted as dog" in m.value for m in at.markdown)
    first = cell[0]
    checked(at.button(key=f"dataset|similar|{first}").click().run())
    near = index.nearest_images(first, k=12)["image_id"].tolist()
    assert list(at.session_state[SELECTION].ids) == near and near[0] == first
    assert shown_ids(at) == sorted(near)
    # the count is of every image shown, the image itself among them: "12 images: image 7 and the 11 nearest to it"
    assert any(f"12 images: image {first} and the 11 images nearest to it" in m.value for m in at.markdown)


def test_a_sql_result_with_image_ids_is_shown_a_page_at_a_time_and_exported(built):
    index = vitviz.open_index(built / "index")
    at = dataset_app(built / "index")
    at.text_area(key="dataset|sql").set_value(
        "SELECT image_id, path FROM images WHERE image_id >= 3 ORDER BY image_id DESC"
    )
    checked(at.button(key="dataset|sql_run").click().run())
    at = open_tab(at, GRID_TAB)
    checked(at.button(key="dataset|sql_grid").click().run())
    wanted = list(range(index.count - 1, 2, -1))  # 24 down to 3: 22 ids
    assert list(at.session_state[SELECTION].ids) == wanted
    # the Table tab's filters (kept in the session from the Table tab) as a selection
    at = open_tab(at, "Table")
    at.multiselect(key="kept|dataset|classes").set_value(["cat"])
    at.radio(key="kept|dataset|correctness").set_value("wrong")
    at = open_tab(checked(at.run()), GRID_TAB)
    checked(at.button(key="dataset|table_grid").click().run())
    wrong_cats = index.query("SELECT image_id FROM images WHERE label = 'cat' AND NOT correct ORDER BY image_id")
    assert list(at.session_state[SELECTION].ids) == wrong_cats["image_id"].tolist()
    assert at.session_state[SELECTION].title == "the Table tab's filters (cat, wrong)"
    checked(at.button(key="dataset|sql_grid").click().run())
    # the broken image has no photo: the shown ones are the readable ones, in the selection's order
    readable = set(index.query("SELECT image_id FROM images WHERE error IS NULL")["image_id"])
    assert shown_ids(at) == sorted(i for i in wanted if i in readable)
    labels = sorted(b.proto.label for b in at.get("download_button"))
    assert labels == ["Rows as CSV", "Rows as Parquet"]
    parquet = pd.read_parquet(io.BytesIO(export.parquet_bytes(export.rows_of(index, wanted))))
    expected = index.query("SELECT * FROM images WHERE image_id >= 3 ORDER BY image_id DESC")
    pd.testing.assert_frame_equal(as_lists(parquet), as_lists(expected), check_dtype=False)
    # the selection as a sub-index in a new folder inside the allowed ones: it opens, its images are the chosen ones
    at.text_input(key="dataset|subindex_folder").set_value(str(built / "sub"))
    checked(at.button(key="FormSubmitter:dataset|subindex_form-Write a sub-index").click().run())
    assert not at.error, [e.value for e in at.error]
    sub = vitviz.open_index(built / "sub")
    assert sub.query("SELECT parent_image_id FROM images ORDER BY image_id")["parent_image_id"].tolist() == wanted[::-1]
    checked(at.button(key="FormSubmitter:dataset|subindex_form-Write a sub-index").click().run())
    assert "exists and is not an empty folder" in at.error[0].value  # a second time: refused, nothing overwritten
    at.text_input(key="dataset|subindex_folder").set_value("/tmp/outside-the-allowed-folders")
    checked(at.button(key="FormSubmitter:dataset|subindex_form-Write a sub-index").click().run())
    assert at.error and not os.path.exists("/tmp/outside-the-allowed-folders")


def as_lists(frame: pd.DataFrame) -> pd.DataFrame:
    """List columns (top-5 classes) as Python lists and a missing value as None, so frames read two ways compare."""
    return frame.map(lambda v: list(v) if isinstance(v, np.ndarray | list) else None if pd.isna(v) else v)


def test_a_map_is_drawn_patch_by_patch_on_one_scale():
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    patch_map = rng.random((4, 4)).astype(np.float32)
    box = (0.0, 0.0, 32.0, 32.0)
    picture = np.asarray(drawing.patch_thumbnail(image, patch_map, box, "inferno", 1.0, (0.0, 1.0), side=192))
    assert picture.shape == (192, 192, 3)
    # alpha 1: every pixel of a patch is that patch's one colour (a 48 px block), no blending across patches
    for r in range(4):
        for c in range(4):
            block = picture[r * 48 : (r + 1) * 48, c * 48 : (c + 1) * 48].reshape(-1, 3)
            assert (block == block[0]).all()
    smooth = np.asarray(overlay(image.resize((192, 192), Image.NEAREST), patch_map, "inferno", 1.0, (0, 0, 192, 192)))
    assert not (smooth[:48, :48].reshape(-1, 3) == smooth[0, 0]).all()  # the bilinear overlay is not blocky


def test_the_embedding_map_is_pca_of_the_pooled_embeddings_and_a_lasso_selects_into_the_grid(built):
    from sklearn.decomposition import PCA

    from vitviz.dataset.analysis import project_embeddings

    index = vitviz.open_index(built / "index")
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].to_numpy()
    projection = project_embeddings(index, readable)
    direct = PCA(2, random_state=0).fit_transform(index.embeddings(readable).astype(np.float64))
    np.testing.assert_allclose(projection.points, direct, atol=1e-6)
    at = open_tab(dataset_app(built / "index"), "Embedding map")
    assert not at.error and at.get("plotly_chart")
    chart = at.get("plotly_chart")[0]
    assert chart.proto.id  # the map is drawn
    assert "PCA; UMAP is not installed" in " ".join(c.value for c in at.caption)
    lassoed = [int(i) for i in readable[[0, 2, 5]]]
    points = [{"x": 0.0, "y": 0.0, "curve_number": 0, "customdata": i} for i in lassoed]
    at.session_state["dataset|embedding_map"] = {"selection": {"points": points, "box": [], "lasso": [[0]]}}
    checked(at.run())
    assert list(at.session_state[SELECTION].ids) == lassoed
    assert shown_ids(at) == sorted(lassoed)
    at.selectbox(key="dataset|embedding_colour").set_value("probability")  # a numeric column: one trace, a scale
    checked(at.run())
    assert list(at.session_state[SELECTION].ids) == lassoed  # the same lasso again does not reset the grid


def test_the_slices_tab_lists_accuracy_by_a_column_beside_all_images(built):
    index = vitviz.open_index(built / "index")
    at = open_tab(dataset_app(built / "index"), "Slices")
    assert not at.error
    options = at.selectbox(key="dataset|slice_by").options
    assert options[:2] == ["label", "prediction"] and "path" not in options  # a path is one slice per image
    at.selectbox(key="dataset|slice_by").set_value("label")
    checked(at.run())
    frame = at.dataframe[0].value
    assert frame["slice"].tolist() == ["all images", "cat", "dog"]
    direct = index.query("SELECT label, count(*) AS n, avg(correct::INT) AS acc FROM images GROUP BY label ORDER BY 1")
    assert frame["images"].tolist()[1:] == direct["n"].tolist()
    overall = index.query("SELECT avg(correct::INT) AS acc FROM images")["acc"][0]
    assert any(f"accuracy {overall:.1%}" in m.value for m in at.markdown)
