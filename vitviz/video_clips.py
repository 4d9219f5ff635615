"""A video model's input made from a video file, and its maps over the clip: what `vitviz explain` on a video and the
dashboard's Video page both compute, so the two agree frame for frame.

``model_frames`` samples the model's ``num_frames`` with ``load_video`` (transformers' rule), scales each frame's
shorter side and takes the centre crop, as the family's video processor does (VideoMAE's, ViViT's, TimeSformer's and
V-JEPA 2's in transformers: ``clip_preprocessing``, with a save_pretrained folder's processor file where there is
one). ``clip_tensor`` rescales and normalises those frames into the (1, frames, 3, H, W) clip. ``video_map``
computes one map over every tubelet (``vitviz.explain``'s space-time maps), and ``top_classes`` reads the prediction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from vitviz import explain
from vitviz.video import MIN_SIDE, WORKING_SIDE, VideoError, load_video

VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".gif", ".mpg", ".mpeg", ".ts", ".flv", ".ogv"}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # transformers' IMAGENET_DEFAULT_*
HALF = (0.5, 0.5, 0.5)  # transformers' IMAGENET_STANDARD_MEAN and _STD
PROCESSOR_FILES = ("video_preprocessor_config.json", "preprocessor_config.json")


@dataclass(frozen=True)
class ClipPreprocessing:
    """What a family's video processor does to each sampled frame: scale the shorter side to ``shortest_edge``,
    take the centre ``crop`` (height, width), rescale (x / 255, or ViViT's x / 127.5 - 1: ``offset``), normalise."""

    shortest_edge: int
    crop: tuple[int, int]
    mean: tuple[float, ...] = HALF
    std: tuple[float, ...] = HALF
    offset: bool = False

    def with_file(self, settings: dict) -> ClipPreprocessing:
        """These settings overridden by a processor's JSON file (what it states; the rest kept)."""
        size, crop = settings.get("size"), settings.get("crop_size")
        edge = size.get("shortest_edge") if isinstance(size, dict) else size if isinstance(size, int) else None
        if isinstance(crop, dict) and {"height", "width"} <= set(crop):
            crop = (int(crop["height"]), int(crop["width"]))
        elif isinstance(crop, int):
            crop = (crop, crop)
        else:
            crop = self.crop
        return replace(
            self,
            shortest_edge=int(edge) if isinstance(edge, int) else self.shortest_edge,
            crop=crop,
            mean=tuple(map(float, settings.get("image_mean", self.mean))),
            std=tuple(map(float, settings.get("image_std", self.std))),
            offset=bool(settings.get("offset", self.offset)),
        )


def clip_preprocessing(model, folder: str | os.PathLike | None = None) -> ClipPreprocessing:
    """How ``model``'s clips are made: its family's video processor's defaults in transformers (told apart by the
    config: divided blocks are TimeSformer's, the attentive pooler V-JEPA 2's, [CLS] with tubelets ViViT's, none
    VideoMAE's), overridden by the processor file of ``folder`` (a save_pretrained folder) where it has one."""
    height, width = input_size(model)
    config = model.config
    vjepa2 = getattr(config, "pooling", None) == "attentive" or getattr(config, "rotary", None) == "vjepa2"
    if getattr(config, "attention", "joint") == "divided":  # TimeSformer: 224 -> 224, ImageNet's statistics
        found = ClipPreprocessing(max(height, width), (height, width), IMAGENET_MEAN, IMAGENET_STD)
    elif vjepa2:  # V-JEPA 2: the crop's 256/224, ImageNet's statistics
        found = ClipPreprocessing(int(max(height, width) * 256 / 224), (height, width), IMAGENET_MEAN, IMAGENET_STD)
    elif config.class_token:  # ViViT: 256 -> 224, [-1, 1] then normalised by 0.5 (transformers' own arithmetic)
        found = ClipPreprocessing(round(max(height, width) * 256 / 224), (height, width), HALF, HALF, offset=True)
    else:  # VideoMAE
        found = ClipPreprocessing(max(height, width), (height, width))
    for name in PROCESSOR_FILES if folder is not None else ():
        path = Path(folder) / name
        if path.is_file():
            try:
                settings = json.loads(path.read_text())
            except (OSError, ValueError) as error:
                raise VideoError(f"{path} cannot be read: {error}") from None
            return found.with_file(settings) if isinstance(settings, dict) else found
    return found


# the maps over a whole clip, by name: what each is, for captions and --help
VIDEO_METHODS = {
    "rollout": "attention rollout over every tubelet (Abnar & Zuidema 2020), read as the head reads the tokens",
    "relevance": "class-specific relevance (Chefer et al. 2021) of the target class, over every tubelet",
}


def spec_folder(spec: str) -> Path | None:
    """The folder a model spec names, when it is one (its processor file says how clips are made); else None."""
    path = Path(spec).expanduser()
    return path if path.is_dir() else None


def is_video_model(model) -> bool:
    """Whether ``model`` reads clips (B, frames, 3, H, W) rather than images: a video ViT's config says so."""
    return bool(getattr(model.config, "is_video", False))


def is_video_path(path: str | os.PathLike) -> bool:
    """Whether a file's name says it is a video (GIFs count: an animated GIF is a clip)."""
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def check_video_model(model, what: str = "this model") -> None:
    """Refuse an image model with one line: it reads photos, and has no frames to sample a video into."""
    if not is_video_model(model):
        raise VideoError(
            f"{what} is an image model: it reads photos, not videos; give a video model (VideoMAE, ViViT, "
            "TimeSformer, V-JEPA 2)"
        )


def input_size(model) -> tuple[int, int]:
    """(height, width) of the frames the model reads."""
    size = model.config.image_size
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def model_frames(
    model, source: bytes | str | os.PathLike, preprocessing: ClipPreprocessing | None = None
) -> np.ndarray:
    """uint8 (frames, H, W, 3): the model's ``num_frames`` sampled from the video ``source`` (bytes or a path), the
    shorter side scaled and the centre cropped as ``preprocessing`` says (default: clip_preprocessing(model)).
    Raises VideoError for what load_video refuses, or for an image model."""
    check_video_model(model)
    preprocessing = preprocessing or clip_preprocessing(model)
    edge = min(max(preprocessing.shortest_edge, MIN_SIDE), WORKING_SIDE)
    frames = load_video(source, frames=model.config.num_frames, size=edge)
    return centre_crop(frames, *preprocessing.crop)


def centre_crop(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """The (height, width) centre of frames (F, h, w, 3), scaled up first (bilinear) where a side is shorter."""
    _, h, w, _ = frames.shape
    if h < height or w < width:  # a frame narrower than the input's shape (a portrait video, a wide model)
        scale = max(height / h, width / w)
        size = (max(height, round(h * scale)), max(width, round(w * scale)))
        tensor = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
        tensor = torch.nn.functional.interpolate(tensor, size=size, mode="bilinear", antialias=False)
        frames = tensor.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        _, h, w, _ = frames.shape
    top, left = (h - height) // 2, (w - width) // 2
    return np.ascontiguousarray(frames[:, top : top + height, left : left + width])


def clip_tensor(model, frames: np.ndarray, preprocessing: ClipPreprocessing | None = None) -> torch.Tensor:
    """float32 (1, frames, 3, H, W): ``frames`` (uint8 (F, H, W, 3), as model_frames gives them) rescaled and
    normalised as ``preprocessing`` says (default: clip_preprocessing(model))."""
    preprocessing = preprocessing or clip_preprocessing(model)
    clip = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    clip = clip / 127.5 - 1 if preprocessing.offset else clip / 255
    mean, std = torch.tensor(preprocessing.mean)[:, None, None], torch.tensor(preprocessing.std)[:, None, None]
    return ((clip - mean) / std)[None]


def video_map(
    model, clip: torch.Tensor, method: str, target: int | None = None, progress: Callable | None = None
) -> explain.SpaceTimeMap:
    """The map ``method`` (a VIDEO_METHODS name) of ``clip`` over every tubelet: explain.video_rollout or
    explain.video_relevance (of ``target``, default the top class)."""
    if method == "rollout":
        return explain.video_rollout(model, clip, progress=progress)
    if method == "relevance":
        return explain.video_relevance(model, clip, target, progress=progress)
    raise ValueError(f"a video map is one of {', '.join(VIDEO_METHODS)}; got {method!r}")


def probabilities(model, logits: torch.Tensor) -> np.ndarray:
    """float (classes,): the first clip's class probabilities, as the model turns logits into them."""
    logits = logits[0].detach().float()
    if getattr(model.config, "probabilities", "softmax") == "sigmoid":
        return torch.sigmoid(logits).numpy()
    return torch.softmax(logits, dim=-1).numpy()


def top_classes(model, chances: np.ndarray, count: int = 5) -> list[tuple[int, str, float]]:
    """The ``count`` most probable classes: (index, name, probability), most probable first."""
    order = np.argsort(-chances, kind="stable")[:count]
    return [(int(i), model.class_names[i], float(chances[i])) for i in order]
