"""SaCo (Wu et al. 2024): the coefficient against adreamwu/SaCo's ``compute_SaCo`` loop written out, and on a model
whose score is a known sum of pixels, a map in the model's own order scores 1 and the reversed map -1."""

import math
from types import SimpleNamespace

import pytest
import torch

from vitviz.explain import saco, saco_coefficient

MEAN, STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


def reference_saco(s_G: list[float], pred_x_G: list[float]) -> float:
    """adreamwu/SaCo's compute_SaCo after its s(G_i) and pred(x, G_i) are known."""
    F, total_weight, K = 0.0, 0.0, len(s_G)
    for i in range(K - 1):
        for j in range(i + 1, K):
            weight = s_G[i] - s_G[j] if pred_x_G[i] >= pred_x_G[j] else -(s_G[i] - s_G[j])
            F += weight
            total_weight += abs(weight)
    return F / total_weight


def test_the_coefficient_is_the_reference_loop():
    generator = torch.Generator().manual_seed(0)
    for K in (2, 5, 10):
        salience = torch.rand(K, generator=generator).sort(descending=True).values
        drops = torch.randn(K, generator=generator)
        drops[1] = drops[0]  # a tie counts as in order, as the reference's >= does
        expected = reference_saco(salience.tolist(), drops.tolist())
        assert saco_coefficient(salience, drops) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert math.isnan(saco_coefficient(torch.ones(4), torch.randn(4)))  # no order to test
    with pytest.raises(ValueError, match="2 groups or more"):
        saco_coefficient(torch.ones(1), torch.ones(1))


class Weighted(torch.nn.Module):
    """Two classes: class 0's logit is a fixed weighted sum of the image's first channel, class 1's is 0."""

    def __init__(self, weights: torch.Tensor):
        super().__init__()
        self.weights = weights  # (H, W)

    def forward(self, pixels: torch.Tensor) -> SimpleNamespace:
        score = (pixels[:, 0] * self.weights).flatten(1).sum(1)
        return SimpleNamespace(logits=torch.stack([score, torch.zeros_like(score)], dim=1))


def test_a_map_in_the_model_s_order_scores_one_and_reversed_minus_one():
    # pixel k weighs k + 1 (small enough that the softmax does not saturate), so removing heavier pixels lowers
    # class 0 more; the map is at pixel resolution, so its groups are the pixels it ranks
    weights = (torch.arange(256, dtype=torch.float32) + 1).reshape(16, 16) / 40_000
    model = Weighted(weights)
    pixels = torch.ones(1, 3, 16, 16)  # 1 after normalising: removed pixels become -1, so each group lowers it
    honest = saco(model, pixels, weights, target=0, mean=MEAN, std=STD, groups=8)
    reversed_ = saco(model, pixels, -weights, target=0, mean=MEAN, std=STD, groups=8)
    assert honest == pytest.approx(1.0) and reversed_ == pytest.approx(-1.0)
    random = saco(model, pixels, torch.rand(4, 4, generator=torch.Generator().manual_seed(1)), 0, MEAN, STD)
    assert -1 < random < 1


def test_bad_groups_are_one_line():
    model = Weighted(torch.ones(8, 8))
    for groups in (1, 65, True, 2.5):
        with pytest.raises(ValueError, match="groups must be a whole number from 2 to the 64 pixels"):
            saco(model, torch.zeros(1, 3, 8, 8), torch.rand(2, 2), 0, MEAN, STD, groups=groups)
