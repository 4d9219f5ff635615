"""A video model's input made from a video file, and its maps over the clip: what `vitviz explain` on a video and the
dashboard's Video page both compute, so the two agree frame for frame.

A Hugging Face video model carries its clip transform, ``model.clip_transform`` (a ``ClipPreprocessing``): the
loader reads it from the model's processor file (``processor_config.json``'s video processor,
``video_preprocessor_config.json`` or ``preprocessor_config.json``, from a folder or the Hub cache), and without one
takes the family's video processor defaults in transformers (``family_preprocessing``), with a note saying so. Its
steps are transformers' video processors' (VideoMAE's, ViViT's, TimeSformer's, V-JEPA 2's): given the same uint8
frames, it returns their ``pixel_values`` to float rounding. ``model.transform`` stays None: it is the image
transform (``vitviz.Preprocessing``, PIL image in), which a video model has none of.

``model_frames`` samples the model's ``num_frames`` with ``load_video`` (transformers' rule), then scales and crops
them as the transform says; ``clip_tensor`` rescales and normalises those frames into the (1, frames, 3, H, W) clip.
``video_map`` computes one map over every tubelet (``vitviz.explain``'s space-time maps), ``clip_probabilities``
gives the prediction (from the map's pass when it made one) and ``top_classes`` reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from vitviz import explain
from vitviz.messages import echo
from vitviz.preprocessing import _preprocessing_problems
from vitviz.video import VideoError, load_video

VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".gif", ".mpg", ".mpeg", ".ts", ".flv", ".ogv"}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # transformers' IMAGENET_DEFAULT_*
HALF = (0.5, 0.5, 0.5)  # transformers' IMAGENET_STANDARD_MEAN and _STD
# where transformers' video processors read their settings, first found first: (file, key of the video processor's
# settings in it, or None for the whole file)
PROCESSOR_FILES = (
    ("processor_config.json", "video_processor"),
    ("video_preprocessor_config.json", None),
    ("preprocessor_config.json", None),
)
FAMILIES = {  # transformers' model_type: the family's name and its video processor
    "videomae": ("VideoMAE", "VideoMAEVideoProcessor"),
    "vivit": ("ViViT", "VivitVideoProcessor"),
    "timesformer": ("TimeSformer", "TimesformerVideoProcessor"),
    "vjepa2": ("V-JEPA 2", "VJEPA2VideoProcessor"),
}
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL's numbers, as processor files store them
RESIZE_CHUNK = 8  # frames resized at once, so a long clip's float copies stay small


@dataclass(frozen=True)
class ClipPreprocessing:
    """A video model's clip transform, in the steps of transformers' video processors (``BaseVideoProcessor``):

    each frame scaled (``resize``: an int scales the shorter side to it, (height, width) to exactly that, None keeps
    it; torchvision's antialiased ``interpolation`` on uint8), its centre ``crop`` (height, width) taken (None keeps
    it; zero-padded where the frame is smaller, as transformers pads), then x * ``rescale`` (ViViT: minus 1,
    ``offset``) normalised by ``mean`` and ``std``. ``note`` says where the settings come from.

    Called on uint8 frames (F, H, W, 3), as ``load_video`` gives them, it returns the float32 clip (F, 3, h, w) the
    model reads (``clip[None]`` is a batch of one); ``frames`` gives the scaled and cropped uint8 frames, which
    ``normalise`` turns into the clip."""

    resize: int | tuple[int, int] | None
    crop: tuple[int, int] | None
    mean: tuple[float, ...] = HALF
    std: tuple[float, ...] = HALF
    rescale: float = 1 / 255
    offset: bool = False
    interpolation: str = "bilinear"
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("resize", "crop", "mean", "std"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = _preprocessing_problems(self)  # vitviz.Preprocessing's checks of the same fields
        if isinstance(self.crop, int):
            problems.append(f"crop must be (height, width); got {echo(self.crop)}")
        rescale = self.rescale
        if isinstance(rescale, bool) or not isinstance(rescale, (int, float)) or not 0 < rescale < float("inf"):
            problems.append(f"rescale must be a positive number; got {echo(rescale)}")
        if problems:
            raise ValueError("invalid clip preprocessing: " + "; ".join(problems))

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        """float32 (F, 3, h, w): uint8 ``frames`` (F, H, W, 3) scaled, cropped, rescaled and normalised."""
        return self.normalise(self.frames(frames))

    def frames(self, frames: np.ndarray) -> np.ndarray:
        """uint8 (F, h, w, 3): ``frames`` (F, H, W, 3) scaled and centre-cropped, as the model sees them."""
        import torchvision.transforms.v2.functional as tvF
        from torchvision.transforms import InterpolationMode

        frames = _checked(frames)
        video = torch.from_numpy(frames).permute(0, 3, 1, 2)
        if self.resize is not None:
            height, width = video.shape[-2:]
            if isinstance(self.resize, tuple):
                size = list(self.resize)
            else:  # transformers' get_resize_output_image_size, not square: the longer side truncated
                short, long = min(height, width), max(height, width)
                new_long = int(self.resize * long / short)
                size = [self.resize, new_long] if height <= width else [new_long, self.resize]
            mode = {"nearest": InterpolationMode.NEAREST_EXACT, "bicubic": InterpolationMode.BICUBIC}.get(
                self.interpolation, InterpolationMode.BILINEAR
            )
            if size != [height, width]:
                video = torch.cat(
                    [tvF.resize(part, size, interpolation=mode, antialias=True) for part in video.split(RESIZE_CHUNK)]
                )
        if self.crop is not None:
            video = _centre_crop(video, *self.crop)
        return np.ascontiguousarray(video.permute(0, 2, 3, 1).numpy())

    def normalise(self, frames: np.ndarray) -> torch.Tensor:
        """float32 (F, 3, h, w): uint8 ``frames`` (F, h, w, 3), already scaled and cropped, rescaled and normalised
        with transformers' arithmetic (mean and std divided by ``rescale``, fused; ViViT's x * rescale - 1 first)."""
        clip = torch.from_numpy(_checked(frames)).permute(0, 3, 1, 2).float()
        mean, std = torch.tensor(self.mean), torch.tensor(self.std)
        if self.offset:
            clip = clip * self.rescale - 1
        else:
            mean, std = mean * (1.0 / self.rescale), std * (1.0 / self.rescale)
        return (clip - mean[:, None, None]) / std[:, None, None]

    def with_settings(self, settings: Mapping, family: str | None = None) -> ClipPreprocessing:
        """These defaults overridden by a processor file's ``settings``, as transformers' video processor of
        ``family`` (a model_type) reads them: do_resize, size (V-JEPA 2's: 256/224 of crop_size's height, whatever
        the file says), resample, do_center_crop, crop_size, do_rescale, rescale_factor, do_normalize, image_mean,
        image_std. Raises ValueError, in one line, for a value transformers would not read."""
        crop = _crop(settings.get("crop_size"), self.crop)
        if not settings.get("do_resize", True):
            resize = None
        elif family == "vjepa2":  # VJEPA2VideoProcessor.__init__ derives the size from the crop
            resize = int((crop or self.crop or (0,))[0] * 256 / 224)
        else:
            resize = _size(settings.get("size"), self.resize)
        resample = settings.get("resample")
        if resample is not None and resample not in RESAMPLE:
            raise ValueError(f"resample must be one of {RESAMPLE} (PIL's numbers); got {echo(resample)}")
        rescaled, normalised = settings.get("do_rescale", True), settings.get("do_normalize", True)
        mean, std = (_channels(settings.get(k), d) for k, d in (("image_mean", self.mean), ("image_std", self.std)))
        factor = settings.get("rescale_factor", self.rescale)
        return replace(
            self,
            resize=resize,
            crop=crop if settings.get("do_center_crop", True) else None,
            mean=mean if normalised else (0.0, 0.0, 0.0),
            std=std if normalised else (1.0, 1.0, 1.0),
            rescale=factor if rescaled else 1.0,
            offset=self.offset and bool(rescaled),
            interpolation=RESAMPLE.get(resample, self.interpolation),
        )


def _checked(frames: np.ndarray) -> np.ndarray:
    """uint8 (F, H, W, 3) frames, contiguous and writable; anything else is a ValueError in one line."""
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        kind = f"{frames.dtype} {frames.shape}" if isinstance(frames, np.ndarray) else type(frames).__name__
        raise ValueError(f"a clip transform takes uint8 frames (F, H, W, 3), as load_video gives them; got {kind}")
    frames = np.ascontiguousarray(frames)
    return frames if frames.flags.writeable else frames.copy()  # torch warns on a read-only array (a PIL image's)


def _centre_crop(video: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The (height, width) centre of ``video`` (F, 3, H, W), transformers' arithmetic: zeros padded around a frame
    smaller than the crop (the odd pixel after), the top left corner rounded down."""
    h, w = video.shape[-2:]
    if height > h or width > w:
        pad_w, pad_h = max(width - w, 0), max(height - h, 0)
        video = torch.nn.functional.pad(video, (pad_w // 2, (pad_w + 1) // 2, pad_h // 2, (pad_h + 1) // 2))
        h, w = video.shape[-2:]
    top, left = int((h - height) / 2.0), int((w - width) / 2.0)
    return video[..., top : top + height, left : left + width]


def _crop(value: object, default: tuple[int, int] | None) -> tuple[int, int] | None:
    """A processor file's crop_size: a side, or {height, width}; absent, ``default``."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, Mapping) and {"height", "width"} <= set(value):
        return (value["height"], value["width"])
    raise ValueError(f"crop_size must be a side or {{height, width}} in pixels; got {echo(value, 80)}")


def _size(value: object, default: int | tuple[int, int] | None) -> int | tuple[int, int] | None:
    """A processor file's size: a side (the shorter one: video processors do not default to squares),
    {shortest_edge} or {height, width}; absent, ``default``."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    stated = {k for k, v in value.items() if v is not None} if isinstance(value, Mapping) else set()
    if stated == {"shortest_edge"}:
        return value["shortest_edge"]
    if stated == {"height", "width"}:
        return (value["height"], value["width"])
    raise ValueError(f"size must be a side, {{shortest_edge}} or {{height, width}} in pixels; got {echo(value, 80)}")


def _channels(value: object, default: tuple[float, ...]) -> tuple[float, ...]:
    """A processor file's image_mean or image_std: one number for every channel, or one per channel."""
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),) * 3
    return tuple(value) if isinstance(value, list) else value  # checked by ClipPreprocessing


def video_family(model) -> str:
    """transformers' model_type of a video ``model``'s family, told apart by its config: divided blocks are
    TimeSformer's, the attentive pooler (or 3-D rotary) V-JEPA 2's, [CLS] with tubelets ViViT's, none VideoMAE's."""
    config = model.config
    if getattr(config, "attention", "joint") == "divided":
        return "timesformer"
    if getattr(config, "pooling", None) == "attentive" or getattr(config, "rotary", None) == "vjepa2":
        return "vjepa2"
    return "vivit" if config.class_token else "videomae"


def family_preprocessing(model, family: str | None = None, why: str = "") -> ClipPreprocessing:
    """The clip transform of ``model``'s family's video processor in transformers with its defaults, at the model's
    input size (the crop; at 224 pixels, transformers' own numbers): VideoMAE's and TimeSformer's scale the shorter
    side to the crop, ViViT's and V-JEPA 2's to 256/224 of it; VideoMAE and ViViT normalise by 0.5 (ViViT after
    x / 127.5 - 1), TimeSformer and V-JEPA 2 by ImageNet's mean and std. ``family`` is a model_type (default: told
    from the config, ``video_family``); ``why`` ends the note."""
    family = family if family in FAMILIES else video_family(model)
    height, width = input_size(model)
    name, processor = FAMILIES[family]
    note = f"{name}'s defaults in transformers ({processor}) at this model's {height} x {width}{why}"
    crop = (height, width)
    if family == "timesformer":
        return ClipPreprocessing(max(crop), crop, IMAGENET_MEAN, IMAGENET_STD, note=note)
    if family == "vjepa2":
        return ClipPreprocessing(int(height * 256 / 224), crop, IMAGENET_MEAN, IMAGENET_STD, note=note)
    if family == "vivit":
        return ClipPreprocessing(round(max(crop) * 256 / 224), crop, HALF, HALF, 1 / 127.5, True, note=note)
    return ClipPreprocessing(max(crop), crop, note=note)


def clip_preprocessing(model) -> ClipPreprocessing:
    """How ``model``'s clips are made: its own ``clip_transform`` (what vitviz.load_model reads from a Hugging Face
    model's processor file), else its family's defaults (``family_preprocessing``)."""
    found = getattr(model, "clip_transform", None)
    if isinstance(found, ClipPreprocessing):
        return found
    return family_preprocessing(model, why=": the model carries no clip transform")


# the maps over a whole clip, by name: what each is, for captions and --help
VIDEO_METHODS = {
    "rollout": "attention rollout over every tubelet (Abnar & Zuidema 2020), read as the head reads the tokens",
    "relevance": "class-specific relevance (Chefer et al. 2021) of the target class, over every tubelet",
}


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
    """uint8 (frames, h, w, 3): the model's ``num_frames`` sampled from the video ``source`` (bytes or a path) by
    ``load_video`` at the video's size, then scaled and cropped as ``preprocessing`` says (default:
    clip_preprocessing(model)), so the clip equals transformers' video processor's on those frames. A clip that
    load_video refuses at full size for its memory (many large frames) is read with the shorter side at the
    transform's instead (FFmpeg's scaling). Raises VideoError for what load_video refuses, or for an image model."""
    check_video_model(model)
    preprocessing = preprocessing or clip_preprocessing(model)
    count = model.config.num_frames
    try:
        frames = load_video(source, frames=count)
    except VideoError as error:
        if "smaller size" not in str(error) or not isinstance(preprocessing.resize, int):
            raise
        frames = load_video(source, frames=count, size=preprocessing.resize)
    return preprocessing.frames(frames)


def clip_tensor(model, frames: np.ndarray, preprocessing: ClipPreprocessing | None = None) -> torch.Tensor:
    """float32 (1, frames, 3, h, w): ``frames`` (uint8 (F, h, w, 3), as model_frames gives them) rescaled and
    normalised as ``preprocessing`` says (default: clip_preprocessing(model))."""
    return (preprocessing or clip_preprocessing(model)).normalise(frames)[None]


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


def clip_probabilities(model, clip: torch.Tensor, logits: torch.Tensor | None = None) -> np.ndarray:
    """float32 (classes,): the first clip's class probabilities (``probabilities``), from ``logits`` when a map's pass
    gave them, else from one forward pass of ``clip`` without gradients; empty for a backbone (no classifier)."""
    if logits is None and model.config.num_classes > 0:
        with torch.no_grad():
            logits = model(clip).logits
    if logits is None:
        return np.zeros(0, np.float32)
    return probabilities(model, logits).astype(np.float32)


def top_classes(model, chances: np.ndarray, count: int = 5) -> list[tuple[int, str, float]]:
    """The ``count`` most probable classes: (index, name, probability), most probable first."""
    order = np.argsort(-chances, kind="stable")[:count]
    return [(int(i), model.class_names[i], float(chances[i])) for i in order]
