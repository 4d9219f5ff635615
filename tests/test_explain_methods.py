"""LeGrad, Transition Attention Maps, Grad-CAM, the logit lens and the sanity check: each against a reference
written out with loops from its paper's definition, on tiny random float64 models of several grids, prefix tokens
and poolings. Grad-CAM is compared with the pytorch-grad-cam package itself in tests/test_gradcam.py."""

from functools import partial

import numpy as np
import pytest
import torch
from baseline_references import patch_sums, reference_flow, reference_occlusion, reference_rise

from vitviz import ViT, ViTConfig
from vitviz.explain import (
    METHODS,
    TAM_STEPS,
    MapInputs,
    MapOptions,
    attention_gradients,
    attention_rollout,
    cascading_randomization,
    cls_attention,
    grad_cam,
    gradient_weighted_attention,
    gradient_weighted_rollout,
    integrated_attention_gradient,
    legrad,
    legrad_gradients,
    logit_lens,
    method_maps,
    norm1_gradients,
    spearman_correlation,
    token_logits,
    transition_attention_map,
)
from vitviz.explain.lrp import lrp_relevance
from vitviz.explain.rise import draw_masks

CONFIGS = {
    "cls 2x3": dict(image_size=(16, 24)),
    "registers 3x2": dict(image_size=(24, 16), num_register_tokens=2),
    "mean 2x4 no cls": dict(image_size=(16, 32), class_token=False, pooling="mean"),
    "map 3x3": dict(image_size=24, class_token=False, pooling="map"),
}


def tiny(seed=0, **overrides) -> ViT:
    """3 blocks, random weights of std 0.3 (so maps are far from uniform), in float64 for tight comparisons."""
    torch.manual_seed(seed)
    sizes = dict(
        image_size=(16, 24), patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64, num_classes=5
    )
    model = ViT(ViTConfig(**(sizes | overrides))).eval().double()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    return model


def images_for(model: ViT, batch=2, seed=1) -> torch.Tensor:
    height, width = model.config.image_hw
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def read_by_hand(model: ViT, tokens: torch.Tensor) -> torch.Tensor:
    """What the head makes of a block's output tokens (B, T, D), written out from the model's definition."""
    config, p = model.config, model.config.num_prefix_tokens
    x = model.norm(tokens)
    if model.head_dist is not None:  # DeiT: the mean of the [CLS] and distillation heads
        return (model.head(x[:, 0]) + model.head_dist(x[:, 1])) / 2
    if config.pooling == "cls":
        return model.head(x[:, 0])
    if config.pooling == "mean":
        return model.head(x[:, p:].mean(dim=1))
    return model.head(model.attn_pool(x[:, p:])[0])  # "map"


# --- LeGrad ----------------------------------------------------------------------------------------------------


def reference_legrad(model, images, target, start_layer=0):
    """Bousselham et al.: per block, s_l = the head on block l's tokens; mean over heads and rows of ReLU(ds_l/dA_l);
    the mean over blocks. One fresh forward pass per block, numpy loops over heads and rows."""
    p, grid, L = model.config.num_prefix_tokens, None, model.config.num_layers
    per_layer = []
    for layer in range(start_layer, L):
        output = model(images, output_attentions=True, output_hidden_states=True)
        grid = output.grid_size
        score = read_by_hand(model, output.hidden_states[layer])[:, target].sum()
        (gradient,) = torch.autograd.grad(score, output.attentions[layer])
        gradient = gradient.numpy()
        B, H, T, _ = gradient.shape
        E = np.zeros((B, T))
        for b in range(B):
            for h in range(H):
                for row in range(T):
                    E[b] += np.maximum(gradient[b, h, row], 0) / (H * T)
        per_layer.append(E[:, p:])
    return torch.tensor(np.mean(per_layer, axis=0)).reshape(-1, *grid)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("start_layer", [0, 2])
def test_legrad_matches_the_reference(config, start_layer):
    model = tiny(**CONFIGS[config])
    images = images_for(model)
    output, gradients = legrad_gradients(model, images, target=3)
    out = legrad(gradients, output.num_prefix_tokens, output.grid_size, start_layer=start_layer)
    assert out.shape == (2, *output.grid_size)
    torch.testing.assert_close(out, reference_legrad(model, images, 3, start_layer))


def test_legrad_last_block_is_the_models_own_gradient_and_only_read_rows_carry_it():
    model = tiny(num_register_tokens=2)
    images = images_for(model)
    output, gradients = legrad_gradients(model, images, target=1)
    _, model_gradients = attention_gradients(model, images, target=1)
    torch.testing.assert_close(gradients[-1], model_gradients[-1])  # the last block's s_L is the logit itself
    for gradient in gradients:  # [CLS] pooling: the head reads token 0 only, so every other row is 0
        assert gradient[:, :, 0].abs().sum() > 0 and not gradient[:, :, 1:].any()
    assert not torch.allclose(gradients[0], model_gradients[0])  # earlier blocks: their own lens score


def test_legrad_changes_with_the_target_and_batches_per_image():
    model = tiny()
    images = images_for(model)
    maps = [legrad(legrad_gradients(model, images, t)[1], grid_size=(2, 3)) for t in (0, 1)]
    assert not torch.allclose(maps[0], maps[1])
    _, batched = legrad_gradients(model, images, torch.tensor([0, 1]))
    both = legrad(batched, grid_size=(2, 3))
    torch.testing.assert_close(both[0], maps[0][0])
    torch.testing.assert_close(both[1], maps[1][1])


# --- Transition Attention Maps -----------------------------------------------------------------------------------


def reference_tam(model, images, target, start_layer, steps, rows="cls"):
    """Yuan et al.'s transition_attention_maps, written with numpy: the last block's head-mean [CLS] row, carried
    down with s <- s A_l + s; integrated gradient of the last block's attention from np.linspace(0, 1, steps)."""
    output = model(images, output_attentions=True)
    attentions = [a.detach().numpy().mean(axis=1) for a in output.attentions]  # (B, T, T) each
    total = 0
    for alpha in np.linspace(0, 1, steps):
        scaled = model(images * alpha, output_attentions=True)
        (gradient,) = torch.autograd.grad(scaled.logits[:, target].sum(), scaled.attentions[-1])
        total = total + gradient.numpy()
    integrated = np.maximum(total / steps, 0).mean(axis=1)  # (B, T, T)
    p = model.config.num_prefix_tokens
    pick = (lambda m: m[:, 0, :]) if rows == "cls" else (lambda m: m[:, p:, :].mean(axis=1))
    state, weight = pick(attentions[-1]), pick(integrated)  # (B, T) each
    for layer in reversed(range(start_layer, len(attentions) - 1)):
        state = np.einsum("bt,bts->bs", state, attentions[layer]) + state
    return torch.tensor((state * weight)[:, p:]).reshape(-1, *output.grid_size)


@pytest.mark.parametrize("config", ["cls 2x3", "registers 3x2", "mean 2x4 no cls"])
@pytest.mark.parametrize("start_layer", [0, 1, 2])
def test_transition_attention_map_matches_the_reference(config, start_layer):
    model = tiny(**CONFIGS[config])
    images = images_for(model)
    output, integrated = integrated_attention_gradient(model, images, target=2, steps=4)
    readout = model.config.pooling  # "cls" or "mean": these models' heads read one of the two by name
    out = transition_attention_map(
        [a.detach() for a in output.attentions],
        integrated,
        output.num_prefix_tokens,
        output.grid_size,
        readout=readout,
        start_layer=start_layer,
    )
    torch.testing.assert_close(out, reference_tam(model, images, 2, start_layer, steps=4, rows=readout))
    # the readout weights give what the string pooling gives
    by_readout = transition_attention_map(
        [a.detach() for a in output.attentions],
        integrated,
        output.num_prefix_tokens,
        output.grid_size,
        readout=output.readout.detach(),
        start_layer=start_layer,
    )
    torch.testing.assert_close(by_readout, out)


def test_integrated_gradient_returns_the_inputs_own_attentions_and_checks_steps():
    model = tiny()
    images = images_for(model)
    output, integrated = integrated_attention_gradient(model, images, target=0, steps=3)
    direct = model(images, output_attentions=True)
    torch.testing.assert_close(output.attentions[0], direct.attentions[0])
    assert integrated.shape == direct.attentions[-1].shape
    with pytest.raises(ValueError, match="steps must be at least 2"):
        integrated_attention_gradient(model, images, 0, steps=1)
    with pytest.raises(ValueError, match="must match the last block's attention"):
        transition_attention_map(direct.attentions, integrated[:, :2], grid_size=(2, 3))


# --- Grad-CAM ----------------------------------------------------------------------------------------------------


def test_grad_cam_known_answer():
    # 1 prefix token, 2 patches, 2 channels; gradients average to w = (1, -1) over the patches
    activations = torch.tensor([[[9.0, 9.0], [3.0, 1.0], [1.0, 2.0]]])
    gradients = torch.tensor([[[5.0, 5.0], [2.0, -3.0], [0.0, 1.0]]])
    out = grad_cam(activations, gradients, num_prefix_tokens=1, grid_size=(1, 2))
    torch.testing.assert_close(out, torch.tensor([[[2.0, 0.0]]]))  # 3 - 1 = 2; 1 - 2 = -1 -> ReLU -> 0
    with pytest.raises(ValueError, match="does not hold the 2 patch tokens"):
        grad_cam(activations, gradients, 1, (2, 2))


# --- the logit lens ----------------------------------------------------------------------------------------------


def token_by_hand(model, token):
    """One token (D,) read by the head as the only token it pools."""
    x = model.norm(token)
    if model.config.pooling == "map":
        x = model.attn_pool(x[None, None])[0][0]
    if model.head_dist is not None:
        return (model.head(x) + model.head_dist(x)) / 2
    return model.head(x)


LENS_CONFIGS = CONFIGS | {"deit 2x3": dict(distillation_token=True, distillation_head=True)}


@pytest.mark.parametrize("config", LENS_CONFIGS)
def test_logit_lens_matches_a_token_by_token_reading(config):
    model = tiny(**LENS_CONFIGS[config])
    images = images_for(model)
    with torch.no_grad():
        output = model(images, output_hidden_states=True)
        lens = logit_lens(model, output.hidden_states, 2, output.num_prefix_tokens, output.grid_size)
        p, (rows, cols) = output.num_prefix_tokens, output.grid_size
        assert lens.probability.shape == lens.votes.shape == (3, 2, rows, cols)
        for layer, hidden in enumerate(output.hidden_states):
            for b in range(2):
                for n in range(rows * cols):
                    probabilities = token_by_hand(model, hidden[b, p + n]).softmax(-1)
                    assert lens.probability[layer, b, n // cols, n % cols] == pytest.approx(float(probabilities[2]))
                    assert lens.votes[layer, b, n // cols, n % cols] == probabilities.argmax()
            torch.testing.assert_close(lens.readout_probability[layer], read_by_hand(model, hidden).softmax(-1)[:, 2])
    # the head reading the last block is the model itself
    torch.testing.assert_close(lens.readout_probability[-1], output.logits.softmax(-1)[:, 2])


def test_logit_lens_at_the_last_block_gives_the_models_own_answer():
    cls_model = tiny()
    images = images_for(cls_model)
    with torch.no_grad():
        output = cls_model(images, output_hidden_states=True)
        # the [CLS] token at the last block, read by the lens, is exactly what the model answers
        torch.testing.assert_close(token_logits(cls_model, output.hidden_states[-1][:, 0]), output.logits)
        mean_model = tiny(**CONFIGS["mean 2x4 no cls"])
        images = images_for(mean_model)
        output = mean_model(images, output_hidden_states=True)
        # mean pooling and a linear head: the model's logits are the mean of the patches' lens logits
        torch.testing.assert_close(token_logits(mean_model, output.hidden_states[-1]).mean(dim=1), output.logits)


def test_logit_lens_needs_a_head():
    backbone = tiny(num_classes=0)
    with torch.no_grad():
        hidden = backbone(images_for(backbone), output_hidden_states=True).hidden_states
    with pytest.raises(ValueError, match="backbone .num_classes=0."):
        logit_lens(backbone, hidden, 0, 1, (2, 3))
    with pytest.raises(ValueError, match="output_hidden_states=True"):
        logit_lens(tiny(), [], 0)


# --- start layers and targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("start_layer", [3, -1])
def test_new_maps_refuse_a_start_layer_outside_the_blocks(start_layer):
    model = tiny()
    images = images_for(model)
    output, gradients = legrad_gradients(model, images, 0)
    with pytest.raises(ValueError, match=r"start_layer must be in \[0, 2\] for a model with 3 blocks"):
        legrad(gradients, grid_size=(2, 3), start_layer=start_layer)
    with pytest.raises(ValueError, match=r"start_layer must be in \[0, 2\]"):
        transition_attention_map(output.attentions, gradients[-1], grid_size=(2, 3), start_layer=start_layer)


@pytest.mark.parametrize("method", ["legrad", "tam", "gradcam"])
def test_class_maps_refuse_bad_targets_and_backbones(method):
    compute = {
        "legrad": legrad_gradients,
        "gradcam": norm1_gradients,
        "tam": lambda m, x, t: integrated_attention_gradient(m, x, t, steps=2),
    }[method]
    model = tiny()
    with pytest.raises(ValueError, match=r"target must be one class or one per image, each in \[0, 4\]"):
        compute(model, images_for(model), 5)
    backbone = tiny(num_classes=0)
    with pytest.raises(ValueError, match="need a classification head"):
        compute(backbone, images_for(backbone), 0)


# --- the sanity check -------------------------------------------------------------------------------------------


def reference_spearman(a, b):
    """Average ranks by counting (rank = values below + (values equal + 1) / 2), then Pearson's r."""

    def ranks(x):
        return np.array([(x < v).sum() + ((x == v).sum() + 1) / 2 for v in x])

    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def test_spearman_correlation_matches_the_definition_with_ties():
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(0, 4, (3, 2, 5), generator=generator).double()  # many ties
    b = torch.randn(3, 2, 5, generator=generator, dtype=torch.float64)
    b[1] = a[1] * 2 + 1  # the same ranking
    out = spearman_correlation(a, b)
    for i in range(3):
        assert float(out[i]) == pytest.approx(reference_spearman(a[i].flatten().numpy(), b[i].flatten().numpy()))
    assert float(out[1]) == pytest.approx(1.0)
    assert float(spearman_correlation(a[:1], -a[:1])[0]) == pytest.approx(-1.0)
    assert torch.isnan(spearman_correlation(torch.ones(1, 4), torch.arange(4.0)[None]))[0]


def sanity_methods(grid):
    def rollout(model, pixels, target):
        with torch.no_grad():
            return attention_rollout(model(pixels, output_attentions=True).attentions, grid_size=grid)

    def relevance(model, pixels, target):
        output, gradients = attention_gradients(model, pixels, target)
        return gradient_weighted_attention([a.detach() for a in output.attentions], gradients, grid_size=grid)

    def fixed(model, pixels, target):  # ignores the model: an edge detector would do the same
        return torch.arange(float(grid[0] * grid[1])).reshape(1, *grid).expand(pixels.shape[0], *grid)

    return {"rollout": rollout, "relevance": relevance, "fixed": fixed}


def test_cascading_randomization_flags_a_map_that_ignores_the_model():
    model = tiny(image_size=32)  # a 4 x 4 grid: 16 patches to rank
    images = images_for(model)
    before = [param.clone() for param in model.parameters()]
    rng_state = torch.random.get_rng_state()
    check = cascading_randomization(model, images, target=1, methods=sanity_methods((4, 4)), seed=0)
    assert check.depths == [0, 1, 2, 3]
    for name, values in check.correlations.items():
        assert len(values) == 4 and values[0] == pytest.approx(1.0), name  # depth 0: the intact model
    assert check.correlations["fixed"] == pytest.approx([1.0] * 4)
    assert check.insensitive == ["fixed"]  # the check flags the map that ignores the model
    for name in ("rollout", "relevance"):  # randomised blocks change the maps that depend on them
        assert check.correlations[name][-1] < 0.5, (name, check.correlations[name])
    # the model is left as it was, the global random state too, and the same seed gives the same numbers
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(rng_state, torch.random.get_rng_state())
    again = cascading_randomization(model, images, target=1, methods=sanity_methods((4, 4)), seed=0)
    assert again.correlations == check.correlations


# --- every method by name: what the CLI, the benchmark and the dashboard call ------------------------------------


def inputs_for(model: ViT, pixels: torch.Tensor, target: int, **options) -> MapInputs:
    """What a method's compute receives, built here from one forward pass: float32 attentions and readout, the
    target logit's attention gradients and every block's output."""
    output = model(pixels, output_attentions=True, output_hidden_states=True)
    gradients = torch.autograd.grad(output.logits[0, target], output.attentions)
    return MapInputs(
        model=model,
        pixels=pixels,
        target=target,
        attentions=tuple(a.detach().float() for a in output.attentions),
        readout=output.readout.detach().float(),
        num_prefix_tokens=output.num_prefix_tokens,
        grid_size=output.grid_size,
        options=MapOptions(**options),
        attention_gradients=tuple(g.float() for g in gradients),
        hidden_states=tuple(h.detach() for h in output.hidden_states),
    )


def _captum(kind: str, model: ViT, pixels: torch.Tensor, inputs: MapInputs) -> torch.Tensor:
    """The gradient baselines by Captum itself, summed per 8 x 8 patch."""
    from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel, Saliency

    scores = lambda x: model(x).logits.float()  # noqa: E731
    x, target = pixels.clone().requires_grad_(True), inputs.target
    if kind == "input-x-gradient":
        found = InputXGradient(scores).attribute(x, target=target)
    elif kind == "integrated-gradients":
        found = IntegratedGradients(scores).attribute(x, target=target, n_steps=32)
    else:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            sigma = 0.15 * float(pixels.max() - pixels.min())
            tunnel = NoiseTunnel(Saliency(scores))
            found = tunnel.attribute(x, nt_type="smoothgrad", nt_samples=64, stdevs=sigma, target=target, abs=False)
        found = found.abs()
    return torch.from_numpy(patch_sums(found.sum(dim=1)[0].detach().double().numpy(), (8, 8)))[None]


def _rise(model: ViT, pixels: torch.Tensor, inputs: MapInputs) -> torch.Tensor:
    masks = draw_masks(64, 7, 0.5, tuple(pixels.shape[-2:]), seed=0).double().numpy()
    saliency = reference_rise(model, pixels, masks, p1=0.5)[inputs.target]
    return torch.from_numpy(patch_sums(saliency, (8, 8), mean=True))[None]


def _kernel_shap(model: ViT, pixels: torch.Tensor, inputs: MapInputs) -> torch.Tensor:
    from captum.attr import KernelShap

    rows, cols = model.config.grid_size
    mask = (torch.arange(rows * 8)[:, None] // 8) * cols + torch.arange(cols * 8)[None, :] // 8
    with torch.random.fork_rng():
        torch.manual_seed(0)
        found = KernelShap(lambda x: model(x).logits.float()).attribute(
            pixels, baselines=0.0, target=inputs.target, feature_mask=mask[None, None], n_samples=64
        )
    return found[:, 0, ::8, ::8].double()


BASELINE_REFERENCES = {
    "attention-flow": lambda model, pixels, inputs: torch.from_numpy(
        reference_flow(inputs.attentions, inputs.num_prefix_tokens, inputs.readout, start_layer=1, fusion="max")
    ).reshape(1, *model.config.grid_size),
    "occlusion": lambda model, pixels, inputs: torch.from_numpy(
        reference_occlusion(model, pixels, inputs.target, (8, 8))
    )[None],
    "rise": _rise,
    "kernel-shap": _kernel_shap,
    **{kind: partial(_captum, kind) for kind in ("input-x-gradient", "integrated-gradients", "smoothgrad")},
    # tests/test_explain_lrp.py holds lrp_relevance against LXT's rules
    **{
        rules: lambda model, pixels, inputs, rules=rules: torch.from_numpy(
            patch_sums(lrp_relevance(model, pixels, inputs.target, rules)[0].double().numpy(), (8, 8))
        )[None]
        for rules in ("attnlrp", "cp-lrp")
    },
}


def expected_map(name: str, model: ViT, pixels: torch.Tensor, inputs: MapInputs) -> torch.Tensor:
    """Each method's map from its paper's reference where this file has one, else from its own function (tested
    against a reference in test_explain.py), with the options of ``inputs`` spelled out."""
    target, layout, readout, pooling = inputs.target, inputs.layout, inputs.readout, model.config.pooling
    if name == "legrad":
        return reference_legrad(model, pixels, target, start_layer=1)
    if name == "tam" and pooling in ("cls", "mean"):
        return reference_tam(model, pixels, target, start_layer=1, steps=TAM_STEPS, rows=pooling)
    if name == "tam":
        integrated = integrated_attention_gradient(model, pixels, target, TAM_STEPS).gradient.float()
        return transition_attention_map(inputs.attentions, integrated, **layout, readout=readout, start_layer=1)
    if name == "gradcam":  # the function itself is compared with pytorch-grad-cam in test_gradcam.py
        _, activations, gradients = norm1_gradients(model, pixels, target)
        return grad_cam(activations, gradients, **layout)
    if name == "lens":
        return logit_lens(model, inputs.hidden_states, target, **layout).probability[-1]
    if name == "rollout":
        return attention_rollout(
            inputs.attentions, **layout, readout=readout, start_layer=1, head_fusion="max", discard_ratio=0.2
        )
    if name == "cls":
        return cls_attention(inputs.attentions, **layout, layer=-1)
    if name in BASELINE_REFERENCES:  # tests/test_explain_baselines.py holds each against its reference
        return BASELINE_REFERENCES[name](model, pixels, inputs)
    function = {"relevance": gradient_weighted_attention, "grad-rollout": gradient_weighted_rollout}[name]
    return function(inputs.attentions, inputs.attention_gradients, **layout, readout=readout)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(METHODS))
def test_each_registered_compute_gives_its_methods_map(config, name):
    model = tiny(**CONFIGS[config])
    pixels = images_for(model, batch=1)
    inputs = inputs_for(model, pixels, target=3, start_layer=1, head_fusion="max", discard_ratio=0.2, samples=64)
    if name == "cls" and not model.config.class_token:
        with pytest.raises(ValueError, match="no \\[CLS\\] token"):
            METHODS[name].compute(inputs)
        return
    result = METHODS[name].compute(inputs)
    expected = expected_map(name, model, pixels, inputs)
    assert result.map.shape == (1, *model.config.grid_size)
    torch.testing.assert_close(result.map.double(), expected.double(), rtol=1e-4, atol=1e-6, msg=name)
    assert (result.lens is not None) == (name == "lens")


def test_method_maps_shares_one_pass_and_gives_each_method_what_it_gives_alone():
    model = tiny()
    pixels = images_for(model, batch=1)
    names = list(METHODS)
    together = method_maps(model, pixels, names, start_layer=1)
    with torch.no_grad():
        assert together.target == int(model(pixels).logits[0].argmax())  # the top class by default
    for name in names:
        alone = method_maps(model, pixels, [name], start_layer=1)
        assert together.maps[name].dtype == torch.float32 and together.maps[name].shape == model.config.grid_size
        torch.testing.assert_close(together.maps[name], alone.maps[name], msg=name)
        assert (alone.lens is not None) == (name == "lens")
    torch.testing.assert_close(together.lens.probability[-1, 0], together.maps["lens"])
    other = method_maps(model, pixels, ["relevance"], target=(together.target + 1) % 5)
    assert not torch.allclose(other.maps["relevance"], together.maps["relevance"])  # the target reaches the maps


def test_method_maps_refuses_unknown_methods_bad_targets_batches_and_backbones():
    model = tiny()
    pixels = images_for(model, batch=1)
    with pytest.raises(ValueError, match="unknown method 'deeplift'; choose from rollout, cls"):
        method_maps(model, pixels, ["rollout", "deeplift"])
    with pytest.raises(ValueError, match=r"target must be in \[0, 4\]; got 5"):
        method_maps(model, pixels, ["relevance"], target=5)
    with pytest.raises(ValueError, match="explains one image"):
        method_maps(model, images_for(model, batch=2), ["rollout"])
    backbone = tiny(num_classes=0)
    with pytest.raises(ValueError, match="need a classification head"):
        method_maps(backbone, images_for(backbone, batch=1), ["legrad"])
    assert method_maps(backbone, images_for(backbone, batch=1), ["rollout"]).maps["rollout"].shape == (2, 3)
