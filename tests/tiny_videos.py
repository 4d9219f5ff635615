"""Tiny random video model folders (transformers' VideoMAE and ViViT classes, saved with save_pretrained) and short
clips of moving shapes made with PyAV, for the tests of `vitviz explain` on videos and of the Video page."""

from __future__ import annotations

from pathlib import Path

from hostile_videos import squares
from test_import_video import hf_model

CLASSES = [f"action {i}" for i in range(5)]


def tiny_video_folder(folder: Path, family: str = "videomae") -> Path:
    """A save_pretrained folder of a tiny random ``family`` classifier (32-pixel frames, 4 frames, 2 blocks of 4
    heads, 5 classes named "action i"); written once per folder."""
    if not (folder / "config.json").is_file():
        model = hf_model(family)
        model.config.id2label = dict(enumerate(CLASSES))
        model.config.label2id = {name: i for i, name in enumerate(CLASSES)}
        model.save_pretrained(folder)
    return folder


def moving_clip(frames: int = 12, container: str = "mp4") -> bytes:
    """A short H.264 clip (WebM: VP9) of a white square moving right over black, 48 x 32 pixels or so."""
    codec = "libvpx-vp9" if container == "webm" else "libx264"
    return squares(frames, codec=codec, container=container, side=16, step=2)
