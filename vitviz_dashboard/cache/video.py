"""What the Video page keeps between runs, each in the page's memory budget (budget.py) and keyed by the model's
ModelKey, the video's digest and the choices: the clip's frames, a map over the whole clip (rollout or relevance,
with the prediction), a clicked token's attention per head, and the frames x frames attention of a block; and the
sample clip offered before any upload, keyed by its length. The model and the frames pass unhashed (``_model``,
``_frames``), since the key and the digest fix them.

Everything is a call into vitviz (vitviz.video_clips, vitviz.explain); progress goes to ``_slot``, an st.empty()
the page draws in every run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from vitviz import explain
from vitviz.layout import TokenLayout
from vitviz.video_clips import clip_probabilities, clip_tensor, model_frames, video_map
from vitviz_dashboard.cache.budget import kept
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.video.sample import FRAMES, sample_clip


@dataclass(frozen=True)
class ClipMap:
    """One map over a clip: a value per patch token (the layout's order), the tokens' layout, and the prediction."""

    values: np.ndarray  # float32 (N,)
    layout: TokenLayout
    probabilities: np.ndarray  # float32 (classes,); empty for a backbone
    target: int  # the class the map is of (relevance), or the top class (rollout); -1 for a backbone


def digest(data: bytes) -> str:
    """The video's key: the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


@kept()
def sample_video(frames: int = FRAMES) -> bytes:
    """The sample clip of ``frames`` frames, made once and kept like every result (vitviz_dashboard/video/sample.py:
    a few hundred ms, a few hundred kB)."""
    return sample_clip(frames)


@kept()
def frames(key: ModelKey, video: str, *, _model, _data: bytes) -> np.ndarray:
    """uint8 (frames, H, W, 3): the clip the model reads, sampled, scaled and cropped by its own clip transform
    (vitviz.video_clips.model_frames)."""
    return model_frames(_model, _data)


def _clip(key: ModelKey, model, frames: np.ndarray) -> torch.Tensor:
    """The clip the model reads: the frames rescaled and normalised as its clip transform (its processor) says."""
    return clip_tensor(model, frames)


def _progress(slot, text: str, blocks: int):
    """A callback for the explainers' progress, drawn in ``slot``: takes (done) or (done, total) blocks."""

    def update(done: int, total: int | None = None) -> None:
        if slot is not None:
            total = total or blocks
            slot.progress(min(1.0, done / max(total, 1)), text=f"{text}: block {min(done, total)} of {total}")

    return update


@kept()
def clip_map(key: ModelKey, video: str, method: str, target: int | None, *, _model, _frames, _slot=None) -> ClipMap:
    """The ``method`` map (rollout, relevance of ``target``: None for the top class) over the clip, with the
    model's prediction (video_clips.clip_probabilities); progress per block in ``_slot``."""
    clip = _clip(key, _model, _frames)
    progress = _progress(_slot, f"Computing the {method} over {len(_frames)} frames", _model.config.num_layers)
    try:
        result = video_map(_model, clip, method, target, progress)
    finally:
        if _slot is not None:
            _slot.empty()
    values = result.values[0].detach().float().numpy()
    chances = clip_probabilities(_model, clip, result.logits)
    if not len(chances):  # a backbone (V-JEPA 2's encoder): maps, no prediction
        return ClipMap(values, result.layout, chances, -1)
    chosen = int(np.argmax(chances)) if target is None else target
    return ClipMap(values, result.layout, chances, chosen)


@kept()
def token_attention(
    key: ModelKey, video: str, layer: int, token: int, part: str = "spatial", *, _model, _frames
) -> np.ndarray:
    """float32 (heads, N): what token ``token`` (its index in the layout) attends to in block ``layer``, per head,
    over every patch token of the clip; a divided block's ``part``: "spatial" (its frame) or "temporal" (its patch
    in every frame)."""
    clip = _clip(key, _model, _frames)
    rows = explain.video_patch_attention(_model, clip, layer=layer, token=token, part=part)
    return rows[0].detach().float().numpy()


@kept()
def time_attention(key: ModelKey, video: str, layer: int, *, _model, _frames) -> tuple[np.ndarray, np.ndarray]:
    """float32 (heads, F', F') and (heads, F'): in block ``layer``, the attention each token frame's tokens give to
    each other token frame, and the readout's attention per token frame."""
    clip = _clip(key, _model, _frames)
    between = explain.frame_attention(_model, clip, layer=layer)[0].detach().float().numpy()
    readout = explain.readout_per_frame(_model, clip, layer=layer)[0].detach().float().numpy()
    return between, readout
