"""The researcher's views against FiftyOne and LIT (issue 44), the library and the page under AppTest:

- Wilson's score interval against Newcombe (1998)'s published values and the formula worked by hand, Student's t
  interval against scipy, slices over two columns against pandas, each slice's interval Wilson's;
- t-SNE on the embedding map against scikit-learn run directly; the selection drawn solid on the map, ticked rows
  ringed, the ticks of the map's own table joining the Table's;
- a click on a slice's bar selects its images; two columns cross;
- two indexes of the same images (two models) matched by sha256, their agreement counted by hand, disagreements
  listed, a pair sharing nothing refused in one line; the Compare tab on them."""

import math
import shutil

import numpy as np
import pandas as pd
import pytest
from dataset_harness import checked, dataset_app, fresh_page, make_images, open_tab
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.dataset.analysis import (
    OVERALL,
    mean_interval,
    project_embeddings,
    slice_keys,
    slice_summary,
    wilson_interval,
)
from vitviz.dataset.compare import NothingShared, agreement_counts, disagreements, match_indexes
from vitviz_dashboard.dataset.grid import SELECTION
from vitviz_dashboard.dataset.link import ticked

# ---- fixtures: two models over one folder of images, and a folder of other images ---------------------------------


def graded_images(folder):
    """24 photos in cat/ and dog/ of graded brightness (where the two tiny models below disagree on some and agree on
    others; on make_images's noise each predicts one class for all), and one broken file."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(24):
        (folder / ("cat" if i % 2 else "dog")).mkdir(parents=True, exist_ok=True)
        pixels = np.clip(rng.normal(i * 11 % 256, 30, (32, 32, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / ("cat" if i % 2 else "dog") / f"{i:03d}.png")
    (folder / "cat" / "broken.png").write_bytes(b"not an image")
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """root/index (a 2-block model) and root/other (a 3-block model) of the same 24 images (and a broken one),
    root/half: the second model over a copy of 12 of them in another folder layout, root/foreign: other images."""
    root = tmp_path_factory.mktemp("dataset_compare_slices")
    images = graded_images(root / "images")
    first = tiny_checkpoint(root / "model.pt")
    second = tiny_checkpoint(root / "other.pt", num_layers=3)
    half = root / "half-images" / "all"
    half.mkdir(parents=True)
    for path in sorted(images.rglob("*.png"))[:12]:
        shutil.copy(path, half / f"{path.parent.name}-{path.name}")
    foreign = make_images(root / "foreign-images", count=6, seed=7)
    for source, model, out in (
        (images, first, "index"),
        (images, second, "other"),
        (half.parent, second, "half"),
        (foreign, first, "foreign"),
    ):
        assert index_main([str(source), "--model", str(model), "--out", str(root / out), "--shard-size", "8"]) == 0
    return root


@pytest.fixture(autouse=True)
def page_settings(monkeypatch, built):
    fresh_page(monkeypatch, built)


# ---- intervals ------------------------------------------------------------------------------------------------------

# Newcombe, "Two-sided confidence intervals for the single proportion", Statistics in Medicine 17 (1998), Table I,
# method 3 (the score interval without continuity correction): successes, trials, low, high
NEWCOMBE = [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)]


@pytest.mark.parametrize(("k", "n", "low", "high"), NEWCOMBE)
def test_the_wilson_interval_gives_newcombes_published_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert (round(float(got[0]), 4), round(float(got[1]), 4)) == (low, high)


def test_the_wilson_interval_is_the_formula_worked_by_hand():
    # 7 of 10 at 95 %: z = 1.959964, z^2 = 3.841459; centre = (0.7 + 0.192073) / 1.384146 = 0.644493;
    # half = 1.959964 / 1.384146 * sqrt(0.021 + 0.009604) = 1.416010 * 0.174939 = 0.247715
    low, high = wilson_interval(7, 10)
    assert float(low) == pytest.approx(0.644493 - 0.247715, abs=5e-6)  # 0.396778
    assert float(high) == pytest.approx(0.644493 + 0.247715, abs=5e-6)  # 0.892209
    # elementwise, 0 trials NaN, a 99 % interval wider than the 95 %
    lows, highs = wilson_interval(np.array([7, 0]), np.array([10, 0]))
    assert lows[0] == low and math.isnan(lows[1]) and math.isnan(highs[1])
    wide = wilson_interval(7, 10, level=0.99)
    assert wide[0] < low and wide[1] > high
    with pytest.raises(ValueError, match="between 0 and the number of trials"):
        wilson_interval(11, 10)


def test_the_mean_interval_is_students_t():
    from scipy import stats

    values = np.random.default_rng(0).random(40)
    mean, low, high = mean_interval(values)
    expected = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert mean == pytest.approx(values.mean()) and (low, high) == pytest.approx(expected)
    assert math.isnan(mean_interval([0.5])[1])


# ---- slices over two columns ----------------------------------------------------------------------------------------


def images_frame(n=300, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    correct = pd.Series(rng.random(n) < 0.7, dtype="boolean")
    correct[rng.random(n) < 0.1] = pd.NA
    return pd.DataFrame(
        {
            "label": rng.choice(["cat", "dog", "o'clock"], n),
            "prediction": rng.choice(["cat", "dog"], n),
            "correct": correct,
            "probability": rng.random(n),
            "width": rng.integers(10, 500, n).astype("float64"),
        }
    )


def test_slices_over_two_columns_equal_pandas_with_wilson_intervals():
    frame = images_frame()
    table = slice_summary(frame, ["label", "prediction"])
    correct = frame["correct"].astype("float64")
    direct = (
        frame.assign(c=correct)
        .groupby(["label", "prediction"])
        .agg(images=("c", "size"), labelled=("c", "count"), hits=("c", "sum"), p=("probability", "mean"))
        .reset_index()
    )
    parts = table.iloc[1:].reset_index(drop=True)
    assert table["slice"].iloc[0] == OVERALL and table["images"].iloc[0] == len(frame)
    assert parts["slice"].tolist() == [f"{a} × {b}" for a, b in zip(direct["label"], direct["prediction"])]
    assert parts["images"].tolist() == direct["images"].tolist()
    np.testing.assert_allclose(parts["accuracy"], direct["hits"] / direct["labelled"])
    np.testing.assert_allclose(parts["mean_probability"], direct["p"])
    low, high = wilson_interval(direct["hits"], direct["labelled"])
    np.testing.assert_allclose(parts["accuracy_low"], low)
    np.testing.assert_allclose(parts["accuracy_high"], high)
    assert (parts["accuracy_low"] <= parts["accuracy"]).all() and (parts["accuracy"] <= parts["accuracy_high"]).all()


def test_a_numeric_second_column_is_binned_and_bad_slicings_are_refused():
    frame = images_frame()
    keys = slice_keys(frame, ["label", "width"], bins=3)
    assert keys["width"].nunique() == 3 and list(keys.columns) == ["label", "width"]
    assert slice_summary(frame, ["label", "width"], bins=3)["images"].iloc[1:].sum() == len(frame)
    with pytest.raises(ValueError, match="one column or two"):
        slice_keys(frame, ["label", "prediction", "width"])
    with pytest.raises(ValueError, match="'label' twice"):
        slice_keys(frame, ["label", "label"])
    with pytest.raises(ValueError, match="a statistic of that name"):
        slice_summary(frame.assign(images=1), ["label", "images"])


# ---- t-SNE ----------------------------------------------------------------------------------------------------------


def test_tsne_is_scikit_learns_on_the_first_principal_components(built):
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    index = vitviz.open_index(built / "index")
    ids = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].to_numpy()
    projection = project_embeddings(index, ids, method="tsne")
    vectors = index.embeddings(ids).astype(np.float64)
    reduced = PCA(n_components=min(50, *vectors.shape), random_state=0).fit_transform(vectors)
    direct = TSNE(2, init="pca", perplexity=(len(ids) - 1) / 3, random_state=0).fit_transform(reduced)
    np.testing.assert_allclose(projection.points, direct, atol=1e-5)
    assert projection.method == "tsne" and projection.points.shape == (len(ids), 2) and len(projection.explained) == 0
    with pytest.raises(ValueError, match="choose one of pca, tsne"):
        project_embeddings(index, ids, method="umap")


# ---- matching two indexes -------------------------------------------------------------------------------------------


def test_two_indexes_of_the_same_images_match_by_sha256(built):
    first, second = vitviz.open_index(built / "index"), vitviz.open_index(built / "other")
    matched = match_indexes(first, second)
    a = first.query("SELECT * FROM images WHERE error IS NULL ORDER BY image_id")
    b = second.query("SELECT * FROM images WHERE error IS NULL ORDER BY image_id")
    assert matched["image_id_a"].tolist() == a["image_id"].tolist() and len(matched) == 24
    by_path = b.set_index("path")
    assert matched["prediction_b"].tolist() == by_path.loc[a["path"], "prediction"].tolist()
    agree = (a["prediction"].to_numpy() == by_path.loc[a["path"], "prediction"].to_numpy()).tolist()
    assert matched["agree"].tolist() == agree and 0 < sum(agree) < 24  # the two models differ somewhere
    counts = agreement_counts(matched)
    right_a, right_b = a["correct"].to_numpy(bool), by_path.loc[a["path"], "correct"].to_numpy(bool)
    assert counts == {
        "shared": 24,
        "agree": sum(agree),
        "disagree": 24 - sum(agree),
        "labelled": 24,
        "a_right": int(right_a.sum()),
        "b_right": int(right_b.sum()),
        "both_right": int((right_a & right_b).sum()),
        "only_a_right": int((right_a & ~right_b).sum()),
        "only_b_right": int((~right_a & right_b).sum()),
        "both_wrong": int((~right_a & ~right_b).sum()),
    }
    differing = disagreements(matched)
    assert len(differing) == 24 - sum(agree) and not differing["agree"].any()
    confidence = differing[["probability_a", "probability_b"]].max(axis=1).to_numpy()
    assert (np.diff(confidence) <= 0).all()  # the most confident first


def test_copies_in_another_layout_match_and_indexes_sharing_nothing_are_refused_in_one_line(built):
    first = vitviz.open_index(built / "index")
    half = vitviz.open_index(built / "half")
    matched = match_indexes(first, half)  # other paths, other image ids: the same bytes
    assert len(matched) == 12 and (matched["path_a"] != matched["path_b"]).all()
    assert [p.split("/")[-1] for p in matched["path_b"]] == [p.replace("/", "-") for p in matched["path_a"]]
    with pytest.raises(NothingShared, match="share no image") as refused:
        match_indexes(first, vitviz.open_index(built / "foreign"))
    assert "\n" not in str(refused.value)


# ---- the page -------------------------------------------------------------------------------------------------------

MAP, EMBEDDING_METHOD = "dataset|embedding_map", "dataset|embedding_method"


def chart_traces(at) -> list:
    """The map's traces as drawn (plotly's binary arrays decoded)."""
    import plotly.io

    return list(plotly.io.from_json(at.get("plotly_chart")[0].proto.spec).data)


def test_the_map_offers_tsne_and_draws_the_selection_solid_and_ticked_rows_ringed(built):
    index = vitviz.open_index(built / "index")
    at = open_tab(dataset_app(built / "index"), "Embedding map")
    at.radio(key=EMBEDDING_METHOD).set_value("tsne")
    checked(at.run())
    captions = " ".join(c.value for c in at.caption)
    assert "by t-SNE" in captions
    layout_titles = at.get("plotly_chart")[0].proto.spec
    assert "t-SNE 1" in layout_titles
    readable = index.query("SELECT image_id FROM images WHERE error IS NULL ORDER BY image_id")["image_id"].tolist()
    lassoed = readable[:4]
    points = [{"x": 0.0, "y": 0.0, "curve_number": 0, "customdata": i} for i in lassoed]
    at.session_state[MAP] = {"selection": {"points": points, "box": [], "lasso": [[0]]}}
    checked(at.run())
    assert list(at.session_state[SELECTION].ids) == lassoed
    traces = chart_traces(at)  # in this same run, the lasso's images solid, the rest faded
    solid = sorted(int(t.customdata[i]) for t in traces for i in t.selectedpoints or [])
    assert solid == lassoed and all(t.unselected.marker.opacity < 1 for t in traces)
    # the selection's table below the map: its rows, and ticks there join the Table's, ringed on the map
    [rows] = [d.value for d in at.dataframe]
    assert rows["image_id"].tolist() == lassoed
    at.session_state[str(ticked(str(index.folder)))] = [lassoed[1]]
    checked(at.run())
    [ring] = [t for t in chart_traces(at) if t.name == "ticked"]
    assert list(ring.customdata) == [lassoed[1]]


def test_a_click_on_a_slice_bar_selects_its_images_and_two_columns_cross(built):
    index = vitviz.open_index(built / "index")
    at = open_tab(dataset_app(built / "index"), "Slices")
    at.selectbox(key="dataset|slice_by").set_value("label")
    at.selectbox(key="dataset|slice_by_2").set_value("prediction")
    checked(at.run())
    frame = at.dataframe[0].value
    assert list(frame.columns[:3]) == ["slice", "label", "prediction"]
    direct = index.query("SELECT label, prediction, count(*) AS n FROM images GROUP BY ALL ORDER BY 1, 2")
    assert frame["images"].tolist()[1:] == direct["n"].tolist()
    assert any("95 % interval" in m.value or "95% interval" in m.value for m in at.markdown)
    name = frame["slice"].iloc[1]
    label, predicted = name.split(" × ")
    at.session_state["dataset|slice_chart"] = {"selection": {"points": [{"customdata": [name, 0.5, 0.5]}]}}
    checked(at.run())
    expected = index.query(
        f"SELECT image_id FROM images WHERE label = '{label}' AND prediction = '{predicted}' ORDER BY image_id"
    )["image_id"].tolist()
    selection = at.session_state[SELECTION]
    assert (
        list(selection.ids) == expected and selection.title == f"the slice label = {label} and prediction = {predicted}"
    )
    assert any(b.label == "Open them in the Grid tab" for b in at.button)


COMPARE_FOLDER = "kept|dataset|compare_folder"


def test_the_compare_tab_counts_lists_the_disagreements_and_draws_both_maps(built):
    first, second = vitviz.open_index(built / "index"), vitviz.open_index(built / "other")
    matched = match_indexes(first, second)
    differing = disagreements(matched)
    at = open_tab(dataset_app(built / "index"), "Compare")
    assert any("Type the folder of a second index" in i.value for i in at.info)
    at.text_input(key=COMPARE_FOLDER).set_value(str(built / "other"))
    checked(at.run())
    counts = agreement_counts(matched)
    assert any(
        m.value.startswith(f"**24 images in both.** The predictions agree on {counts['agree']}") for m in at.markdown
    )
    [table] = [d.value for d in at.dataframe]
    assert table["image_id"].tolist() == differing["image_id_a"].tolist()
    assert table["B prediction"].tolist() == differing["prediction_b"].tolist()
    picker = at.selectbox(key="dataset|compare_image")
    assert picker.value == int(differing["image_id_a"].iloc[0])  # the most confident disagreement first
    captions = [image.proto.imgs[0].caption for image in at.get("image")]
    first_id, second_id = (int(differing[c].iloc[0]) for c in ("image_id_a", "image_id_b"))
    assert any("one scale for both indexes" in c for c in captions)  # the colour bar's
    assert any(c.startswith(f"image {first_id} of index:") for c in captions)
    assert any(c.startswith(f"image {second_id} of other:") for c in captions)
    # another image, another map: drawn without an error
    picker.set_value(int(differing["image_id_a"].iloc[-1]))
    at.selectbox(key="dataset|compare_map").set_value("readout")
    checked(at.run())
    assert not at.error


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("foreign", "Nothing to compare: the indexes"),
        ("/etc", "only inside the folders that the server's owner allows"),
        ("nowhere", "There is no folder"),
    ],
)
def test_the_compare_tab_refuses_a_bad_second_folder_in_one_line(built, typed, message):
    at = open_tab(dataset_app(built / "index"), "Compare")
    at.text_input(key=COMPARE_FOLDER).set_value(typed if typed.startswith("/") else str(built / typed))
    checked(at.run())
    [error] = at.error
    assert message in error.value and "\n" not in error.value
