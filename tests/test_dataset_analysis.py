"""vitviz.dataset.analysis against references: bootstrap intervals, settling, head clusters, the aligned
queries and keys, confusion matrices and per-class mean maps; and re-reading an index's photos."""

import numpy as np
import pytest
import sklearn.metrics

from vitviz.dataset.analysis import (
    align_keys,
    bootstrap_interval,
    cluster_heads,
    confusion_matrix,
    joint_query_key_embedding,
    mean_map,
    settling,
)
from vitviz.dataset.photos import photo_reader, source_location
from vitviz.dataset.sources import SourceError


def test_bootstrap_interval_holds_the_mean_and_shrinks_with_more_images():
    rng = np.random.default_rng(1)
    values = rng.normal(5.0, 2.0, (4000, 3, 2))  # (images, layers, heads)
    small, large = bootstrap_interval(values[:100]), bootstrap_interval(values)
    for interval in (small, large):
        assert interval.mean.shape == (3, 2)
        assert (interval.low <= interval.mean).all() and (interval.mean <= interval.high).all()
    np.testing.assert_allclose(large.mean, values.mean(0))
    assert ((large.high - large.low) < (small.high - small.low)).all()
    # a 95 % interval of a mean is about +-1.96 standard errors
    np.testing.assert_allclose(large.high - large.low, 2 * 1.96 * values.std(0) / np.sqrt(4000), rtol=0.15)
    assert bootstrap_interval(values, seed=3).low.tolist() == bootstrap_interval(values, seed=3).low.tolist()


def test_bootstrap_of_one_image_or_constant_values_is_a_point():
    interval = bootstrap_interval(np.full((50, 4), 2.5))
    assert (interval.low == 2.5).all() and (interval.high == 2.5).all()
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_interval(np.zeros((0, 4)))


def test_settling_uses_nested_samples_up_to_every_image():
    values = np.random.default_rng(0).normal(size=(1500, 4))
    steps = settling(values)
    assert [s.images for s in steps] == [128, 1000, 1500]
    np.testing.assert_allclose(steps[-1].mean, values.mean(0))
    assert [s.images for s in settling(values[:60])] == [60]


def test_head_clusters_find_separated_groups_and_order_each_layer():
    rng = np.random.default_rng(0)
    # three layers of four heads: heads 0 and 2 local (small distance), 1 and 3 global; the last layer all global
    distance = np.array([[10, 90, 11, 92], [12, 88, 9, 95], [91, 93, 89, 90]], float)
    entropy = distance / 30 + rng.normal(0, 0.01, distance.shape)
    clusters = cluster_heads(np.stack([distance, entropy], axis=-1), 2)
    local = distance < 50
    assert (clusters.labels[local] == 0).all() and (clusters.labels[~local] == 1).all()  # 0: the shallower cluster
    for layer in range(3):
        assert sorted(clusters.order[layer]) == [0, 1, 2, 3]  # a permutation of the layer's heads
        assert (np.diff(clusters.labels[layer, clusters.order[layer]]) >= 0).all()
    assert (cluster_heads(np.zeros((2, 3, 2)), 1).labels == 0).all()
    with pytest.raises(ValueError, match="clusters must be"):
        cluster_heads(np.zeros((2, 3, 2)), 7)


def softmax(scores):
    scores = scores - scores.max(axis=1, keepdims=True)
    return np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)


def test_aligning_keys_leaves_every_softmax_unchanged():
    rng = np.random.default_rng(0)
    queries, keys = rng.normal(3.0, 1.0, (40, 8)), rng.normal(-2.0, 4.0, (50, 8))
    aligned_q, aligned_k = align_keys(queries, keys)
    np.testing.assert_allclose(softmax(aligned_q @ aligned_k.T), softmax(queries @ keys.T), rtol=1e-10, atol=1e-12)
    scale = aligned_q[0, 0] / queries[0, 0]  # queries times c, keys over c: their centres c**2 apart by a factor
    np.testing.assert_allclose(aligned_q.mean(0) / aligned_k.mean(0), np.full(8, scale**2))
    q_norm, k_norm = np.linalg.norm(aligned_q, axis=1).mean(), np.linalg.norm(aligned_k, axis=1).mean()
    assert q_norm == pytest.approx(k_norm)


def test_joint_embedding_is_the_pca_of_the_aligned_points():
    rng = np.random.default_rng(0)
    queries, keys = rng.normal(size=(30, 6)), rng.normal(5, 1, size=(20, 6))
    joint = joint_query_key_embedding(queries, keys)
    assert joint.points.shape == (50, 2) and joint.queries == 30
    together = np.concatenate(align_keys(queries, keys))
    centred = together - together.mean(0)
    _, singular, _ = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(joint.explained, (singular**2 / (singular**2).sum())[:2], rtol=1e-8)
    np.testing.assert_allclose(np.abs(joint.points).sum(), np.abs(centred @ np.linalg.svd(centred)[2][:2].T).sum())


def test_confusion_matrix_equals_sklearn_and_takes_grouped_counts():
    labels = ["cat", "dog", "cat", "bird", "dog", "cat"]
    predictions = ["cat", "cat", "cat", "bird", "dog", "dog"]
    classes, matrix = confusion_matrix(labels, predictions)
    assert classes == ["bird", "cat", "dog"]
    np.testing.assert_array_equal(matrix, sklearn.metrics.confusion_matrix(labels, predictions, labels=classes))
    grouped = confusion_matrix(["cat", "cat", "dog"], ["cat", "dog", "cat"], counts=[2, 1, 1])[1]
    np.testing.assert_array_equal(grouped, [[2, 1], [1, 0]])


class FakeIndex:
    grid = (2, 3)

    def __init__(self, maps):
        self.stored = maps

    def maps(self, ids, kind):
        return self.stored[np.asarray(ids)]


def test_mean_map_reads_in_chunks_and_equals_the_mean():
    maps = np.random.default_rng(0).random((25, 2, 3)).astype(np.float32)
    ids = [3, 4, 7, 20, 21, 22, 24]
    np.testing.assert_allclose(mean_map(FakeIndex(maps), ids, chunk=2), maps[ids].mean(0), rtol=1e-6)


def test_photo_reader_reads_a_folder_and_refuses_what_it_cannot(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "a.png").write_bytes(b"bytes")
    manifest = {"source": {"description": f"folder {tmp_path}"}}
    assert source_location(manifest) == ("folder", tmp_path)
    read = photo_reader(manifest)
    assert read(0, "cat/a.png") == b"bytes"
    with pytest.raises(OSError, match="outside"):
        read(1, "../../etc/passwd")
    with pytest.raises(SourceError, match="outside the folders"):
        photo_reader(manifest, allowed=lambda path: False)
    with pytest.raises(SourceError, match="cannot be read back"):
        photo_reader({"source": {"description": "hub uoft-cs/cifar10 split test"}})
    with pytest.raises(SourceError, match="is gone"):
        photo_reader({"source": {"description": f"folder {tmp_path / 'missing'}"}})
