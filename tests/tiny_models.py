"""Small random models saved as vitviz checkpoints: the stand-ins for trained models in the page, browser
and command-line tests (none of which may download or train one)."""

from pathlib import Path

import torch

from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint


def tiny_checkpoint(path: Path, names=("cat", "dog", "bird"), **config) -> Path:
    """2 blocks of 4 heads, 8-pixel patches on a 32 x 32 input (a 4 x 4 grid), one class per name (no
    names: a backbone). Any other ViTConfig field can be given: registers, pooling="map"...
    The weights are drawn large (std 0.3), so attention maps and predictions are far from uniform."""
    torch.manual_seed(0)
    sizes = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64)
    model = ViT(ViTConfig(**(sizes | config), num_classes=len(names)))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    side = (
        model.config.image_hw[0] if model.config.image_hw[0] == model.config.image_hw[1] else 32
    )  # the input it was built for
    save_checkpoint(path, model, list(names), Preprocessing(resize=side, crop=side, mean=(0.5,) * 3, std=(0.25,) * 3))
    return path


TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64, num_classes=5)


def perturbed_vit(noise: float = 0.3, **overrides) -> ViT:
    """A 3-block, 4-head ViT on 32 x 32 inputs (a 4 x 4 grid, 5 classes; any ViTConfig field can be overridden) whose
    every weight is moved off its initial value by Gaussian noise of this size, so every part matters: LayerScale,
    the zero-initialised head, the biases."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=noise)
    return model
