"""A small random classifier saved as a vitviz checkpoint: the stand-in for a trained model in the
page, browser and command-line tests (none of which may download or train one)."""

from pathlib import Path

import torch

from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint


def tiny_checkpoint(path: Path, names=("cat", "dog", "bird")) -> Path:
    """2 blocks of 4 heads, 8-pixel patches on a 32 x 32 input (a 4 x 4 grid), one class per name.
    The weights are drawn large (std 0.3), so attention maps and predictions are far from uniform."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64,
                          num_classes=len(names)))  # fmt: skip
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    save_checkpoint(path, model, list(names), Preprocessing(resize=32, crop=32, mean=(0.5,) * 3, std=(0.25,) * 3))
    return path
