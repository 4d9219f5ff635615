"""Explanation functions: known answers on hand-made tensors, references, invariants, traps: rollout, raw
maps, class-specific maps, anatomy, faithfulness."""

import math

import numpy as np
import pytest
import torch
from attention_references import random_attentions, reference_rollout
from tiny_models import build_tiny_vit

from vitviz.explain import (
    area_under_curve,
    attention_entropy,
    attention_gradients,
    attention_rollout,
    cls_attention,
    cls_attention_all,
    discard_weakest,
    faithfulness,
    gradient_weighted_attention,
    gradient_weighted_rollout,
    mean_attention_distance,
    patch_embedding_components,
    perturbation_curve,
    position_embedding_similarity,
    query_attention,
)

# --- rollout ---------------------------------------------------------------------------------------------------


def test_rollout_known_answer_two_layers():
    a = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])[None, None]  # (1, 1, 3, 3)
    # A + I, rows / 2: [[.75, .125, .125], [0, 1, 0], [0, 0, 1]]; squared, row 0 = [.5625, .21875, .21875]
    out = attention_rollout([a, a], num_prefix_tokens=1)
    torch.testing.assert_close(out, torch.tensor([[0.21875, 0.21875]]))


def test_rollout_normalises_each_row_by_its_own_sum():
    # The keepdim trap: max fusion gives rows with different sums (2.4, 2.4, 2.3 after + I).
    # Dividing by a.sum(-1) without keepdim would divide *columns* and give 0.3 / 2.3 for the last entry.
    h1 = torch.tensor([[0.6, 0.2, 0.2], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    h2 = torch.tensor([[0.2, 0.5, 0.3], [0.5, 0.4, 0.1], [0.2, 0.1, 0.7]])
    out = attention_rollout([torch.stack([h1, h2])[None]], head_fusion="max")
    torch.testing.assert_close(out, torch.tensor([[0.5 / 2.4, 0.3 / 2.4]]))


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("prefix", [1, 2, 5])
@pytest.mark.parametrize("start_layer", [0, 2])
def test_rollout_matches_the_reference(fusion, prefix, start_layer):
    attentions = random_attentions(layers=4, prefix=prefix, grid=(2, 3))
    out = attention_rollout(attentions, prefix, (2, 3), start_layer=start_layer, head_fusion=fusion)
    assert out.shape == (2, 2, 3)
    expected = reference_rollout(attentions, fusion, start_layer, prefix).float().reshape(2, 2, 3)
    torch.testing.assert_close(out, expected)


def test_rollout_without_a_cls_token_averages_patch_queries():
    attentions = random_attentions(prefix=0, grid=(3, 2))
    out = attention_rollout(attentions, num_prefix_tokens=0, grid_size=(3, 2), readout="mean")
    rows = []
    for b in range(2):
        rollout = np.eye(6)
        for a in attentions:
            fused = a[b].double().numpy().mean(0) + np.eye(6)
            rollout = (fused / fused.sum(1, keepdims=True)) @ rollout
        rows.append(rollout.mean(0))
    torch.testing.assert_close(out, torch.tensor(np.array(rows)).float().reshape(2, 3, 2))
    with pytest.raises(ValueError, match="needs a \\[CLS\\] token"):
        attention_rollout(attentions, num_prefix_tokens=0)


def test_discard_never_touches_prefix_tokens():
    # prefix weights are the smallest in the matrix; a discard that ignored prefixes would zero them first
    T, prefix = 5, 2
    fused = torch.arange(1, T * T + 1, dtype=torch.float32).reshape(1, T, T) / 100
    fused[:, :prefix, :] = 0.001
    fused[:, :, :prefix] = 0.001
    out = discard_weakest(fused, discard_ratio=0.34, num_prefix_tokens=prefix)
    torch.testing.assert_close(out[:, :prefix], fused[:, :prefix])
    torch.testing.assert_close(out[:, :, :prefix], fused[:, :, :prefix])
    patches = out[0, prefix:, prefix:].flatten()
    original = fused[0, prefix:, prefix:].flatten()
    assert (patches == 0).sum() == 3  # int(9 * 0.34) weakest of the 3 x 3 patch block
    assert torch.equal(patches == 0, original <= original.sort().values[2])


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.9])
def test_discard_zeroes_exactly_the_weakest_like_topk(ratio):
    # the reference: topk's k smallest patch-to-patch weights of each image, set to zero
    fused = torch.rand(3, 1 + 30, 1 + 30, generator=torch.Generator().manual_seed(1))
    fused[1, 5:9, 5:9] = 0.25  # ties straddling the threshold
    many_ties = torch.rand(30, 30, generator=torch.Generator().manual_seed(2)).round(decimals=1) + 0.05
    fused[2, 1:, 1:] = many_ties  # ten distinct values, none zero
    out = discard_weakest(fused, ratio, num_prefix_tokens=1)
    k = int(900 * ratio)
    for b in range(3):
        flat = fused[b, 1:, 1:].flatten()
        expected = flat.clone()
        expected[flat.topk(k, largest=False).indices] = 0.0
        kept = out[b, 1:, 1:].flatten()
        assert int((kept == 0).sum()) == k  # exactly k weights zeroed
        # the same multiset of survivors (which of several equal weights goes is not specified)
        torch.testing.assert_close(kept.sort().values, expected.sort().values, rtol=0, atol=0)
        assert bool((kept[kept > 0] >= flat.kthvalue(k).values).all())  # none weaker than a discarded one
    torch.testing.assert_close(out[:, 0], fused[:, 0])  # [CLS] row and column untouched
    torch.testing.assert_close(out[:, :, 0], fused[:, :, 0])


def test_discard_ratio_changes_rollout_and_is_validated():
    attentions = random_attentions()
    assert not torch.allclose(attention_rollout(attentions, discard_ratio=0.5), attention_rollout(attentions))
    with pytest.raises(ValueError, match="discard_ratio must be in"):
        attention_rollout(attentions, discard_ratio=1.0)


# --- raw maps --------------------------------------------------------------------------------------------------


def test_cls_and_query_maps_index_a_non_square_grid_with_prefixes():
    prefix, grid = 2, (2, 3)
    T = prefix + 6
    attention = torch.zeros(1, 2, T, T)
    for q in range(T):
        for k in range(T):
            attention[0, 0, q, k] = 100 * q + k
            attention[0, 1, q, k] = -(100 * q + k)
    maps = [attention, attention * 2]
    # patch (1, 2) is token 2 + 1 * 3 + 2 = 7; its row over the patches holds keys 2..7
    out = query_attention(maps, layer=1, query=(1, 2), head=0, num_prefix_tokens=prefix, grid_size=grid)
    torch.testing.assert_close(out, 2 * torch.tensor([[[702.0, 703, 704], [705, 706, 707]]]))
    cls = cls_attention(maps, layer=0, head=1, num_prefix_tokens=prefix, grid_size=grid)
    torch.testing.assert_close(cls, -torch.tensor([[[2.0, 3, 4], [5, 6, 7]]]))
    fused = cls_attention(maps, layer=0, head="mean", num_prefix_tokens=prefix, grid_size=grid)
    torch.testing.assert_close(fused, torch.zeros(1, 2, 3))
    everything = cls_attention_all(maps, num_prefix_tokens=prefix, grid_size=grid)
    assert everything.shape == (1, 2, 2, 2, 3)
    torch.testing.assert_close(everything[0, 0, 1], cls[0])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(layer=5, query=0), "layer must be in"),
        (dict(layer=0, query=(2, 0)), "outside the 2x3 grid"),
        (dict(layer=0, query=0, head=9), "head must be in"),
        (dict(layer=0, query=0, head="median"), "head_fusion must be one of 'mean', 'max', 'min'"),
    ],
)
def test_raw_map_arguments_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        query_attention(random_attentions(), num_prefix_tokens=1, grid_size=(2, 3), **kwargs)


def test_a_wrong_grid_is_refused_not_reshaped():
    with pytest.raises(ValueError, match="grid 3x3 has 9 patches, but T - num_prefix_tokens = 6"):
        attention_rollout(random_attentions(), grid_size=(3, 3))


# --- class-specific --------------------------------------------------------------------------------------------


def test_gradient_weighted_attention_known_answer():
    a = torch.tensor([[[[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.1, 0.1, 0.8]]]])
    g = torch.tensor([[[[1.0, -2.0, 3.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]]])
    # R = I + (g * a)+ @ I; row 0 of (g * a)+ = [0.5, 0, 0.6]; over the patches: [0, 0.6]
    out = gradient_weighted_attention([a], [g])
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.6]]))


def test_gradient_weighted_attention_matches_the_reference_and_pairs_layers():
    attentions = random_attentions(layers=3, prefix=1)
    gradients = [torch.randn_like(a) for a in attentions]
    out = gradient_weighted_attention(attentions, gradients, grid_size=(2, 3))
    for b in range(2):
        relevance = np.eye(7)
        for a, g in zip(attentions, gradients):
            fused = np.maximum(g[b].double().numpy() * a[b].double().numpy(), 0).mean(0)
            relevance = relevance + fused @ relevance
        torch.testing.assert_close(out[b].flatten(), torch.tensor(relevance[0, 1:]).float())
    # pairing each gradient with another block's attention gives another answer
    shifted = gradient_weighted_attention(attentions, gradients[1:] + gradients[:1], grid_size=(2, 3))
    assert not torch.allclose(out, shifted)


def test_attention_gradients_belong_to_their_own_block():
    model = build_tiny_vit("non-square")
    images = torch.randn(1, 3, 16, 24)
    output, gradients = attention_gradients(model, images, target=3)
    for layer in range(3):  # each block's gradient, recomputed alone from a fresh forward
        fresh = model(images, output_attentions=True)
        (expected,) = torch.autograd.grad(fresh.logits[0, 3], fresh.attentions[layer])
        torch.testing.assert_close(gradients[layer], expected)
    assert not torch.allclose(gradients[0], gradients[2])


def test_class_specific_maps_change_with_the_target_and_support_batches():
    model = build_tiny_vit("non-square")
    images = torch.randn(2, 3, 16, 24)
    maps = {}
    for target in (0, 1):
        output, gradients = attention_gradients(model, images, target)
        maps[target] = gradient_weighted_attention(output.attentions, gradients, grid_size=output.grid_size)
    assert maps[0].shape == (2, 2, 3) and not torch.allclose(maps[0], maps[1])
    # per-image targets in one batch equal one image at a time
    output, gradients = attention_gradients(model, images, torch.tensor([0, 1]))
    batched = gradient_weighted_rollout(output.attentions, gradients, grid_size=output.grid_size)
    for b, target in enumerate((0, 1)):
        single_out, single_grads = attention_gradients(model, images[b : b + 1], target)
        single = gradient_weighted_rollout(single_out.attentions, single_grads, grid_size=single_out.grid_size)
        torch.testing.assert_close(batched[b], single[0])
    with pytest.raises(ValueError, match="target must be one class or one per image"):
        attention_gradients(model, images, 7)


def test_gradient_weighted_rollout_rows_are_a_rollout():
    attentions = random_attentions(prefix=2)
    gradients = [torch.rand_like(a) for a in attentions]  # positive, so (g * a)+ = g * a
    out = gradient_weighted_rollout(attentions, gradients, num_prefix_tokens=2)
    fused_as_attention = [(g * a).mean(1, keepdim=True) for a, g in zip(attentions, gradients)]
    torch.testing.assert_close(out, attention_rollout(fused_as_attention, num_prefix_tokens=2))


# --- anatomy ---------------------------------------------------------------------------------------------------


def brute_force_mean_distance(grid, patch_size):
    positions = [(r, c) for r in range(grid[0]) for c in range(grid[1])]
    total = sum(math.dist(p, q) for p in positions for q in positions)
    return patch_size * total / len(positions) ** 2


def test_mean_distance_known_answers():
    grid, prefix, patch = (2, 3), 1, 16
    T = prefix + 6
    self_only = torch.eye(T).expand(1, 2, T, T).clone()
    uniform = torch.full((1, 2, T, T), 1.0 / T)
    half_on_cls = (torch.eye(T) * 0.5).expand(1, 2, T, T).clone()
    half_on_cls[..., 0] += 0.5  # half to [CLS], half to itself: renormalised over patches, all on itself
    out = mean_attention_distance([self_only, uniform, half_on_cls], grid, patch, prefix)
    assert out.shape == (1, 3, 2)
    torch.testing.assert_close(out[0, 0], torch.zeros(2), atol=1e-9, rtol=0)
    expected = brute_force_mean_distance(grid, patch)
    torch.testing.assert_close(out[0, 1], torch.full((2,), expected))
    torch.testing.assert_close(out[0, 2], torch.zeros(2), atol=1e-9, rtol=0)


def test_entropy_known_answers():
    T = 6
    one_hot = torch.eye(T).expand(1, 3, T, T)
    uniform = torch.full((1, 3, T, T), 1 / T)
    out = attention_entropy([one_hot, uniform])
    torch.testing.assert_close(out[0, 0], torch.zeros(3))
    torch.testing.assert_close(out[0, 1], torch.full((3,), math.log(T)))


def test_position_embedding_similarity():
    grid = (2, 3)
    orthogonal = torch.cat([torch.randn(1, 1, 6), torch.eye(6)[None]], dim=1)  # [CLS] then one-hot patches
    similarity = position_embedding_similarity(orthogonal, grid, num_prefix_tokens=1)
    assert similarity.shape == (2, 3, 2, 3)
    torch.testing.assert_close(similarity.reshape(6, 6), torch.eye(6))
    model = build_tiny_vit("non-square")
    similarity = position_embedding_similarity(model.pos_embed, model.config.grid_size)
    torch.testing.assert_close(torch.diagonal(similarity.reshape(6, 6)), torch.ones(6))


def test_patch_embedding_components_find_the_filter_subspace():
    generator = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(48, 2, generator=generator)).Q.T  # 2 orthonormal 3x4x4 filters
    weight = (torch.randn(64, 2, generator=generator) @ basis).reshape(64, 3, 4, 4)
    components, explained = patch_embedding_components(weight, count=5)
    assert components.shape == (5, 3, 4, 4)
    assert explained[:2].sum() > 0.999
    flat = components.reshape(5, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(5), atol=1e-5, rtol=0)


# --- faithfulness ----------------------------------------------------------------------------------------------


class PatchDetector(torch.nn.Module):
    """A toy classifier whose class-1 logit is the brightness of the top-left 8 x 8 patch."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, pixel_values):
        self.calls += 1
        score = pixel_values[:, :, :8, :8].mean(dim=(1, 2, 3)) * 10
        return type("Output", (), {"logits": torch.stack([torch.zeros_like(score), score], dim=1)})()


@pytest.mark.parametrize("baseline", ["mean", "blur"])
def test_faithfulness_rewards_the_right_map_in_one_batch_per_curve(baseline):
    model = PatchDetector()
    image = torch.zeros(1, 3, 16, 32)
    image[:, :, :8, :8] = 1.0  # the evidence
    good = torch.zeros(2, 4)
    good[0, 0] = 1.0
    result = faithfulness(model, image, good, target=1, baseline=baseline)
    assert model.calls == 2
    assert result["most_first"].shape == (11,)
    assert result["most_first"][0] > 0.99 and result["most_first"][1] < result["most_first"][0]
    assert result["auc_most_first"] < result["auc_least_first"]
    bad = 1.0 - good  # the evidence ranked last
    flipped = faithfulness(model, image, bad, target=1, baseline=baseline)
    assert flipped["auc_most_first"] > result["auc_most_first"]


def test_faithfulness_runs_its_passes_in_the_precision_asked():
    seen = []

    class Recorder(PatchDetector):
        def forward(self, pixel_values):
            seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
            return super().forward(pixel_values)

    image, relevance = torch.rand(1, 3, 16, 32), torch.rand(2, 4)
    faithfulness(Recorder(), image, relevance, target=1)
    assert seen == [False, False]
    faithfulness(Recorder(), image, relevance, target=1, precision="bf16")
    assert seen[2:] == [True, True]


def test_perturbation_curve_replaces_exact_fractions():
    class Brightness(torch.nn.Module):
        def forward(self, pixel_values):
            mean = pixel_values.mean(dim=(1, 2, 3))
            return type("Output", (), {"logits": torch.stack([mean, -mean], 1) * 0})()

    image = torch.ones(1, 3, 8, 20)
    relevance = torch.arange(10.0).reshape(2, 5)
    curve = perturbation_curve(Brightness(), image, relevance, target=0, steps=10)
    torch.testing.assert_close(curve, torch.full((11,), 0.5))  # constant model: flat curve
    assert area_under_curve(torch.linspace(0, 1, 11)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="does not tile"):
        perturbation_curve(Brightness(), image, torch.ones(3, 5), target=0)
