"""vitviz.show(index, where=...): a grid of a dataset index's selection with its stored maps. The drawn values are
the index's own (DatasetIndex.maps) for every kind and opened image, on one colour scale; a click opens an image;
bad input is one line; the offline file holds every kind's frame and loads nothing from the network."""

import json
import re

import numpy as np
import pytest
import traitlets
from dataset_harness import tiny_index

import vitviz


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    _, folder = tiny_index(tmp_path_factory.mktemp("notebook_index"))
    return vitviz.open_index(folder)


def test_the_grid_draws_the_indexs_own_maps(index):
    everything = index.query("SELECT image_id FROM images ORDER BY image_id", limit=1000)["image_id"].tolist()
    view = vitviz.show(index, where="image_id % 2 = 0", limit=6)
    assert view.mode == "index" and view.image_ids == [i for i in everything if i % 2 == 0][:6]
    assert len(view.photos) == 6 and view.kinds[:3] == ["rollout", "readout", "readout:0"]
    for kind in ["rollout", "readout", "readout:1"]:
        view.kind = kind
        stored = index.maps(view.image_ids, kind)
        np.testing.assert_allclose(view.maps, stored, rtol=1e-6)
        assert view.frame["low"] == pytest.approx(stored.min()) and view.frame["high"] == pytest.approx(stored.max())
        view.set_state({"image": 4})  # what the comm does with a click on the fifth image
        np.testing.assert_allclose(view.values, stored[4].reshape(-1), rtol=1e-6)


def test_bad_selections_are_one_line_errors(index):
    with pytest.raises(ValueError, match="no image of the index matches"):
        vitviz.show(index, where="image_id < 0")
    with pytest.raises(ValueError, match="limit must be 1 to 100"):
        vitviz.show(index, where="true", limit=0)
    view = vitviz.show(index, where="true", limit=3)
    with pytest.raises(traitlets.TraitError, match=re.escape("image must be in [0, 2]")):
        view.image = 3
    with pytest.raises(traitlets.TraitError, match="kind must be one of rollout"):
        view.kind = "lens"


def test_the_offline_file_holds_every_kind(index, tmp_path):
    view = vitviz.show(index, where="true", limit=4)
    html = view.to_html(tmp_path / "grid.html").read_text()
    assert "http://" not in html and "https://" not in html
    state = json.loads(re.search(r'id="vitviz-state">(.*?)</script>', html, re.S).group(1))
    assert set(state["offline"]) == {f"index|{kind}" for kind in view.kinds}
    data, _ = view._repr_mimebundle_()
    assert "image/png" in data


def test_bad_settings_given_to_show_are_one_line_value_errors(index):
    for state, words in [
        (dict(kind="lens"), "kind must be one of rollout"),
        (dict(image=7), "image must be in [0, 2]"),
        (dict(image=True), "image must be in [0, 2]"),
        (dict(colormap="x"), "colormap must be one of"),
        (dict(limit="3"), "limit must be 1 to 100"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)) as caught:
            vitviz.show(index, where="true", **({"limit": 3} | state))
        assert "\n" not in str(caught.value) and not isinstance(caught.value, traitlets.TraitError)
