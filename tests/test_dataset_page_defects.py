"""The Dataset page's defects found by trying it as a new user would (issue 36, "the page's defects"), each with a
test that failed before its fix: patch search over other images only, the Heads tab's intervals, axes and extreme
images, the confusion matrix's square cells and its selection, the SAE wording, the union of both top-5s of an
edit, and a click on a Queries & keys point without Streamlit's warning."""

import json

import numpy as np
import pytest
from dataset_harness import checked, dataset_app, open_tab, page_fixtures

import vitviz
from vitviz.commands.index import main as index_command
from vitviz.dataset.search import normalised

# a folder holding a tiny model, 24 generated images (and a broken one) and their index; fresh caches per test
built, page_settings = page_fixtures("dataset_defects")


def chart(at, containing: str) -> dict:
    """The Plotly figure of the page whose spec contains ``containing``."""
    return json.loads(next(c.proto.spec for c in at.get("plotly_chart") if containing in c.proto.spec))


def plotly_array(value) -> np.ndarray:
    """An array of a figure's spec: a list, or plotly's base64 with its dtype and shape."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        array = np.frombuffer(base64.b64decode(value["bdata"]), value["dtype"])
        return array.reshape(tuple(int(n) for n in value["shape"].split(","))) if "shape" in value else array
    return np.asarray(value)


def clicked(x, y, index: int):
    """A chart's selection after a click on one point, as st.plotly_chart returns it."""
    from streamlit.elements.plotly_chart import PlotlySelectionState, PlotlyState

    points = [{"x": x, "y": y, "curve_number": 1, "point_index": index}]
    return PlotlyState(selection=PlotlySelectionState(points=points, point_indices=[index], box=[], lasso=[]))


# patch search: other images only


def test_nearest_patches_of_other_images_are_the_k_best_of_the_other_images(built):
    index = vitviz.open_index(built / "index")
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].to_numpy()
    flat = normalised(index.features(readable).reshape(-1, index.features(0).shape[-1]))  # (n * 16, D)
    for image_id, patch, k in ((0, (0, 0), 6), (7, (2, 3), 8), (int(readable[-1]), (3, 1), 30)):
        found = index.nearest_patches(image_id, patch, k, other_images=True)
        scores = flat @ normalised(index.features(image_id)[0][patch])
        others = readable[np.arange(len(flat)) // 16] != image_id
        best = np.flatnonzero(others)[np.argsort(-scores[others], kind="stable")[:k]]
        assert len(found) == k and image_id not in found["image_id"].tolist()
        assert found["image_id"].tolist() == readable[best // 16].tolist()
        assert (found["row"] * 4 + found["col"]).tolist() == (best % 16).tolist()
        np.testing.assert_allclose(found["similarity"], scores[best], rtol=1e-5, atol=1e-5)
    assert 0 in index.nearest_patches(0, (0, 0), 6)["image_id"].tolist()  # by default the image's own are there


def similar_captions(at) -> list[str]:
    return [c.value for c in at.caption if "similarity" in c.value]


def test_patch_search_shows_other_images_only_by_default(built):
    at = open_tab(dataset_app(built / "index"), "Patch search")
    at.number_input(key="dataset|search_image").set_value(3)
    checked(at.run())
    shown = similar_captions(at)
    assert len(shown) == 8 and not any(c.startswith("3: ") for c in shown), shown
    at.checkbox(key="dataset|search_others").uncheck()
    checked(at.run())
    shown = similar_captions(at)
    assert len(shown) == 8 and shown[0].startswith("3: ") and "similarity 1.000" in shown[0]


# Queries & keys: a click on a point


def test_a_click_on_a_queries_and_keys_point_picks_it_without_streamlits_warning(built, monkeypatch):
    from streamlit.elements.lib import policies

    warned = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "warning", lambda message, *args, **kwargs: warned.append(message % args))
    at = open_tab(dataset_app(built / "index"), "Queries & keys")
    at.number_input(key="dataset|qk_images").set_value(3)
    checked(at.run())
    points = chart(at, "queries and keys of 3 images")["data"]
    key_trace = next(t for t in points if t.get("name") == "key")
    x, y = plotly_array(key_trace["x"])[5], plotly_array(key_trace["y"])[5]  # the key of patch 5: point 48 + 5
    at.session_state["dataset|qk_chart"] = clicked(x, y, 5)
    checked(at.run())
    assert at.number_input(key="dataset|qk_point").value == 16 * 3 + 5
    assert not [w for w in warned if "dataset|qk_point" in w], warned
    assert [i.proto.imgs[0].caption for i in at.get("image")][0].startswith("The key of patch (1, 1) of image ")
    at.number_input(key="dataset|qk_point").set_value(2)  # a typed point after the click is kept
    checked(at.run())
    assert at.number_input(key="dataset|qk_point").value == 2


# the SAE's wording


@pytest.fixture(scope="module")
def with_sae(built, tmp_path_factory):
    """An index that stores block 0's activations, and an SAE trained a few steps on it with its latent tables."""
    from dataset_harness import QUICK

    from vitviz.commands.sae import main as sae_main

    root = tmp_path_factory.mktemp("dataset_defects_sae")
    out = root / "index"
    options = ["--shard-size", "8", "--activations", "0"]
    assert index_command([str(built / "images"), "--model", str(built / "model.pt"), "--out", str(out), *options]) == 0
    assert sae_main(["train", str(out), "--block", "0", *QUICK, "--seed", "1", "--out", str(root / "sae")])
    sae_main(["latents", str(out), str(root / "sae")])
    return root, sae_main


def test_the_sae_ablation_hint_names_the_open_index_and_a_set_to_max_table_says_its_multiple(with_sae, monkeypatch):
    import pyarrow.parquet as pq

    from vitviz_dashboard.dataset.sae_features import SAE_FOLDER

    root, sae_main = with_sae
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(root))
    at = open_tab(dataset_app(root / "index"), "Features (SAE)")
    at.text_input(key=SAE_FOLDER).set_value(str(root / "sae"))
    checked(at.run())
    latent = at.selectbox(key="dataset|sae_latent").value
    hint = next(c.value for c in at.caption if c.value.startswith("No table yet"))
    assert f"`vitviz sae ablate {root / 'index'} {root / 'sae'} --latent {latent}`" in hint and "INDEX" not in hint
    sae_main(["ablate", str(root / "index"), str(root / "sae"), "--latent", str(latent), "--set-to-max", "-2"])
    checked(at.run())
    largest = pq.read_table(root / "sae" / "latents.parquet").to_pandas().set_index("latent")["max_activation"]
    [caption] = [c.value for c in at.caption if "codes set to" in c.value]
    assert f"codes set to {-2 * largest[latent]:.4g} on every patch (-2 x the latent's largest activation" in caption


# an SAE edit's before/after table


def test_the_before_after_table_lists_the_union_of_both_top_fives():
    from vitviz_dashboard.knockout import compared_classes

    before = np.array([0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03])
    after = np.array([0.28, 0.05, 0.14, 0.11, 0.09, 0.06, 0.241, 0.029])  # class 6 (frog) rose to 24.1 %
    assert compared_classes(before, after) == [0, 1, 2, 3, 4, 6]
    assert compared_classes(before, before) == [0, 1, 2, 3, 4]
    assert compared_classes(before, before[::-1].copy()) == [0, 1, 2, 3, 4, 7, 6, 5]


# the Heads tab


def test_heads_intervals_show_in_the_hover_axes_name_every_layer_and_head_and_extremes_go_both_ways(built):
    from vitviz.dataset.analysis import bootstrap_interval
    from vitviz_dashboard.cache.dataset import per_image

    at = open_tab(dataset_app(built / "index"), "Heads")
    index = vitviz.open_index(built / "index")
    interval = bootstrap_interval(per_image.__wrapped__("", "distance_px", _index=index), seed=0)
    distance = chart(at, "95 % interval")
    for head, trace in enumerate(distance["data"]):
        assert "95 % interval %{customdata[1]:.3f} to %{customdata[2]:.3f} px" in trace["hovertemplate"]
        bounds = plotly_array(trace["customdata"])
        np.testing.assert_allclose(bounds[:, 1], interval.low[:, head])
        np.testing.assert_allclose(bounds[:, 2], interval.high[:, head])
        assert trace["error_y"]["thickness"] >= 2 and trace["marker"]["symbol"].startswith("line-ew")
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    heatmaps = [f for f in figures if f["data"][0].get("type") == "heatmap"]
    assert len(heatmaps) == 3  # entropy, a prefix share, the clusters
    for heatmap in heatmaps[:2]:  # the layer x head heatmaps: a tick per layer (2) and per head (4)
        for axis in ("xaxis", "yaxis"):
            assert (heatmap["layout"][axis]["tickmode"], heatmap["layout"][axis]["dtick"]) == ("linear", 1)
        assert "title" not in heatmap["layout"] or not heatmap["layout"]["title"].get("text")  # markdown: it wraps
    picker = at.selectbox(key="dataset|extreme_what")
    labels = set(picker.options)  # as the page shows them
    assert picker.options[0] == "attends farthest away"  # the ViT paper's statistic first
    assert {"attends nearest", "attends farthest away"} <= labels
    assert {
        "has the lowest entropy (attends to few patches)",
        "has the highest entropy (attends most evenly)",
    } <= labels
    for choice, column, pick in (("distance_px ASC", "distance_px", min), ("entropy ASC", "entropy", min)):
        at.selectbox(key="dataset|extreme_what").set_value(choice)
        checked(at.run())
        shown = next(d.value for d in at.dataframe if column in d.value.columns and "image_id" in d.value.columns)
        values = index.query(f"SELECT {column} FROM heads WHERE layer = 0 AND head = 0")[column]
        assert shown[column].iloc[0] == pytest.approx(pick(values))
        assert shown[column].is_monotonic_increasing


# the confusion matrix


def test_the_confusion_matrix_has_square_cells_sized_by_its_classes_and_a_box_selects_several(built):
    from vitviz_dashboard.dataset.confusion_matrix import AXIS_PX, CELL_PX, CELL_TRACE

    at = open_tab(dataset_app(built / "index"), "Errors")
    index = vitviz.open_index(built / "index")
    pairs = index.query("SELECT label, prediction, count(*) AS n FROM images WHERE error IS NULL GROUP BY ALL")
    classes = sorted(set(pairs["label"]) | set(pairs["prediction"]))
    figure = chart(at, "predicted")
    layout, (heatmap, cells) = figure["layout"], figure["data"]
    assert heatmap["type"] == "heatmap" and cells["type"] == "scatter"
    assert layout["yaxis"]["scaleanchor"] == "x" and layout["height"] == AXIS_PX + CELL_PX * len(classes)
    assert layout["xaxis"]["ticktext"] == classes and layout["yaxis"]["ticktext"] == classes
    matrix = np.zeros((len(classes), len(classes)), int)
    for row in pairs.itertuples():
        matrix[classes.index(row.label), classes.index(row.prediction)] = row.n
    np.testing.assert_allclose(plotly_array(heatmap["z"]), np.log1p(matrix))
    assert heatmap["text"] == [[str(c) if c else "" for c in row] for row in matrix]
    assert "dragmode" not in layout and "clickmode" not in layout  # Streamlit's own: a click selects a cell
    # a box around two cells: the images of both
    cat, dog = classes.index("cat"), classes.index("dog")
    box = [{"x": cat, "y": cat, "curve_number": CELL_TRACE}, {"x": dog, "y": cat, "curve_number": CELL_TRACE}]
    from streamlit.elements.plotly_chart import PlotlySelectionState, PlotlyState

    at.session_state["dataset|confusion"] = PlotlyState(
        selection=PlotlySelectionState(points=box, point_indices=[0, 1], box=[{"x": [0, 1], "y": [0, 1]}], lasso=[])
    )
    checked(at.run())
    both = pairs[(pairs["label"] == "cat") & pairs["prediction"].isin(["cat", "dog"])]["n"].sum()
    assert f"2 cells (cat predicted as cat; cat predicted as dog): the most confident {both} shown." in [
        c.value for c in at.caption
    ]
    # the pickers say how many cells are selected rather than show the first one's (issue 44, item 19)
    assert (at.selectbox(key="dataset|true").value, at.selectbox(key="dataset|predicted").value) == (None, None)
    shown = [i.proto.imgs[0].caption for i in at.get("image") if ", cat → " in i.proto.imgs[0].caption]
    assert len(shown) == both
    at.selectbox(key="dataset|predicted").set_value("dog")  # a picker takes over from the box
    checked(at.run())
    assert any(c.value.startswith("cat predicted as dog: the most confident") for c in at.caption)


# state kept


def test_the_open_index_is_in_the_address_so_a_reload_opens_it_again(built):
    from streamlit.testing.v1 import AppTest

    from vitviz_dashboard.state import DATASET_FOLDER

    at = dataset_app(built / "index")
    assert at.query_params["index"] in (str(built / "index"), [str(built / "index")])
    again = AppTest.from_file(at._script_path, default_timeout=180)  # a reload: a new session, the same address
    again.query_params["index"] = str(built / "index")
    again.run()
    again._page_hash = next(h for h, i in again._registered_pages.items() if i.get("url_pathname") == "dataset")
    checked(again.run())
    assert again.sidebar.text_input(key=str(DATASET_FOLDER)).value == str(built / "index")
    assert any(c.value.startswith("**25 images** (1 unreadable)") for c in again.caption)
    again.sidebar.text_input(key=str(DATASET_FOLDER)).set_value(str(built / "no such folder"))
    checked(again.run())
    assert "index" not in again.query_params


def test_a_caption_breaks_a_path_between_folders_not_inside_a_file_name():
    from vitviz_dashboard.dataset.drawing import breakable

    shown = breakable("test/airplane/airplane_0001.png")
    assert shown.replace("\u200b", "") == "test/airplane/airplane_0001.png"
    assert shown.split("\u200b") == ["test/", "airplane/", "airplane_0001.png"]  # the only places it may break
