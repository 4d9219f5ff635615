"""What a ViT checks of its input before embedding it: one clear line for a tensor of the wrong shape or size, the
frames a video model reads (V-JEPA 2's clips of any length at its crop size, ``check_vjepa2_clip``), never a traceback
from deep inside the model."""

from __future__ import annotations

import torch

from vitviz.model.config import ViTConfig


def check_input(c: ViTConfig, pixel_values: torch.Tensor) -> None:
    """Refuse, in one line, pixel values the model of config ``c`` cannot read: images (B, C, H, W), or a video
    model's clips (B, frames, C, H, W), with H and W positive multiples of the patch size."""
    if c.is_video and c.rotary == "vjepa2":  # rotary positions along time: clips of any length, at one size
        check_vjepa2_clip(c, tuple(pixel_values.shape))
        return
    if c.is_video and pixel_values.ndim == 4:  # an image: its processor would give it as a clip of one frame
        raise ValueError(
            f"this video model needs clips of {c.num_frames} frames, (B, {c.num_frames}, {c.num_channels}, H, W); "
            f"got images {tuple(pixel_values.shape)}: it reads no single image (its positions are for "
            f"{c.num_frames} frames), so give it {c.num_frames} frames of a video"
        )
    if c.is_video and (pixel_values.ndim != 5 or pixel_values.shape[1:3] != (c.num_frames, c.num_channels)):
        raise ValueError(
            f"this video model reads clips of shape (B, {c.num_frames}, {c.num_channels}, H, W) (frames, then "
            f"channels, as transformers' video processors give them); got {tuple(pixel_values.shape)}"
        )
    if not c.is_video and (pixel_values.ndim != 4 or pixel_values.shape[1] != c.num_channels):
        raise ValueError(f"expected pixel_values of shape (B, {c.num_channels}, H, W), got {tuple(pixel_values.shape)}")
    H, W = pixel_values.shape[-2:]
    if H % c.patch_size or W % c.patch_size or H == 0 or W == 0:
        raise ValueError(
            f"image {H}x{W} is not a positive multiple of the patch size {c.patch_size}; "
            f"resize or crop it, e.g. to {max(1, round(H / c.patch_size)) * c.patch_size}x"
            f"{max(1, round(W / c.patch_size)) * c.patch_size}"
        )


def check_vjepa2_clip(config: ViTConfig, shape: tuple[int, ...]) -> None:
    """Refuse, in one line, a clip of this shape that a V-JEPA 2 model cannot position. It reads clips (B, frames, C,
    H, W) of any number of frames in whole tubelets (fewer frames than a tubelet, an image among them, are repeated
    to fill one, as transformers does), at its crop size only: transformers makes each token's rotary position from
    its index on the crop's grid, so at another size every token would be read at a wrong position."""
    c = config
    frames = shape[1] if len(shape) == 5 else 0
    if len(shape) != 5 or shape[2] != c.num_channels or frames == 0:
        raise ValueError(
            f"V-JEPA 2 reads clips of shape (B, frames, {c.num_channels}, H, W) (an image is a clip of one frame, as "
            f"its video processor gives it); got {shape}"
        )
    if frames > c.tubelet_size and frames % c.tubelet_size:
        raise ValueError(
            f"V-JEPA 2 reads frames in tubelets of {c.tubelet_size}: give it a multiple of {c.tubelet_size} frames "
            f"(it was trained on clips of {c.num_frames}); got {frames}"
        )
    if tuple(shape[-2:]) != c.image_hw:
        height, width = c.image_hw
        raise ValueError(
            f"V-JEPA 2's rotary positions are for frames of {height}x{width} pixels (its crop_size); got "
            f"{shape[-2]}x{shape[-1]}: resize and centre-crop the clip to {height}x{width}, as its video processor does"
        )
