"""vitviz: see what a Vision Transformer looks at."""

from vitviz.checkpoint import ModelLoadError, load_checkpoint, save_checkpoint
from vitviz.dataset import open_index
from vitviz.images import Preprocessing
from vitviz.importers import from_huggingface, from_open_clip, from_timm, from_torchvision
from vitviz.load import load_model
from vitviz.model import ViT, ViTConfig, ViTOutput, autocast
from vitviz.text import zero_shot

__all__ = [
    "ModelLoadError",
    "Preprocessing",
    "ViT",
    "ViTConfig",
    "ViTOutput",
    "autocast",
    "from_huggingface",
    "from_open_clip",
    "from_timm",
    "from_torchvision",
    "load_checkpoint",
    "load_model",
    "open_index",
    "save_checkpoint",
    "zero_shot",
]
