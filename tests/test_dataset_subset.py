"""vitviz.dataset.subset.write_subindex: some images of an index (with block activations) written as an index of
their own that open_index reads with its checks; its rows of every table and array equal the parent's, its search
finds its own images, and bad requests get one line."""

import numpy as np
import pandas as pd
import pytest
from dataset_harness import INDEX, make_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main as index_main
from vitviz.dataset.subset import PARENT_ID, SubsetError, write_subindex

CHOSEN = [20, 3, 7, 8, 9, 15, 3, 24, 0, 11]  # across shards of 8, one twice, not in order, the broken image (24)


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    root = tmp_path_factory.mktemp("subset")
    model = tiny_checkpoint(root / "model.pt", num_layers=3)
    out = root / "index"
    assert index_main([str(make_images(root / "images")), "--model", str(model), "--out", str(out), *INDEX]) == 0
    return vitviz.open_index(out)


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.map(lambda v: list(v) if isinstance(v, np.ndarray | list) else None if pd.isna(v) else v)


def test_a_subindex_opens_and_its_rows_equal_the_parents(parent, tmp_path):
    out = write_subindex(parent, CHOSEN, tmp_path / "sub")
    sub = vitviz.open_index(out)
    chosen = sorted(set(CHOSEN))
    assert sub.count == len(chosen) and len(sub.shards) == 2  # 9 images in shards of 8
    images = sub.query("SELECT * FROM images ORDER BY image_id")
    assert images["image_id"].tolist() == list(range(len(chosen)))
    assert images[PARENT_ID].tolist() == chosen
    listed = ", ".join(map(str, chosen))
    original = parent.query(f"SELECT * FROM images WHERE image_id IN ({listed}) ORDER BY image_id")
    pd.testing.assert_frame_equal(
        comparable(images.drop(columns=["image_id", PARENT_ID])),
        comparable(original.drop(columns=["image_id"])),
    )
    heads = sub.query("SELECT * FROM heads ORDER BY image_id, layer, head")
    parents = parent.query(f"SELECT * FROM heads WHERE image_id IN ({listed}) ORDER BY image_id, layer, head")
    assert np.array_equal(np.asarray(chosen)[heads["image_id"]], parents["image_id"])
    pd.testing.assert_frame_equal(heads.drop(columns="image_id"), parents.drop(columns="image_id"))
    new = np.arange(len(chosen))
    for kind in ("rollout", "readout", "readout:1"):
        np.testing.assert_array_equal(sub.maps(new, kind), parent.maps(chosen, kind))
    np.testing.assert_array_equal(sub.features(new), parent.features(chosen))
    np.testing.assert_array_equal(sub.embeddings(new), parent.embeddings(chosen))
    for block in parent.activation_blocks:
        np.testing.assert_array_equal(sub.activations(new, block), parent.activations(chosen, block))
    assert sub.activation_blocks == parent.activation_blocks
    # its own search: an image's nearest is itself, among the sub-index's images only
    near = sub.nearest_images(2, k=3)
    assert near["image_id"].iloc[0] == 2 and near["image_id"].max() < len(chosen)
    assert sub.manifest["subset_of"]["folder"] == str(parent.folder)


@pytest.mark.parametrize(
    ("ids", "where", "message"),
    [
        ([], "new", "no images chosen"),
        ([0, 25], "new", r"image ids must be in \[0, 24\]"),
        ([1], "full", "exists and is not an empty folder"),
        ([1], "inside", "is inside the index it is taken from"),
    ],
)
def test_bad_requests_get_one_line(parent, tmp_path, ids, where, message):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    out = {"new": tmp_path / "new", "full": tmp_path / "full", "inside": parent.folder / "sub"}[where]
    with pytest.raises(SubsetError, match=message):
        write_subindex(parent, ids, out)
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    assert not (parent.folder / "sub").exists()
