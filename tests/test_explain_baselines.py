"""Attention flow, RISE and Captum's baselines against their references (tests/baseline_references.py), their
options refused in one line, and each class-specific one answering the class it is asked about."""

import numpy as np
import pytest
import torch
from baseline_references import (
    patch_sums,
    reference_flow,
    reference_occlusion,
    reference_rise,
    reference_rise_masks,
)
from captum.attr import IntegratedGradients, KernelShap, NoiseTunnel, Saliency

from vitviz import ViT, ViTConfig
from vitviz.explain import method_maps
from vitviz.explain.attention_flow import attention_flow
from vitviz.explain.rise import draw_masks, rise_masks, rise_saliency

BASELINES = ["input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion", "kernel-shap", "rise"]
FAMILIES = {
    "cls 2x3": dict(image_size=(16, 24)),
    "registers 3x2": dict(image_size=(24, 16), num_register_tokens=2),
    "mean 2x4 no cls": dict(image_size=(16, 32), class_token=False, pooling="mean"),
    "map 3x3": dict(image_size=24, class_token=False, pooling="map"),
}


def tiny(**overrides) -> ViT:
    """3 blocks, random weights of std 0.3, float64 for tight comparisons."""
    torch.manual_seed(0)
    sizes = dict(image_size=(16, 24), patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64)
    model = ViT(ViTConfig(**(sizes | {"num_classes": 5} | overrides))).eval().double()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.3)
    return model


def image(model: ViT, seed: int = 1) -> torch.Tensor:
    height, width = model.config.image_hw
    return torch.randn(1, 3, height, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def logits(model):
    return lambda x: model(x).logits.float()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_attention_flow_equals_the_authors_networkx_flow(family):
    model = tiny(**FAMILIES[family])
    output = model(image(model), output_attentions=True)
    prefix = output.num_prefix_tokens
    for readout, start in (("cls" if prefix else "mean", 0), (output.readout, 1)):
        found = attention_flow(output.attentions, output.layout, readout=readout, start_layer=start)
        expected = reference_flow(output.attentions, prefix, readout, start_layer=start)
        np.testing.assert_allclose(found.reshape(1, -1).numpy(), expected, rtol=1e-5, atol=1e-7)
    by_name = method_maps(model, image(model), ["attention-flow"], head_fusion="max").maps["attention-flow"]
    expected = reference_flow(output.attentions, prefix, output.readout.detach(), fusion="max")
    np.testing.assert_allclose(by_name.reshape(1, -1).numpy(), expected, rtol=1e-5, atol=1e-7)


def test_attention_flow_refuses_a_graph_past_its_bound():
    model = tiny()
    output = model(image(model), output_attentions=True)
    edges = 3 * 7 * 7
    assert attention_flow(output.attentions, output.layout, flow_limit=edges).shape == (1, 2, 3)
    with pytest.raises(ValueError, match=f"would have {edges} edges .* more than flow_limit={edges - 1}") as raised:
        method_maps(model, image(model), ["attention-flow"], flow_limit=edges - 1)
    assert "\n" not in str(raised.value)


def test_rise_masks_equal_the_reference_class_and_its_saliency_too():
    generator = np.random.default_rng(0)
    grids = generator.random((6, 3, 3)) < 0.5
    for size in ((16, 24), (17, 23)):
        cell = np.ceil(np.array(size) / 3).astype(int)
        shifts = np.stack([generator.integers(0, cell[0], 6), generator.integers(0, cell[1], 6)], axis=1)
        found = rise_masks(torch.from_numpy(grids), torch.from_numpy(shifts), size)
        np.testing.assert_allclose(found.numpy(), reference_rise_masks(grids, shifts, size), rtol=1e-6, atol=1e-6)
    model = tiny()
    pixels = image(model)
    masks = draw_masks(40, 3, 0.4, (16, 24), seed=3)
    saliency = rise_saliency(model, pixels, masks, keep=0.4, batch=7)
    expected = reference_rise(model, pixels, masks.double().numpy(), p1=0.4)
    np.testing.assert_allclose(saliency.numpy(), expected, rtol=1e-5, atol=1e-7)
    by_name = method_maps(model, pixels, ["rise"], target=2, samples=40, cells=3, keep=0.4, seed=3)
    np.testing.assert_allclose(by_name.pixels["rise"].numpy(), expected[2], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(by_name.maps["rise"].numpy(), patch_sums(expected[2], (8, 8), mean=True), rtol=1e-5)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_occlusion_is_each_patch_s_logit_drop(family):
    model = tiny(**FAMILIES[family])
    pixels = image(model)
    found = method_maps(model, pixels, ["occlusion"], target=1)
    np.testing.assert_allclose(found.maps["occlusion"].numpy(), reference_occlusion(model, pixels, 1, (8, 8)), 1e-4)


def test_integrated_gradients_is_captum_s_and_complete():
    model = tiny()
    pixels = image(model)
    found = method_maps(model, pixels, ["integrated-gradients"], target=3, steps=64, batch=5)
    direct = IntegratedGradients(logits(model)).attribute(pixels, target=3, n_steps=64, internal_batch_size=5)
    expected = direct.sum(dim=1)[0].detach().numpy()
    np.testing.assert_allclose(found.pixels["integrated-gradients"].numpy(), expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(found.maps["integrated-gradients"].numpy(), patch_sums(expected, (8, 8)), 1e-4, 1e-6)
    with torch.no_grad():
        difference = float(model(pixels).logits[0, 3] - model(torch.zeros_like(pixels)).logits[0, 3])
    assert float(found.maps["integrated-gradients"].sum()) == pytest.approx(difference, rel=1e-3, abs=1e-4)


def test_input_x_gradient_and_smoothgrad_read_the_gradient():
    model = tiny()
    pixels = image(model)
    x = pixels.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(model(x).logits[0, 4], x)
    found = method_maps(model, pixels, ["input-x-gradient"], target=4)
    expected = (pixels * gradient).sum(dim=1)[0].numpy()
    np.testing.assert_allclose(found.pixels["input-x-gradient"].numpy(), expected, rtol=1e-4, atol=1e-6)
    # SmoothGrad with next to no noise is the gradient's magnitude; with noise it is Captum's, from the seed
    quiet = method_maps(model, pixels, ["smoothgrad"], target=4, noise=1e-9, samples=3)
    np.testing.assert_allclose(quiet.pixels["smoothgrad"].numpy(), gradient.abs().sum(dim=1)[0].numpy(), 1e-4, 1e-6)
    noisy = method_maps(model, pixels, ["smoothgrad"], target=4, samples=8, batch=3, seed=5)
    sigma = 0.15 * float(pixels.max() - pixels.min())
    with torch.random.fork_rng():
        torch.manual_seed(5)
        direct = NoiseTunnel(Saliency(logits(model))).attribute(
            pixels, nt_type="smoothgrad", nt_samples=8, nt_samples_batch_size=3, stdevs=sigma, target=4, abs=False
        )
    np.testing.assert_allclose(noisy.pixels["smoothgrad"].numpy(), direct.abs().sum(1)[0].numpy(), 1e-4, 1e-6)
    again = method_maps(model, pixels, ["smoothgrad"], target=4, samples=8, batch=3, seed=5)
    torch.testing.assert_close(again.maps["smoothgrad"], noisy.maps["smoothgrad"], rtol=0, atol=0)


def test_kernel_shap_is_captum_s_over_the_patches():
    model = tiny()
    pixels = image(model)
    found = method_maps(model, pixels, ["kernel-shap"], target=0, samples=100, seed=2)
    mask = (torch.arange(16)[:, None] // 8) * 3 + torch.arange(24)[None, :] // 8
    with torch.random.fork_rng():
        torch.manual_seed(2)
        direct = KernelShap(logits(model)).attribute(
            pixels, baselines=0.0, target=0, feature_mask=mask[None, None], n_samples=100, perturbations_per_eval=16
        )
    expected = direct[0, 0].numpy()[::8, ::8]  # one value per patch
    np.testing.assert_allclose(found.maps["kernel-shap"].numpy(), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("method", BASELINES)
def test_each_baseline_answers_the_class_asked(method):
    model = tiny()
    pixels = image(model)
    one = method_maps(model, pixels, [method], target=0, samples=64).maps[method]
    other = method_maps(model, pixels, [method], target=1, samples=64).maps[method]
    assert one.shape == other.shape == (2, 3)
    assert not torch.allclose(one, other)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(steps=0), "steps must be a whole number >= 1"),
        (dict(samples=-4), "samples must be a whole number >= 1"),
        (dict(noise=-0.1), r"noise must be a number in \(0, 10\]"),
        (dict(keep=0), r"keep must be a number in \(0, 1\]"),
        (dict(batch=True), "batch must be a whole number"),
        (dict(window=25), "occlusion window .* larger than the 16 x 24 input"),
        (dict(cells=17), "RISE's cells"),
        (dict(stepz=3), "unknown option 'stepz'"),
    ],
)
def test_a_bad_option_is_one_line(options, message):
    model = tiny()
    method = "rise" if "cells" in options else "occlusion"
    with pytest.raises(ValueError, match=message) as raised:
        method_maps(model, image(model), [method], **options)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("method", ["attention-flow", "attnlrp", "cp-lrp", *BASELINES])
def test_each_new_method_passes_the_cascading_randomisation_check(method):
    """Adebayo et al.'s check: with the blocks re-initialised the map changes (it explains the model, not only
    the image); at depth 0, the intact model again, it is the same map (the sampling methods are seeded)."""
    from vitviz.explain import cascading_randomization

    model = tiny(image_size=32)
    pixels = image(model)

    def explained(m, x, target):
        return method_maps(m, x, [method], target=target, samples=64).maps[method][None]

    check = cascading_randomization(model, pixels, 1, {method: explained})
    correlations = check.correlations[method]
    assert correlations[0] == pytest.approx(1.0)
    if method == "rise":
        # RISE's map is sum_i P(c | x M_i) M_i / (N p): where the tiny random model's probabilities hardly move under
        # the masks, the masks' own coverage (the same seeded masks in both runs) dominates it, and the check rightly
        # flags it as insensitive; the map still follows the weights, a little more with every block re-drawn
        assert method in check.insensitive
        assert correlations == sorted(correlations, reverse=True) and correlations[-1] < 1 - 1e-3
    else:
        assert method not in check.insensitive, correlations
