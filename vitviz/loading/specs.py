"""``load_model(spec)``: one entry point for every model vitviz can show.

    "default"                          the checkpoint shipped in checkpoints/
    "torchvision:vit_b_16"             torchvision weights (DEFAULT), downloaded once into torch's cache
    "torchvision:vit_b_16:IMAGENET1K_SWAG_E2E_V1"   ... naming the weights
    "timm:vit_base_patch16_224.augreg2_in21k_ft_in1k"   a pretrained timm model, through the Hugging Face Hub cache
    "hf:facebook/dinov2-with-registers-base"           a Hugging Face Hub repository (vit, deit, dinov2, clip...)
    "facebook/dinov2-with-registers-base"              the same, when no local path has that name
    "open_clip:ViT-B-16/openai"        an open_clip model and pretrained tag, with its text tower
    "open_clip:hf-hub:timm/ViT-B-16-SigLIP"            an open_clip model on the Hugging Face Hub
    "path/to/model.pt"                 a vitviz checkpoint
    "path/to/hf-folder"                a Hugging Face ViT saved with save_pretrained

The prefixed specs come from the sources in SOURCES (one ``ModelSource`` record per module of sources/); a spec
without a prefix is "default", a local path, or a bare Hub repository id.

Every model comes back in eval mode with ``.class_names`` and ``.transform``; CLIP and SigLIP models loaded with
their text half also have ``.text_tower`` (``vitviz.zero_shot`` turns prompts into classes), and image towers
without one say why in ``.text_tower_note``. Downloads happen once;
offline, a model already in its cache loads, and one that is not fails within seconds with a message
that names the cache folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from vitviz.loading.checkpoint import load_checkpoint
from vitviz.loading.download import REPO_ID
from vitviz.loading.errors import ModelLoadError, ModelNotFoundError, describe
from vitviz.loading.sources import huggingface_folder, open_clip, timm, torchvision
from vitviz.loading.sources.huggingface_folder import load_huggingface_folder, load_huggingface_hub
from vitviz.loading.sources.source import ModelSource
from vitviz.messages import echo
from vitviz.model import Swin, ViT


def _shipped_default() -> Path:
    """checkpoints/default.pt: inside the package when installed from a wheel (pyproject.toml maps the
    checkout's checkpoints/ to vitviz/checkpoints/), else in the checkout (a clone, or `pip install -e .`)."""
    package = Path(__file__).resolve().parent.parent  # vitviz/, two levels above vitviz/loading/specs.py
    installed = package / "checkpoints" / "default.pt"
    return installed if installed.is_file() else package.parent / "checkpoints" / "default.pt"


# VITVIZ_DEFAULT_CHECKPOINT points "default" at another vitviz checkpoint (e.g. your own model)
DEFAULT_CHECKPOINT = Path(os.environ.get("VITVIZ_DEFAULT_CHECKPOINT") or _shipped_default())


# every source of prefixed specs, in the order a spec is matched against them
SOURCES: tuple[ModelSource, ...] = (torchvision.SOURCE, timm.SOURCE, huggingface_folder.SOURCE, open_clip.SOURCE)
HUB = huggingface_folder.SOURCE  # "hf:<org>/<name>": the Hugging Face Hub
TIMM = timm.SOURCE
HUB_PREFIX = f"{HUB.prefix}:"  # also the prefix of Hub datasets (vitviz.dataset.sources)


def source_of(spec: str) -> ModelSource | None:
    """The source whose prefix ``spec`` starts with, None for "default", paths and bare repository ids."""
    return next((source for source in SOURCES if source.owns(spec)), None)


def typed_spec(text: str) -> str:
    """What a spec typed into a field means: a prefixed spec as given, a bare ``<org>/<name>`` as a Hub repository
    (never a local folder of that name), a bare name as a timm model, "" for nothing typed."""
    text = text.strip()
    if not text or source_of(text) is not None:
        return text
    return HUB.spec(text) if "/" in text else TIMM.spec(text)


def names_no_path(spec: str) -> bool:
    """Whether ``spec`` is a prefixed spec that a web page may take typed in: its source takes typed names, and
    this name can open nothing but that source's own registry or hub (never a local path)."""
    source = source_of(spec)
    return bool(source and source.names_no_path and source.names_no_path(source.name(spec)))


def typed_usage() -> str:
    """How the specs a page takes typed in are written, for messages: "'timm:<name>', 'hf:<org>/<name>', ..."."""
    return ", ".join(source.usage for source in SOURCES if source.names_no_path)


def load_model(spec: str | Path = "default") -> ViT | Swin:
    """Load a model by spec (see the module docstring): a ViT, or a Swin for a Swin or Swin v2 source (the same
    output contract: logits, attentions, layouts); errors are ``ModelLoadError``."""
    spec = str(spec).strip()
    if spec == "default":
        if not DEFAULT_CHECKPOINT.is_file():
            raise ModelLoadError(
                f"no default checkpoint is shipped yet ({DEFAULT_CHECKPOINT} is missing); train one with "
                "`vitviz train`, or load 'torchvision:vit_b_16' or a checkpoint path instead"
            )
        return load_checkpoint(DEFAULT_CHECKPOINT)
    source = source_of(spec)
    if source is not None:
        return source.load(source.name(spec))
    path = _local_path(spec)
    if path is not None and path.is_dir():
        return load_huggingface_folder(path)
    if path is not None:
        return load_checkpoint(path)
    if REPO_ID.fullmatch(spec):
        return load_huggingface_hub(spec)
    usages = ", ".join(source.usage for source in SOURCES)
    raise ModelNotFoundError(
        f"model {echo(spec)} not found: give 'default', {usages}, a vitviz checkpoint file, or a Hugging Face "
        "model folder"
    )


def _local_path(spec: str) -> Path | None:
    """The file or folder ``spec`` names (``~`` and ``~user`` expanded), None when there is none; a ModelLoadError
    for a ``~user`` of no user on this machine, or a name the system refuses (too long, say)."""
    try:
        path = Path(spec).expanduser()
    except RuntimeError:  # ~someone, and no someone
        raise ModelLoadError(
            f"model {echo(spec)} not found: {echo(Path(spec).parts[0], 80)} names the home folder of "
            "a user this machine does not have"
        ) from None
    try:
        return path if path.is_dir() or path.is_file() else None
    except OSError as error:  # e.g. ENAMETOOLONG: Path.is_dir only hides "no such file"
        raise ModelLoadError(f"model {echo(spec)} cannot be opened: {error.strerror or describe(error)}") from None
