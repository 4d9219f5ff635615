"""vitviz's Grad-CAM against the real pytorch-grad-cam package (``pytorch_grad_cam.GradCAM``, the grad-cam
distribution), run on the same tiny random ViT, layer and target class.

How the package is pointed at a ViT (its ``usage_examples/vit_example.py``): the target layer is the last block's
first LayerNorm (``blocks[-1].norm1``), and a ``reshape_transform`` drops the prefix tokens and lays the patch tokens
out as a channels-first feature map (B, D, rows, cols), so the token width plays the CNN's channels. Its model must
return the logits tensor, hence ``LogitsOnly``.

The package's conventions, against vitviz's:
- weights w_c = the mean over the grid of dy/dA_c, map = ReLU(sum_c w_c A_c): the same in both
  (``GradCAM.get_cam_weights``, ``BaseCAM.get_cam_image`` and the ``np.maximum`` in ``compute_cam_per_layer``);
- y is the sum over the batch of each image's target logit (``ClassifierOutputTarget``, one per image), as
  vitviz's ``norm1_gradients``; a single image's map does not depend on the others;
- the package then min-max scales each image's map, resizes it to the input's size with ``cv2.resize``
  (bilinear, half-pixel centres) and, after averaging over target layers, min-max scales again. vitviz returns
  the unscaled patch-grid map and leaves the picture to ``vitviz.render.overlays``: ``rescale`` then ``upsample``
  (the same bilinear resize). The package's second scaling only stretches the upsampled map by how far the interpolation
  falls short of the grid's extremes, so its picture is rescale -> upsample -> rescale of vitviz's map.

The map is compared twice: at the patch grid before any scaling or resize (the package's ``get_cam_image`` on the
activations and gradients its own hooks kept), in float64 to 1e-10; and the package's final picture, in float32.
"""

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from tiny_models import build_tiny_vit

from vitviz import ViT
from vitviz.explain import grad_cam, norm1_gradients
from vitviz.render.overlays import rescale, upsample

TARGET = 4


class LogitsOnly(torch.nn.Module):
    """The ViT as pytorch-grad-cam expects a classifier: images in, the logits tensor out."""

    def __init__(self, model: ViT):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images).logits


def patch_tokens_as_feature_map(model: ViT):
    """The reshape_transform: (B, T, D) tokens -> (B, D, rows, cols), the prefix tokens dropped."""
    prefix = model.config.num_prefix_tokens
    rows, cols = model.config.grid_size

    def reshape_transform(tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, prefix:].reshape(tokens.shape[0], rows, cols, tokens.shape[2]).permute(0, 3, 1, 2)

    return reshape_transform


def assert_matches_pytorch_grad_cam(model: ViT) -> None:
    model = model.double()
    height, width = model.config.image_hw
    images = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    output, activations, gradients = norm1_gradients(model, images, target=TARGET)
    assert all(param.grad is None for param in model.parameters())  # vitviz leaves no .grad on the weights
    ours = grad_cam(activations, gradients, output.num_prefix_tokens, output.grid_size)  # (B, rows, cols)
    assert ours.shape == (2, *model.config.grid_size) and ours.amax(dim=(1, 2)).min() > 0  # not all zero

    layer = model.blocks[-1].norm1
    cam = GradCAM(LogitsOnly(model), target_layers=[layer], reshape_transform=patch_tokens_as_feature_map(model))
    targets = [ClassifierOutputTarget(TARGET) for _ in images]
    try:
        picture = cam(input_tensor=images, targets=targets)  # (B, H, W), float32
        # the package's own activations and gradients, kept by its hooks during that call, through its own
        # weighting; the ReLU is compute_cam_per_layer's, before its scaling and resize
        kept = cam.activations_and_grads
        at_grid = cam.get_cam_image(images, layer, targets, kept.activations[0], kept.gradients[0].numpy())
    finally:
        cam.activations_and_grads.release()
    torch.testing.assert_close(ours, torch.from_numpy(np.maximum(at_grid, 0)), rtol=1e-10, atol=1e-10)

    assert picture.shape == (2, height, width)
    for image, patch_map in zip(picture, ours):
        expected = rescale(upsample(rescale(patch_map.float()), height, width))
        np.testing.assert_allclose(image, expected, rtol=0, atol=2e-6)


def test_grad_cam_matches_pytorch_grad_cam(tiny_vit):
    assert_matches_pytorch_grad_cam(tiny_vit)


@pytest.mark.parametrize("grid", [(2, 3), (3, 2)])
def test_grad_cam_of_a_one_block_model_on_either_grid_matches_pytorch_grad_cam(grid):
    # one block: nothing runs before the layer; rows and columns swapped: a transposed map would fail one of them
    assert_matches_pytorch_grad_cam(build_tiny_vit(num_layers=1, image_size=(8 * grid[0], 8 * grid[1])))
