"""vitviz.dataset.views: what the Dataset page's views compute from an index, against the index's own tables, on a
tiny index of generated images (dataset_harness)."""

import numpy as np
import pandas as pd
import pytest
from dataset_harness import tiny_index

from vitviz.dataset import open_index
from vitviz.dataset.views import class_mean_map, confusion_counts, embedding_sample, per_image, quote


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    _, folder = tiny_index(tmp_path_factory.mktemp("dataset_views"), stored=["--shard-size", "8"], num_layers=2)
    return open_index(folder)


def readable(index) -> pd.DataFrame:
    return index.query("SELECT * FROM images WHERE error IS NULL ORDER BY image_id", limit=index.count)


def test_quote_doubles_an_apostrophe():
    assert quote("o'clock") == "'o''clock'"


def test_confusion_counts_count_each_labelled_image_once(index):
    images = readable(index)
    classes, matrix = confusion_counts(index)
    expected = pd.crosstab(images["label"], images["prediction"]).reindex(index=classes, columns=classes, fill_value=0)
    np.testing.assert_array_equal(matrix, expected.to_numpy())
    assert matrix.sum() == images["label"].notna().sum()


def test_a_class_mean_map_is_the_mean_of_its_images_maps(index):
    images = readable(index)
    ids = images.loc[images["label"] == "cat", "image_id"].to_numpy()
    average, count = class_mean_map(index, "cat", "rollout")
    assert count == len(ids) > 0
    np.testing.assert_allclose(average, index.maps(ids, "rollout").mean(axis=0), rtol=1e-5, atol=1e-6)


def test_the_embedding_sample_is_seeded_sorted_and_projected_in_its_order(index):
    projection, rows = embedding_sample(index, 5)
    again, same = embedding_sample(index, 5)
    assert len(rows) == 5 and rows["image_id"].is_monotonic_increasing
    assert set(rows["image_id"]) <= set(readable(index)["image_id"])
    np.testing.assert_array_equal(projection.image_ids, rows["image_id"].to_numpy())
    pd.testing.assert_frame_equal(rows, same)
    np.testing.assert_allclose(projection.points, again.points)


def test_per_image_reads_every_readable_images_heads_in_layer_and_head_order(index):
    values = per_image(index, "entropy")
    images = readable(index)
    layers, heads = index.layout["layers"], index.layout["heads"]
    assert values.shape == (len(images), layers, heads)
    first = int(images["image_id"].iloc[0])
    table = index.query(f"SELECT layer, head, entropy FROM heads WHERE image_id = {first} ORDER BY layer, head")
    np.testing.assert_allclose(values[0].reshape(-1), table["entropy"].to_numpy())
