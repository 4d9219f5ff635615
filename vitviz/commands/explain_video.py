"""`vitviz explain` on videos: what a video model's maps look like over each clip (explain.py hands the files over).

    vitviz explain clips/ --model hf:MCG-NJU/videomae-base-finetuned-kinetics --out maps/
    vitviz explain walk.mp4 --model ./videomae-folder --methods rollout relevance --video-format mp4 --out maps/

For every video: the model's ``num_frames`` frames sampled evenly over the clip (vitviz.video_clips.model_frames, as
the family's video processor samples and crops them), one overlay per map method (rollout, relevance) as an animated
GIF or an MP4 (--video-format), one .npz (the frames, each map per token and painted per frame, the tokens' boxes and
frames, the probabilities) and a row in predictions.csv. A file that cannot be read, and an image given to a video
model that does not read images, are reported in one line and skipped; the exit status is 1 if any were.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vitviz.commands.common import find_images
from vitviz.preprocessing import IMAGE_SUFFIXES, ImageError, load_image
from vitviz.render.video_overlays import clip_overlays, display_shape, gif_bytes, mp4_bytes, paint_frames
from vitviz.video import VideoError
from vitviz.video_clips import (
    VIDEO_METHODS,
    VIDEO_SUFFIXES,
    ClipPreprocessing,
    clip_preprocessing,
    clip_tensor,
    is_video_path,
    model_frames,
    probabilities,
    top_classes,
    video_map,
)

VIDEO_FORMATS = ("gif", "mp4")


def add_video_options(parser: argparse.ArgumentParser) -> None:
    """The options that apply to videos only."""
    videos = parser.add_argument_group("videos (a video model: VideoMAE, ViViT, TimeSformer, V-JEPA 2)")
    videos.add_argument(
        "--video-format", choices=VIDEO_FORMATS, default="gif", help="the overlays' format (default: %(default)s)"
    )
    videos.add_argument("--fps", type=float, default=4.0, help="frames a second of the overlays (default: %(default)s)")


def find_inputs(paths: list[Path]) -> list[Path]:
    """The image and video files the arguments name: files as given, and the images and videos under folders."""
    return find_images(paths, frozenset(VIDEO_SUFFIXES))


def video_refusal(path: Path) -> str | None:
    """Why an image model skips ``path`` (a video by its name; a GIF is read as an image, its first frame), or None."""
    if is_video_path(path) and path.suffix.lower() != ".gif":
        return f"{path}: a video, and this is an image model: give a video model (VideoMAE, ViViT, ...) for videos"
    return None


def image_clip(model, path: Path, preprocessing: ClipPreprocessing) -> tuple[torch.Tensor, np.ndarray]:
    """An image given to a video model, as a one-frame clip (1, 1, 3, H, W) (how transformers' video processors
    take an image: scaled and cropped as a frame), and the image as the model sees it, uint8 (1, H, W, 3): the model
    reads it as its family does, or refuses it in one line."""
    frame = preprocessing.frames(np.asarray(load_image(path.read_bytes()))[None])
    return clip_tensor(model, frame, preprocessing), frame


def explain_videos(model, paths: list[Path], args: argparse.Namespace, used_names: set[str], unique_name) -> int:
    """Every file of ``paths`` through the video ``model``: overlays, npz and predictions.csv into ``args.out``.
    Returns the exit status (1 if any file was skipped)."""
    methods = [m for m in args.methods if m in VIDEO_METHODS]
    for method in (m for m in args.methods if m not in VIDEO_METHODS):
        print(f"skipping {method}: a video model's maps are {', '.join(VIDEO_METHODS)}", file=sys.stderr)
    if not methods:
        raise SystemExit(f"error: none of the --methods can explain a video model; give {' or '.join(VIDEO_METHODS)}")
    if model.config.num_classes <= 0 and "relevance" in methods:
        raise SystemExit("error: relevance needs a classification head; this video model is a backbone")
    if not 0 < args.fps <= 60:
        raise SystemExit("error: --fps must be in (0, 60]")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"clips scaled, cropped and normalised by {clip_preprocessing(model).note}", file=sys.stderr)
    failures = []
    with open(args.out / "predictions.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["video"] + [f"{kind}{rank}" for rank in range(1, 6) for kind in ("class", "probability")])
        bar = tqdm(paths, desc="explaining", unit="video", disable=None, file=sys.stderr)
        for path in bar:
            try:
                chances = explain_one(model, path, methods, args, unique_name(path, used_names))
            except (VideoError, ImageError, ValueError, RuntimeError, OSError) as error:
                failures.append(f"{path}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
                continue
            if chances is not None:
                top = top_classes(model, chances)
                writer.writerow([str(path)] + [v for _, name, p in top for v in (name, f"{p:.6f}")])
    print(f"explained {len(paths) - len(failures)} of {len(paths)} files into {args.out}")
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    return 1 if failures else 0


def explain_one(model, path: Path, methods: list[str], args: argparse.Namespace, name: str) -> np.ndarray | None:
    """One file: its maps, overlays and npz; the class probabilities (None for a backbone)."""
    preprocessing = clip_preprocessing(model)  # the model's own clip transform (its processor file's)
    if path.suffix.lower() in IMAGE_SUFFIXES and not is_video_path(path):
        clip, image = image_clip(model, path, preprocessing)
    else:
        image, frames = None, model_frames(model, path, preprocessing)
        clip = clip_tensor(model, frames, preprocessing)
    arrays, chances = {}, None
    for method in methods:
        result = video_map(model, clip, method, args.target)
        values, layout = result.values[0].detach().float().numpy(), result.layout
        if image is not None:  # the model read the image as a clip (repeated): draw it on every frame
            frames = np.repeat(image, layout.num_frames, axis=0)
        if result.logits is not None:
            chances = probabilities(model, result.logits)
            arrays["target"] = np.array(int(np.argmax(chances)) if args.target is None else args.target)
        arrays[method], arrays[f"{method}_frames"] = values, paint_frames(layout, values)
        shape = display_shape(frames.shape[1:3])
        pictures, _ = clip_overlays(frames, layout, values, shape, args.colormap, args.alpha)
        write = gif_bytes if args.video_format == "gif" else mp4_bytes
        (args.out / f"{name}_{method}.{args.video_format}").write_bytes(write(pictures, args.fps))
        arrays["token_boxes"] = layout.boxes[layout.patch_indices]
        arrays["token_frames"] = layout.frames[layout.patch_indices]
    arrays["frames"] = frames
    if chances is not None:
        arrays["probabilities"] = chances
    np.savez_compressed(args.out / f"{name}.npz", **arrays)
    return chances
