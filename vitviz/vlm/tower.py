"""``vision_tower(vlm)``: a vision-language model's vision tower as a vitviz ViT, so every map of the Photo page works
on it.

The towers vitviz reads are converted by its Hugging Face importer (``from_huggingface``) from the tower's own
weights and config, and reproduce its hidden states and attentions:

    LLaVA-1.5, LLaVA-NeXT       CLIP (clip_vision_model): [CLS] and the patches, every layer (LLaVA reads layer -2)
    LLaVA-OneVision, PaliGemma  SigLIP without its pooling head (siglip_vision_model): a backbone read by its mean
    (1 and 2), Gemma 3          patch token
    Idefics3, SmolVLM           the SigLIP-like tower of Idefics3 (idefics3_vision), read as that SigLIP: on a full
                                tile its position ids are the table's rows in order (checked; where the tile's side
                                in patches makes two patches share a row, the tower is refused)

Qwen2-VL, Qwen2.5-VL and Qwen3-VL are refused by name: their towers take packed space-time patches at any
resolution with 2-D rotary positions (Qwen2.5-VL attends within windows, Qwen3-VL interpolates a learned table
and feeds deepstack features) and merge 2 x 2 patches into each image token, none of which a vitviz ViT expresses.

The ViT's ``transform`` is the processor's preprocessing of the base image (the one view every family makes of the
whole photo): LLaVA-1.5's resize of the shorter side and centre crop; the square resize of LLaVA-NeXT's and
OneVision's base image, PaliGemma's and Gemma 3's image, and Idefics3's global image. Idefics3 resizes three times
with Lanczos filtering; vitviz's preprocessing resizes once, bicubic, the nearest it can express.
"""

from __future__ import annotations

from typing import Any

import torch

from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.huggingface import from_huggingface
from vitviz.model import ViT
from vitviz.preprocessing import Preprocessing
from vitviz.vlm.errors import VLMError
from vitviz.vlm.passes import hooked

# the tower's model_type -> the importer's model_type that reads it exactly
READABLE = {
    "clip_vision_model": "clip_vision_model",
    "siglip_vision_model": "siglip_vision_model",
    "idefics3_vision": "siglip_vision_model",
    "smolvlm_vision": "siglip_vision_model",
}
QWEN = {"qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen3_vl": "Qwen3-VL"}
QWEN_REASON = (
    "it embeds packed space-time patches at any resolution with 2-D rotary positions{windows} and its patch merger "
    "folds 2 x 2 patches into each image token, which vitviz's ViT cannot express"
)
QWEN_EXTRA = {
    "qwen2_5_vl": ", attends within windows in all but a few blocks",
    "qwen3_vl": ", interpolates a learned position table and feeds deepstack features to the decoder",
}
SQUARE_BASE = ("llava_next", "llava_onevision", "paligemma", "gemma3")  # the base image: the photo resized to a square
SPLIT_BASE = ("idefics3", "smolvlm")  # the global image: the photo resized to one tile
RESAMPLING = {0: "nearest", 1: "bicubic", 2: "bilinear", 3: "bicubic"}  # PIL's codes; Lanczos (1): bicubic


def vision_tower(vlm: Any) -> ViT:
    """``vlm``'s vision tower (a ``VLM``) as a vitviz ViT backbone in float32, its ``transform`` the processor's
    preprocessing of the base image; a VLMError that names the family and the reason where vitviz cannot read it."""
    family = vlm.model_type
    if family in QWEN:
        windows = QWEN_EXTRA.get(family, "")
        raise VLMError(
            f"{QWEN[family]}'s vision tower cannot be opened as a vitviz ViT: " + QWEN_REASON.format(windows=windows)
        )
    vision_config = getattr(vlm.model.config, "vision_config", None)
    tower_type = getattr(vision_config, "model_type", None)
    if tower_type not in READABLE:
        raise VLMError(
            f"the vision tower of {family} ({tower_type}) is not one vitviz reads; readable towers: "
            f"{', '.join(sorted(READABLE))}"
        )
    module = tower_module(vlm.model, vision_config)
    config = vision_config.to_dict() | {"model_type": READABLE[tower_type]}
    if tower_type != READABLE[tower_type]:  # Idefics3's tower: SigLIP's blocks, no pooling head
        check_positions_in_order(module, family)
        config["vision_use_head"] = False
    weights = {name: tensor.detach().float() for name, tensor in module.state_dict().items()}
    try:
        vit = from_huggingface(weights, config)
    except ModelLoadError as error:
        raise VLMError(f"the vision tower of {family} ({tower_type}) cannot be converted: {error}") from None
    vit.transform = base_preprocessing(family, vlm.processor.image_processor)
    return vit.eval()


def tower_module(model: torch.nn.Module, vision_config: Any) -> torch.nn.Module:
    """The sub-model built from ``vision_config`` (LLaVA's ``vision_tower``, Idefics3's ``vision_model``)."""
    from transformers import PreTrainedModel

    found = [
        module
        for module in model.modules()
        if isinstance(module, PreTrainedModel) and module.config is vision_config and module is not model
    ]
    if len(found) != 1:
        raise VLMError(
            f"the vision tower of {type(model).__name__} cannot be reached: {len(found)} sub-models are built from "
            "its vision config"
        )
    return found[0]


def check_positions_in_order(module: torch.nn.Module, family: str) -> None:
    """Idefics3's tower gives each patch of a tile a row of its position table by bucketing the patch's fractional
    place; vitviz's SigLIP adds the rows in order. The ids the tower uses on one full tile are caught as they
    enter the table, and anything but 0, 1, ..., N-1 is refused."""
    embeddings = module.embeddings
    side = embeddings.num_patches_per_side
    tile = side * embeddings.patch_size
    weight = embeddings.patch_embedding.weight
    seen: list[torch.Tensor] = []
    # the hook sees this thread's call only: another session may be running the shared tower meanwhile
    watch = hooked(embeddings.position_embedding, lambda _m, args, _out: seen.append(args[0]))
    with torch.inference_mode(), watch:
        pixels = torch.zeros(1, weight.shape[1], tile, tile, dtype=weight.dtype, device=weight.device)
        embeddings(pixels, torch.ones(1, side, side, dtype=torch.bool, device=weight.device))
    ids = seen[0].flatten().cpu() if seen else None
    if ids is None or not torch.equal(ids, torch.arange(side * side)):
        repeated = side * side - len(torch.unique(ids)) if ids is not None else side * side
        raise VLMError(
            f"the vision tower of {family} cannot be read exactly: on a full tile of {side} x {side} patches its "
            f"bucketed position ids are not the table's rows in order ({repeated} rows are used twice or not at all)"
        )


def base_preprocessing(family: str, image_processor: Any) -> Preprocessing:
    """The processor's resize, crop and normalisation of the base image, as a vitviz ``Preprocessing``."""

    def attribute(key: str, default: Any = None) -> Any:  # an image processor's settings are its attributes
        value = getattr(image_processor, key, None)
        return default if value is None else value

    name = type(image_processor).__name__
    if attribute("do_rescale", True) and abs(float(attribute("rescale_factor", 1 / 255)) - 1 / 255) > 1e-12:
        raise VLMError(f"{name} rescales by {attribute('rescale_factor')}; vitviz's preprocessing scales by 1/255")
    size = dict(attribute("size") or {})
    crop = dict(attribute("crop_size") or {}) if attribute("do_center_crop") else {}
    square = size.get("height"), size.get("width")
    if family == "llava" and attribute("do_pad"):
        raise VLMError(f"{name} pads the photo to a square first, which vitviz's preprocessing cannot do")
    if family in SPLIT_BASE:
        side = int(dict(attribute("max_image_size") or {})["longest_edge"])
        resize: int | tuple[int, int] = (side, side)
    elif size.get("shortest_edge") and family == "llava":
        resize = int(size["shortest_edge"])  # the aspect ratio kept
    elif size.get("shortest_edge") and family in SQUARE_BASE:
        resize = (int(size["shortest_edge"]),) * 2
    elif all(square):
        resize = (int(square[0]), int(square[1]))
    else:
        raise VLMError(f"{name}'s size {size} does not say how the base image is resized")
    normalise = attribute("do_normalize", True)
    try:
        return Preprocessing(
            resize=resize if attribute("do_resize", True) else None,
            crop=(int(crop["height"]), int(crop["width"])) if crop.get("height") else None,
            mean=tuple(float(m) for m in attribute("image_mean")) if normalise else (0.0, 0.0, 0.0),
            std=tuple(float(s) for s in attribute("image_std")) if normalise else (1.0, 1.0, 1.0),
            interpolation=resampling(attribute("resample", 3)),
        )
    except (TypeError, ValueError) as error:
        raise VLMError(f"{name}'s settings are not a preprocessing vitviz can run: {error}") from None


def resampling(value: Any) -> str:
    """PIL's resampling code (or torchvision's interpolation mode) as vitviz's interpolation name."""
    mode = getattr(value, "value", value)
    if isinstance(mode, str):
        return {"lanczos": "bicubic"}.get(mode, mode)
    return RESAMPLING.get(int(mode), "bicubic")
