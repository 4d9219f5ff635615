"""The model-agnostic baselines every ViT explanation table carries, through Captum's own implementations:

    input-x-gradient      x * dS/dx (Shrikumar et al. 2016)                  Captum InputXGradient
    integrated-gradients  (x - x0) * the mean gradient on the path x0 -> x   Captum IntegratedGradients
    smoothgrad            the gradient averaged over noisy copies of x       Captum NoiseTunnel(Saliency)
    occlusion             the score's drop when a square is set to x0        Captum Occlusion
    kernel-shap           Shapley values of the patches, by weighted regression   Captum KernelShap

S is the target's logit (the head's output the class-specific maps explain) and x0 the baseline, the all-zero input:
zero in the model's normalised pixels, i.e. the mean colour of its training data. The gradient methods attribute
every pixel (``MethodOutput.pixels``, summed over the colour channels) and their map sums each patch's pixels, so
Integrated Gradients' patches add up to S(x) - S(x0) (completeness). Occlusion's squares are the patches by default
and KernelSHAP's features are the patches of the token layout, so their map is a value per patch (each patch's
pixels averaged). The options (``MapOptions``: steps, samples, noise, window, stride, batch, seed) and their defaults
are in docs/methods.md; every random draw comes from ``seed`` and leaves the global generator alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from vitviz.explain.common import traced  # pixels that ask for their gradient (Captum warns otherwise)
from vitviz.explain.method import MapInputs, Method, MethodOutput
from vitviz.explain.pixels import PixelCells, input_cells, per_patch

SMOOTHGRAD_SAMPLES = 32
KERNEL_SHAP_SAMPLES = 512


def score_function(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """What Captum attributes: pixels (B, 3, H, W) -> the head's logits (B, classes), at least fp32."""

    def scores(pixels: torch.Tensor) -> torch.Tensor:
        logits = model(pixels).logits
        if logits is None:
            raise ValueError("the model-agnostic baselines explain a class; this model is a backbone (no head)")
        return logits.float()

    return scores


@contextlib.contextmanager
def seeded(inputs: MapInputs) -> Iterator[None]:
    """The method's random numbers from ``options.seed``, the global generators restored afterwards."""
    devices = [inputs.pixels.device] if inputs.pixels.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(inputs.options.seed)
        yield


def _gradient_output(inputs: MapInputs, attribution: torch.Tensor, absolute: bool = False) -> MethodOutput:
    """Captum's (1, 3, H, W) attribution -> the pixel map (channels summed) and the per-patch sums."""
    attribution = attribution.detach().float()
    pixels = (attribution.abs() if absolute else attribution).sum(dim=1)
    return MethodOutput(per_patch(pixels, input_cells(inputs), "sum"), pixels=pixels)


def _patch_output(inputs: MapInputs, attribution: torch.Tensor, cells: PixelCells) -> MethodOutput:
    """A (1, 3, H, W) attribution that holds one value per square or feature -> its pixels and per-patch means."""
    pixels = attribution.detach().float().mean(dim=1)
    return MethodOutput(per_patch(pixels, cells, "mean"), pixels=pixels)


def input_x_gradient_map(inputs: MapInputs) -> MethodOutput:
    from captum.attr import InputXGradient

    with inputs.autocast():
        found = InputXGradient(score_function(inputs.model)).attribute(traced(inputs.pixels), target=inputs.target)
    return _gradient_output(inputs, found)


def integrated_gradients_map(inputs: MapInputs) -> MethodOutput:
    from captum.attr import IntegratedGradients

    options = inputs.options
    with inputs.autocast():
        found = IntegratedGradients(score_function(inputs.model)).attribute(
            traced(inputs.pixels),
            baselines=torch.zeros_like(inputs.pixels),
            target=inputs.target,
            n_steps=options.steps,
            internal_batch_size=options.batch,
        )
    return _gradient_output(inputs, found)


def smoothgrad_map(inputs: MapInputs) -> MethodOutput:
    """Smilkov et al.'s M^(x) = mean over n of dS/dx at x + N(0, sigma^2), sigma = noise * (max x - min x); the map
    is |M^| summed over the colour channels."""
    from captum.attr import NoiseTunnel, Saliency

    options, pixels = inputs.options, inputs.pixels
    sigma = float(options.noise * (pixels.max() - pixels.min()).clamp(min=1e-12))
    with seeded(inputs), inputs.autocast():
        found = NoiseTunnel(Saliency(score_function(inputs.model))).attribute(
            traced(pixels),
            nt_type="smoothgrad",
            nt_samples=options.samples or SMOOTHGRAD_SAMPLES,
            nt_samples_batch_size=options.batch,
            stdevs=sigma,
            target=inputs.target,
            abs=False,  # average the gradients themselves (the paper's M^), then take |.| per pixel
        )
    return _gradient_output(inputs, found, absolute=True)


def occlusion_window(inputs: MapInputs, cells: PixelCells) -> tuple[tuple[int, int], tuple[int, int]]:
    """The occluding square and its stride in pixels, (height, width) each: the patch by default."""
    options, (H, W) = inputs.options, tuple(inputs.pixels.shape[-2:])
    window = (options.window, options.window) if options.window is not None else cells.patch
    stride = (options.stride, options.stride) if options.stride is not None else window
    if window[0] > H or window[1] > W:
        raise ValueError(f"the occlusion window ({window[0]} x {window[1]} px) is larger than the {H} x {W} input")
    if stride[0] > H or stride[1] > W:
        raise ValueError(f"the occlusion stride ({stride[0]} px) is larger than the {H} x {W} input")
    return window, stride


def occlusion_map(inputs: MapInputs) -> MethodOutput:
    from captum.attr import Occlusion

    cells = input_cells(inputs)
    window, stride = occlusion_window(inputs, cells)
    channels = inputs.pixels.shape[1]
    with torch.no_grad(), inputs.autocast():
        found = Occlusion(score_function(inputs.model)).attribute(
            inputs.pixels,
            sliding_window_shapes=(channels, *window),
            strides=(channels, *stride),
            baselines=0.0,
            target=inputs.target,
            perturbations_per_eval=inputs.options.batch,
        )
    return _patch_output(inputs, found, cells)


def kernel_shap_map(inputs: MapInputs) -> MethodOutput:
    from captum.attr import KernelShap

    cells = input_cells(inputs)
    with seeded(inputs), torch.no_grad(), inputs.autocast():
        found = KernelShap(score_function(inputs.model)).attribute(
            inputs.pixels,
            baselines=0.0,
            target=inputs.target,
            feature_mask=cells.cells.to(inputs.pixels.device)[None, None],
            n_samples=inputs.options.samples or KERNEL_SHAP_SAMPLES,
            perturbations_per_eval=inputs.options.batch,
        )
    return _patch_output(inputs, found, cells)


_GRADIENT = "Bright: pixels (summed per patch) that raise the class's score"

INPUT_X_GRADIENT = Method(
    name="input-x-gradient",
    description="the input times the gradient of the class's logit, through Captum",
    paper="Shrikumar et al. 2016",
    compute=input_x_gradient_map,
    class_specific=True,
    cost="backward",
    cost_note="one backward pass to the pixels",
    caption=f"{_GRADIENT}, to first order: each pixel times its gradient.",
    windowed=None,  # it reads only the pixels and the logits
)

INTEGRATED_GRADIENTS = Method(
    name="integrated-gradients",
    description="the gradient integrated on the path from the mean-colour image, through Captum",
    paper="Sundararajan et al. 2017",
    compute=integrated_gradients_map,
    class_specific=True,
    cost="repeated passes",
    cost_note="32 forward and backward passes (steps)",
    caption=f"{_GRADIENT} against the mean-colour image; the patches add up to the score's difference.",
    windowed=None,
)

SMOOTHGRAD = Method(
    name="smoothgrad",
    description="the gradient averaged over noisy copies of the image, through Captum",
    paper="Smilkov et al. 2017",
    compute=smoothgrad_map,
    class_specific=True,
    cost="repeated passes",
    cost_note="32 forward and backward passes (samples)",
    caption="Bright: pixels (summed per patch) where the class's score is steep, averaged over noise.",
    windowed=None,
)

OCCLUSION = Method(
    name="occlusion",
    description="the class's logit drop when each patch is set to the mean colour, through Captum",
    paper="Zeiler & Fergus 2014",
    compute=occlusion_map,
    class_specific=True,
    cost="repeated passes",
    cost_note="one forward pass per patch (window)",
    caption="Bright: patches whose removal lowers the class's score most.",
    windowed=None,
)

KERNEL_SHAP = Method(
    name="kernel-shap",
    description="Shapley values of the patches by weighted regression, through Captum",
    paper="Lundberg & Lee 2017",
    compute=kernel_shap_map,
    class_specific=True,
    cost="repeated passes",
    cost_note="512 forward passes (samples)",
    caption="Bright: patches whose presence raises the class's score, averaged over every coalition.",
    windowed=None,
)
