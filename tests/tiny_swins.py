"""Tiny random Swin and Swin v2 models built with the sources' own classes (transformers and timm), every weight
moved off its initial value, converted to vitviz's Swin: for the maps' and the commands' tests (test_swin_maps.py,
test_swin_commands.py). Three stages of 2-pixel patches in 4 x 4 windows: two merges, shifted blocks, and on a
34 x 26 input (transformers) or a 40 x 24 one (timm) grids that are no multiple of the window (padded slots)."""

from __future__ import annotations

from pathlib import Path

import timm
import torch
import transformers as hf

import vitviz
from vitviz.model import Swin

FAMILIES = {
    "swin": (hf.SwinConfig, hf.SwinForImageClassification),
    "swinv2": (hf.Swinv2Config, hf.Swinv2ForImageClassification),
}
TINY = dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2, 2], num_heads=[2, 2, 4], window_size=4)
TIMM_NAMES = {"swin": "swin_tiny_patch4_window7_224", "swinv2": "swinv2_tiny_window8_256"}
# (height, width) of an input that pads: transformers 17 x 13 -> 9 x 7 -> 5 x 4 tokens; timm 20 x 12 -> 10 x 6 -> 5 x 3
PADDED_SIZE = {"huggingface": (34, 26), "timm": (40, 24)}


def perturbed(model: torch.nn.Module, noise: float = 0.3) -> torch.nn.Module:
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=noise)
    return model.eval()


def huggingface_swin(family: str) -> torch.nn.Module:
    """transformers' classifier (5 classes, eager attention)."""
    config_class, classifier = FAMILIES[family]
    torch.manual_seed(0)
    return perturbed(classifier(config_class(**(TINY | dict(num_labels=5, attn_implementation="eager")))))


def timm_swin(family: str) -> torch.nn.Module:
    """timm's classifier (5 classes) for 40 x 24 inputs."""
    torch.manual_seed(0)
    sizes = dict(img_size=(40, 24), patch_size=2, embed_dim=16, depths=(2, 2, 2), num_heads=(2, 2, 4), window_size=4)
    return perturbed(timm.create_model(TIMM_NAMES[family], pretrained=False, num_classes=5, **sizes))


def tiny_swin(source: str, family: str) -> Swin:
    """vitviz's Swin converted from the source's tiny classifier."""
    if source == "huggingface":
        reference = huggingface_swin(family)
        return vitviz.from_huggingface(reference.state_dict(), reference.config.to_dict())
    return vitviz.from_timm(timm_swin(family))


def swin_folder(folder: Path, family: str = "swin") -> Path:
    """A ``save_pretrained`` folder of the tiny transformers classifier (vitviz's loader reads its preprocessing
    from the config's image size when the folder holds no image processor)."""
    huggingface_swin(family).save_pretrained(folder)
    return folder
