"""Hugging Face folders (``save_pretrained``) and Hub repositories into a ready ViT, class names and preprocessing.

A folder holds config.json, its weights (model.safetensors, shards listed by an index, or pytorch_model.bin) and
preprocessor_config.json; the state dict is converted by ``huggingface.from_huggingface``. A ``clip`` or ``siglip``
folder with tokenizer files also gets its text tower (``huggingface_text``). A video model gets its clip transform
(``model.clip_transform``) from its video processor's file, fetched from the Hub too, or its family's defaults.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from vitviz.loading.checkpoint import load_torch_file
from vitviz.loading.download import REPO_ID, hub_file, hub_reachable
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import read_json
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.loading.sources.huggingface_text import TEXT_TOWER_TYPES, TOKENIZER_FILES, text_tower
from vitviz.loading.sources.huggingface_video import VIDEO_TYPES
from vitviz.loading.sources.huggingface_vjepa2 import VJEPA2_TYPES
from vitviz.loading.sources.source import ModelSource
from vitviz.loading.sources.weights_files import SHARD_INDEX, read_safetensors, shard_files
from vitviz.messages import echo
from vitviz.model import ViT
from vitviz.preprocessing import Preprocessing

if TYPE_CHECKING:
    from vitviz.video_clips import ClipPreprocessing


def load_huggingface_folder(folder: str | Path) -> ViT:
    """A ready ViT from a folder saved by ``save_pretrained`` (config.json + weights).

    Reads model.safetensors (preferred) or pytorch_model.bin, and preprocessor_config.json when
    present: resize, centre crop (CLIP, DeiT, DINOv2) and normalisation; otherwise ViTImageProcessor's
    defaults (224x224, bilinear, mean = std = 0.5). A video model (VideoMAE, ViViT, TimeSformer, V-JEPA 2) has no
    image ``transform`` (None) but a ``clip_transform`` (vitviz.video_clips.ClipPreprocessing), read from its video
    processor's file, or its family's defaults in transformers with a note saying the folder has none.
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} has no config.json, so it is not a Hugging Face model folder")
    config = read_json(config_path)
    limit = weight_limit(config)
    if (folder / "model.safetensors").is_file():
        state_dict = read_safetensors(folder / "model.safetensors", limit)
    elif (folder / SHARD_INDEX).is_file():  # big models come in shards, listed by an index
        state_dict = {}
        for shard in shard_files(folder / SHARD_INDEX, limit):
            state_dict.update(read_safetensors(folder / shard, limit - len(state_dict)))
    elif (folder / "pytorch_model.bin").is_file():
        state_dict = load_torch_file(folder / "pytorch_model.bin", limit)
    else:
        raise ModelLoadError(f"{folder} has neither model.safetensors, {SHARD_INDEX} nor pytorch_model.bin")
    try:
        model = from_huggingface(state_dict, config)
        labels = config.get("id2label") or {}
        model.class_names = [
            str(labels.get(str(i), labels.get(i, f"class {i}"))) for i in range(model.config.num_classes)
        ]
        if isinstance(model, ViT) and model.config.is_video:  # a Swin's config has no frames
            # clips, not images: no image transform, and the clip transform its video processor file states
            model.transform = None
            model.clip_transform = _video_preprocessing(folder, model, config.get("model_type"))
        else:
            model.transform = _huggingface_preprocessing(
                folder / "preprocessor_config.json", model.config.image_size, config.get("model_type")
            )
        if config.get("model_type") in TEXT_TOWER_TYPES:
            model.text_tower, model.text_tower_note = text_tower(folder, state_dict, config)
    except ModelLoadError:
        raise
    except Exception as error:  # malformed configs or weights: a message, never a traceback
        raise ModelLoadError(f"{folder} is not a usable Hugging Face ViT folder: {describe(error)}") from None
    return model


def weight_limit(config: dict) -> int:
    """At most how many tensors the weights of the model a config.json describes may hold: 64, and 32 for each block
    of its image and text towers (the families here have 9 to 20), so a file of 300,000 is refused from its header."""
    parts = [config] + [config[key] for key in ("vision_config", "text_config") if isinstance(config.get(key), dict)]
    layers = [_swin_blocks(part) or part.get("num_hidden_layers") for part in parts]
    return 64 + 32 * sum(n if isinstance(n, int) and n > 0 else 12 for n in layers)


def _swin_blocks(part: dict) -> int | None:
    """A Swin config's blocks, the sum of its depths (its num_layers counts stages); None for other configs."""
    depths = part.get("depths")
    ok = isinstance(depths, list) and all(isinstance(d, int) and d > 0 for d in depths)
    return sum(depths) if ok and depths else None


def _huggingface_preprocessing(
    path: Path, image_size: int | tuple[int, int], model_type: object = None
) -> Preprocessing:
    """The preprocessor_config.json's resize, crop and normalisation; every value checked (``Preprocessing``).

    What the file leaves out (or the whole file, when the folder has none) takes the model's own defaults: its
    config's ``image_size``, and the mean and std of transformers' image processor for its type (OpenAI's for CLIP,
    0.5 for the others), as the model was trained."""
    from transformers.image_utils import (
        IMAGENET_STANDARD_MEAN,
        IMAGENET_STANDARD_STD,
        OPENAI_CLIP_MEAN,
        OPENAI_CLIP_STD,
    )

    settings = read_json(path) if path.is_file() else {}
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    default_size = {"height": height, "width": width}
    clip = model_type == "clip"
    mean, std = (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD) if clip else (IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD)
    size = settings.get("size", default_size)
    if isinstance(size, int):  # older files: CLIP's (and BiT's, DINOv2's) meant the shorter side, ViT's a square
        processor = str(settings.get("image_processor_type") or settings.get("feature_extractor_type") or "")
        size = {"shortest_edge": size} if processor.startswith(("CLIP", "Bit")) else {"height": size, "width": size}
    crop = settings.get("crop_size", default_size) if settings.get("do_center_crop") else None
    unusable = f"{path.parent} is not a usable Hugging Face ViT folder: {path.name}"
    for name, value in (("size", size), ("crop_size", crop)):
        if value is not None and not isinstance(value, (dict, int)):
            raise ModelLoadError(
                f"{unusable}'s {name} must be a number of pixels or an object with height and width "
                f"(or shortest_edge); got {echo(value, 80)}"
            )
    try:
        resize = size["shortest_edge"] if "shortest_edge" in size else (size["height"], size["width"])
        if isinstance(crop, dict):
            crop = (crop["height"], crop["width"])
        resample = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(settings.get("resample", 2), "bilinear")
        normalize = settings.get("do_normalize", True)
        return Preprocessing(
            resize=resize if settings.get("do_resize", True) else None,
            crop=crop,
            mean=tuple(settings.get("image_mean", mean)) if normalize else (0.0, 0.0, 0.0),
            std=tuple(settings.get("image_std", std)) if normalize else (1.0, 1.0, 1.0),
            interpolation=resample,
        )
    except ValueError as error:  # Preprocessing's checks
        raise ModelLoadError(f"{unusable}: {error}") from None
    except (TypeError, KeyError) as error:
        raise ModelLoadError(f"{unusable} ({describe(error)})") from None


def _video_preprocessing(folder: Path, model: ViT, model_type: object) -> ClipPreprocessing:
    """A video model's clip transform, as transformers' video processor of its type reads the folder: the
    ``video_processor`` of processor_config.json, else video_preprocessor_config.json, else preprocessor_config.json
    (the Hub's older checkpoints: VideoMAE's states ImageNet's mean and std), over the family's defaults; with none
    of them, the family's defaults and a note saying so. A value transformers would not read is a ModelLoadError."""
    from vitviz.video_clips import PROCESSOR_FILES, family_preprocessing

    family = model_type if isinstance(model_type, str) else None
    for name, key in PROCESSOR_FILES:
        path = folder / name
        settings = read_json(path) if path.is_file() else None
        settings = settings.get(key) if key and isinstance(settings, dict) else settings
        if isinstance(settings, dict):
            try:
                found = family_preprocessing(model, family).with_settings(settings, family)
            except (ValueError, TypeError) as error:
                raise ModelLoadError(f"{folder} is not a usable Hugging Face ViT folder: {name}: {error}") from None
            return replace(found, note=f"the model's {name}" + (f" ({key})" if key else ""))
    return family_preprocessing(model, family, ": the model has no video processor file")


def load_huggingface_hub(repo_id: str) -> ViT:
    """A Hugging Face Hub repository, downloaded once into the Hub cache: config.json, model.safetensors
    (or its shards, or pytorch_model.bin) and preprocessor_config.json when the repository has one; for a video
    model also processor_config.json and video_preprocessor_config.json, where it has them (offline, what the cache
    holds: without any, the family's defaults, with a note)."""
    if not REPO_ID.fullmatch(repo_id):
        raise ModelLoadError(
            f"{echo(repo_id)} is not a Hugging Face repository id (org/name, 96 characters each at most)"
        )
    spec = f"hf:{repo_id}"
    fetch = partial(hub_file, repo_id, spec=spec, offline=not hub_reachable())  # the Hub is asked once
    config = fetch(["config.json"])
    weights = fetch(["model.safetensors", SHARD_INDEX, "pytorch_model.bin"])
    if weights.name == SHARD_INDEX:  # a big model in shards: each one the index lists
        for shard in shard_files(weights, weight_limit(read_json(config))):
            fetch([shard])
    fetch(["preprocessor_config.json"], required=False)  # else ViTImageProcessor's defaults
    if read_json(config).get("model_type") in (*VIDEO_TYPES, *VJEPA2_TYPES):  # where video processors keep settings
        for name in ("processor_config.json", "video_preprocessor_config.json"):
            fetch([name], required=False)
    if read_json(config).get("model_type") in TEXT_TOWER_TYPES:  # CLIP, SigLIP: the tokenizer, for the text tower
        for name in TOKENIZER_FILES:
            fetch([name], required=False)
    return load_huggingface_folder(config.parent)


def names_no_path(name: str) -> bool:
    """A Hub repository id (``<org>/<name>``), which never names a local folder."""
    return bool(REPO_ID.fullmatch(name))


SOURCE = ModelSource("hf", load_huggingface_hub, "'hf:<org>/<name>'", names_no_path)
