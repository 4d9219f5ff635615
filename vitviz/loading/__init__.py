"""Loading: every model vitviz can show, as its ViT with class names and preprocessing.

    specs.py         load_model(spec): what each spec ("default", "timm:...", "hf:...", a path...) names, and its loader
    popular.py       the popular pretrained ViTs the page offers, label -> spec
    sources/         one module per library the weights come from (torchvision, timm, Hugging Face, open_clip)
    checkpoint.py    vitviz's own checkpoint: save, read and load it without executing code; torch files read safely
    build.py         a ViT from a config and a state dict, names, shapes, size and finiteness checked first
    build_swin.py    the same checks for a Swin or Swin v2
    download.py      files from the network: the Hugging Face Hub (failing fast offline) and plain URLs, with progress
    memory.py        the memory free, against which every loader checks a model's size first
    errors.py        ModelLoadError, the one error of loading, with messages of one short line

``from vitviz.loading import load_model, ModelLoadError`` is the way in; ``from_torchvision``, ``from_timm``,
``from_huggingface`` and ``from_open_clip`` convert a model already in memory.
"""

from vitviz.loading.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.from_timm import from_timm
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.loading.sources.huggingface_folder import load_huggingface_folder
from vitviz.loading.sources.open_clip import from_open_clip
from vitviz.loading.sources.torchvision import TORCHVISION_ARCHS, from_torchvision
from vitviz.loading.specs import load_model

__all__ = [
    "TORCHVISION_ARCHS",
    "ModelLoadError",
    "from_huggingface",
    "from_open_clip",
    "from_timm",
    "from_torchvision",
    "load_checkpoint",
    "load_huggingface_folder",
    "load_model",
    "read_checkpoint",
    "save_checkpoint",
]
