"""The Dataset page's defects found by trying it as a new user would (issue 36, "the page's defects"), each with a
test that failed before its fix: patch search over other images only, the Heads tab's intervals, axes and extreme
images, the confusion matrix's square cells and its selection, the SAE wording, the union of both top-5s of an
edit, and a click on a Queries & keys point without Streamlit's warning."""

import json
import logging

import numpy as np
import pytest
import streamlit as st
from dataset_harness import checked, dataset_app, make_images, open_tab
from page_reading import fix_precision
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.dataset.command import main as index_command
from vitviz.dataset.search import normalised
from vitviz_dashboard.cache import budget


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A folder holding a tiny model, 24 generated images (and a broken one) and their index."""
    root = tmp_path_factory.mktemp("dataset_defects")
    model = tiny_checkpoint(root / "model.pt")
    images = make_images(root / "images")
    assert index_command([str(images), "--model", str(model), "--out", str(root / "index"), "--shard-size", "8"]) == 0
    return root


@pytest.fixture(autouse=True)
def page_settings(monkeypatch, built):
    st.cache_resource.clear()
    st.cache_data.clear()
    budget.STORE.clear()
    monkeypatch.setenv("VITVIZ_SAMPLES", "")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(built))
    fix_precision(monkeypatch)


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
