"""Patch-feature views (vitviz.explain.feature_views): PCA colours against an SVD written here, the foreground
recipe on planted foregrounds, cosine correspondences, and part clusters on planted clusters."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitviz.explain.feature_views import feature_clusters, patch_similarity, pca_rgb, top_matches


def anisotropic(n, generator, d=6, shift=0.0):
    """(n, d) float64 features whose variances differ per dimension, so the principal components are distinct."""
    scales = torch.tensor([4.0, 2.5, 1.5, 0.8, 0.4, 0.2], dtype=torch.float64)[:d]
    return torch.randn(n, d, generator=generator, dtype=torch.float64) * scales + shift


def minmax(values):
    return (values - values.min(0).values) / (values.max(0).values - values.min(0).values)


def reference_pca(x, n):
    """Scores and explained-variance ratios from numpy's SVD of the centred float64 matrix, each component turned
    so that its entry of largest magnitude is positive (pca_rgb's documented sign rule)."""
    centred = x.numpy() - x.numpy().mean(0)
    _, s, vh = np.linalg.svd(centred, full_matrices=False)
    components = vh[:n] * np.sign(vh[:n][np.arange(n), np.abs(vh[:n]).argmax(axis=1)])[:, None]
    return torch.from_numpy(centred @ components.T), torch.from_numpy(s[:n] ** 2 / (s**2).sum())


def test_pca_rgb_matches_a_joint_svd():
    generator = torch.Generator().manual_seed(0)
    a, b = anisotropic(20, generator), anisotropic(13, generator, shift=1.0)
    result = pca_rgb([a, b])
    scores, ratio = reference_pca(torch.cat([a, b]), 3)
    assert [c.shape for c in result.colours] == [(20, 3), (13, 3)]
    assert result.foreground is None
    torch.testing.assert_close(torch.cat(result.colours), minmax(scores), rtol=0, atol=1e-10)
    torch.testing.assert_close(result.explained_variance, ratio)
    assert (result.explained_variance.diff() <= 0).all() and result.explained_variance.sum() <= 1


def test_pca_rgb_is_joint_over_images():
    generator = torch.Generator().manual_seed(1)
    a, b = anisotropic(20, generator), anisotropic(13, generator, shift=3.0)
    joint = pca_rgb([a, b])
    # the split between images does not matter, only the set of patches
    torch.testing.assert_close(torch.cat(joint.colours), pca_rgb([torch.cat([a, b])]).colours[0])
    # image a alone gets other colours: image b's patches moved the mean, the axes and the min-max range
    assert not torch.allclose(joint.colours[0], pca_rgb([a]).colours[0], atol=1e-3)


def test_pca_rgb_range_dtype_and_flip():
    generator = torch.Generator().manual_seed(2)
    features = [torch.randn(30, 16, generator=generator), torch.randn(7, 16, generator=generator)]
    plain, flipped = pca_rgb(features), pca_rgb(features, flip_first=True)
    for c, f in zip(plain.colours, flipped.colours):
        assert c.dtype == torch.float32 and c.min() >= 0 and c.max() <= 1
        torch.testing.assert_close(f[:, 0], 1 - c[:, 0])  # min-max mirrors
        torch.testing.assert_close(f[:, 1:], c[:, 1:])
    torch.testing.assert_close(flipped.explained_variance, plain.explained_variance)
    assert pca_rgb(features, n_components=5).explained_variance.shape == (5,)


def test_pca_rgb_sign_rule_and_flat_components():
    # every patch lies on the line t * u; u's largest entry (3) is positive, so colour rises with t
    t = torch.linspace(-1, 2, 9, dtype=torch.float64)
    u = torch.tensor([0.5, 3.0, -1.0], dtype=torch.float64)
    result = pca_rgb([t[:, None] * u])
    torch.testing.assert_close(result.colours[0][:, 0], (t + 1) / 3)
    # the data has rank 1: the other components are flat and sit at 0.5, not NaN or stretched noise
    torch.testing.assert_close(result.colours[0][:, 1:], torch.full((9, 2), 0.5, dtype=torch.float64))
    torch.testing.assert_close(result.explained_variance, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    # and -u (largest entry negative) is turned round: the same colours
    torch.testing.assert_close(pca_rgb([t[:, None] * -u]).colours[0][:, 0], 1 - (t + 1) / 3)


def test_pca_rgb_clip():
    x = torch.arange(101, dtype=torch.float64)[:, None] * torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    x[0, 0] = -1000.0  # an outlier that squeezes plain min-max
    colours = pca_rgb([x], n_components=1, clip=0.05).colours[0][:, 0]
    assert colours.min() == 0 and colours.max() == 1
    assert colours[50] == pytest.approx(0.5)  # the median lands mid-range once the tails are clipped


def planted_foreground(n, generator, d=8):
    """Foreground patches: +5 along dimension 0 with 3-D structure in dimensions 1-3; background: near 0."""
    mask = torch.rand(n, generator=generator) < 0.4
    x = 0.05 * torch.randn(n, d, generator=generator, dtype=torch.float64)
    structure = torch.randn(n, 3, generator=generator, dtype=torch.float64) * torch.tensor([1.0, 0.6, 0.3])
    x[mask, 0] += 5.0
    x[mask, 1:4] += structure[mask]
    return x, mask


def test_pca_rgb_foreground_recipe_finds_the_planted_foreground():
    generator = torch.Generator().manual_seed(3)
    (a, mask_a), (b, mask_b) = planted_foreground(40, generator), planted_foreground(25, generator)
    result = pca_rgb([a, b], foreground=0.5)
    assert torch.equal(result.foreground[0], mask_a) and torch.equal(result.foreground[1], mask_b)
    for colours, mask in zip(result.colours, result.foreground):
        assert (colours[~mask] == 0).all()
        assert colours[mask].min() >= 0 and colours[mask].max() <= 1
    # the colours come from a PCA of the foreground patches only
    foreground = torch.cat([a[mask_a], b[mask_b]])
    scores, ratio = reference_pca(foreground, 3)
    torch.testing.assert_close(result.explained_variance, ratio)
    torch.testing.assert_close(
        torch.cat(result.colours)[torch.cat(result.foreground)], minmax(scores), rtol=0, atol=1e-10
    )
    # flip_first picks the other side of the first component as foreground
    flipped = pca_rgb([a, b], foreground=0.5, flip_first=True)
    assert torch.equal(flipped.foreground[0], ~mask_a) and torch.equal(flipped.foreground[1], ~mask_b)
    _, background_ratio = reference_pca(torch.cat([a[~mask_a], b[~mask_b]]), 3)
    torch.testing.assert_close(flipped.explained_variance, background_ratio)


def test_pca_rgb_errors():
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(10, 4, generator=generator)
    with pytest.raises(ValueError, match="features is empty"):
        pca_rgb([])
    with pytest.raises(ValueError, match=r"features\[1\] has shape \(10, 3\); expected \(N, 4\)"):
        pca_rgb([x, x[:, :3]])
    with pytest.raises(ValueError, match=r"features\[0\] has shape \(10,\)"):
        pca_rgb([x[:, 0]])
    nan = x.clone()
    nan[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"features\[1\] holds NaN"):
        pca_rgb([x, nan])
    with pytest.raises(ValueError, match=r"n_components must be in \[1, 4\]"):
        pca_rgb([x], n_components=5)
    with pytest.raises(ValueError, match=r"n_components must be in \[1, 3\]"):
        pca_rgb([x[:3]], n_components=4)
    with pytest.raises(ValueError, match="lower the threshold or flip the first component"):
        pca_rgb([x], foreground=1.0)
    with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\]"):
        pca_rgb([x], foreground=1.5)
    with pytest.raises(ValueError, match="clip"):
        pca_rgb([x], clip=0.5)
    # one patch far out on the first component: the only foreground patch, fewer than 3 components need
    outlier = torch.cat([x, 100 * torch.ones(1, 4)])
    with pytest.raises(ValueError, match="only 1 foreground patches, fewer than n_components=3"):
        pca_rgb([outlier], foreground=0.9)


def test_patch_similarity_is_cosine():
    generator = torch.Generator().manual_seed(5)
    features = torch.randn(12, 7, generator=generator)
    features[4] = 0
    query = features[2]
    similarity = patch_similarity(query, features)
    expected = F.cosine_similarity(query[None], features, dim=1)
    torch.testing.assert_close(similarity, expected)
    assert similarity[4] == 0 and similarity[2] == pytest.approx(1.0)
    assert (patch_similarity(torch.zeros(7), features) == 0).all()
    assert patch_similarity(query.half(), features.half()).dtype == torch.float32
    with pytest.raises(ValueError, match=r"expected a \(D,\) query and \(M, D\) features"):
        patch_similarity(query[:5], features)
    with pytest.raises(ValueError, match=r"expected a \(D,\) query"):
        patch_similarity(features, features)


def test_top_matches_skips_the_clicked_neighbourhood():
    similarity = torch.arange(15.0)  # a 3 x 5 grid, row-major: patch 14 is the best
    assert top_matches(similarity, 3).tolist() == [14, 13, 12]
    # patch 13 (row 2, col 3) and its neighbours 7, 8, 9, 12, 14 are skipped
    assert top_matches(similarity, 3, (3, 5), exclude=13, radius=1).tolist() == [11, 10, 6]
    assert top_matches(similarity, 3, exclude=13).tolist() == [14, 12, 11]  # radius 0: the patch itself
    assert top_matches(similarity, 3, (3, 5), exclude=13).tolist() == [14, 12, 11]
    # asking for more than there are: every eligible patch, best first
    assert top_matches(similarity, 100, (3, 5), exclude=13, radius=1).tolist() == [11, 10, 6, 5, 4, 3, 2, 1, 0]
    assert top_matches(similarity, 5, (3, 5), exclude=7, radius=2).tolist() == []
    assert top_matches(torch.tensor([1.0, 2.0, 2.0, 0.0]), 2).tolist() == [1, 2]  # ties: lower index first


def test_top_matches_errors():
    similarity = torch.arange(15.0)
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_matches(similarity, 0)
    with pytest.raises(ValueError, match="grid 4x4 does not hold 15 patches"):
        top_matches(similarity, 1, (4, 4))
    with pytest.raises(ValueError, match=r"exclude must be a patch index in \[0, 14\]"):
        top_matches(similarity, 1, (3, 5), exclude=15)
    with pytest.raises(ValueError, match="radius > 0.*needs grid_size"):
        top_matches(similarity, 1, exclude=3, radius=1)
    with pytest.raises(ValueError, match="radius must be non-negative"):
        top_matches(similarity, 1, (3, 5), exclude=3, radius=-1)
    with pytest.raises(ValueError, match=r"similarity must be \(M,\)"):
        top_matches(similarity[None], 1)


def planted_clusters(generator):
    """Three directions in 16-D; 25, 16 and 10 patches around them, shuffled over two images of 30 and 21."""
    centres = torch.randn(3, 16, generator=generator)
    truth = torch.repeat_interleave(torch.arange(3), torch.tensor([25, 16, 10]))
    truth = truth[torch.randperm(51, generator=generator)]
    scale = torch.rand(51, 1, generator=generator) * 9 + 1  # norms from 1x to 10x: cosine ignores them
    x = scale * (centres[truth] + 0.05 * torch.randn(51, 16, generator=generator))
    return [x[:30], x[30:]], [truth[:30], truth[30:]]


def test_feature_clusters_recovers_planted_parts_across_images():
    features, truth = planted_clusters(torch.Generator().manual_seed(6))
    labels = feature_clusters(features, 3)
    assert [lab.shape for lab in labels] == [(30,), (21,)] and labels[0].dtype == torch.long
    found, planted = torch.cat(labels), torch.cat(truth)
    # the same planted cluster gets one label, in both images, and different clusters different labels
    mapping = {int(p): int(f) for p, f in zip(planted, found)}
    assert len(set(mapping.values())) == 3
    assert all(mapping[int(p)] == int(f) for p, f in zip(planted, found))
    # ordered: the largest planted cluster (planted 0, 25 patches) is label 0, then 16, then 10
    assert mapping == {0: 0, 1: 1, 2: 2}
    for again, first in zip(feature_clusters(features, 3, seed=0), labels):  # deterministic
        assert torch.equal(again, first)


def test_feature_clusters_breaks_ties_by_first_occurrence():
    generator = torch.Generator().manual_seed(7)
    centres = torch.eye(4)[:2] * 5
    truth = torch.tensor([1, 0] * 6)  # two clusters of 6: the first patch belongs to planted cluster 1
    x = centres[truth] + 0.05 * torch.randn(12, 4, generator=generator)
    (labels,) = feature_clusters([x], 2)
    assert torch.equal(labels, 1 - truth)


def test_feature_clusters_errors():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(8))
    with pytest.raises(ValueError, match=r"k must be in \[1, 5\]"):
        feature_clusters([x], 0)
    with pytest.raises(ValueError, match=r"k must be in \[1, 5\]"):
        feature_clusters([x], 6)
    with pytest.raises(ValueError, match="features is empty"):
        feature_clusters([], 2)
