"""Importers: models from other libraries into vitviz's ViT, one module per source.

    torchvision.py   torchvision's VisionTransformer (vit_b_16 ... vit_h_14)
    timm.py          timm's VisionTransformer and VisionTransformerDistilled (DeiT, DINO, DINOv2, CLIP, SigLIP, MAE...)
    huggingface.py   Hugging Face folders and state dicts (vit, deit, dinov2, dinov2_with_registers, CLIP, SigLIP)
    huggingface_text.py  the text half of CLIP and SigLIP folders, its config checked before transformers builds it
    open_clip.py     open_clip models (OpenCLIP's VisionTransformer or a timm trunk), with their text tower
    common.py        what they share: renaming rules, q/k/v fusion, JSON configs, logit scale checks

Every importer reproduces its source's outputs and attention weights (see tests/test_import_*.py).
"""

from vitviz.importers.huggingface import from_huggingface, load_huggingface_folder
from vitviz.importers.open_clip import from_open_clip
from vitviz.importers.timm import from_timm
from vitviz.importers.torchvision import TORCHVISION_ARCHS, from_torchvision

__all__ = [
    "TORCHVISION_ARCHS",
    "from_huggingface",
    "from_open_clip",
    "from_timm",
    "from_torchvision",
    "load_huggingface_folder",
]
