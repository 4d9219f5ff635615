"""Maps over a clip in, moving pictures out: each frame's map painted from a token layout, the maps blended onto the
frames, and the frames written as an animated GIF (PIL) or an H.264 MP4 (PyAV). Pure functions of arrays; no
streamlit.

One colour scale for the whole clip: every frame's map is scaled by the clip's lowest and highest value, so a colour
means the same value in every frame and the frames compare.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
from PIL import Image, ImageDraw

from vitviz.layout import TokenLayout
from vitviz.render.overlays import colormap_table

DEFAULT_FPS = 4.0  # a 16-frame clip plays in 4 s: slow enough to follow the map from frame to frame
MAX_FPS = 60.0
LEAST_SIDE = 320  # frames are drawn at least this many pixels on their longer side (a 32-pixel test clip too)


def display_shape(shape: tuple[int, int], least: int = LEAST_SIDE) -> tuple[int, int]:
    """(height, width) to draw frames of ``shape`` at: scaled by the smallest whole factor that brings the longer
    side to at least ``least`` pixels (whole factors keep every patch the same number of pixels)."""
    height, width = shape
    factor = max(1, -(-least // max(height, width)))
    return height * factor, width * factor


def paint_frames(layout: TokenLayout, values: np.ndarray, shape: tuple[int, int] | None = None) -> np.ndarray:
    """float32 (frames, height, width): ``values`` (one per token, or per patch token) painted on every input frame
    of ``layout`` by ``TokenLayout.paint`` (a tubelet's value on each frame it spans); ``shape`` (height, width)
    draws at another size than the input's. NaN where no token covers a pixel."""
    values = np.asarray(values, dtype=np.float32)
    return np.stack([layout.paint(values, frame=f, shape=shape) for f in range(layout.num_frames)])


def clip_range(maps: np.ndarray) -> tuple[float, float]:
    """(low, high) of the finite values of ``maps``: the colour scale's ends for the whole clip ((0, 1) if none)."""
    finite = np.asarray(maps, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def overlay_frames(
    frames: np.ndarray,
    maps: np.ndarray,
    colormap: str = "inferno",
    alpha: float = 0.5,
    value_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """uint8 (F, H, W, 3): each frame blended with its map's colours, ``(1 - alpha) * frame + alpha * colour``.

    ``frames`` uint8 (F, H, W, 3); ``maps`` float (F, H, W), at the frames' size (paint_frames with their shape).
    The colours are ``colormap``'s entry round(255 * (value - low) / (high - low)), with (low, high) the clip's
    range (clip_range) or ``value_range``; a pixel with no value (NaN) keeps the frame's own colour."""
    frames, maps = np.asarray(frames), np.asarray(maps, dtype=np.float64)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (F, H, W, 3); got {frames.dtype} {frames.shape}")
    if maps.shape != frames.shape[:3]:
        raise ValueError(f"maps must be (F, H, W) = {frames.shape[:3]}, one per frame at its size; got {maps.shape}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    low, high = clip_range(maps) if value_range is None else value_range
    scaled = np.clip((maps - low) / (high - low), 0.0, 1.0) if high > low else np.zeros_like(maps)
    known = np.isfinite(scaled)
    colours = colormap_table(colormap)[np.rint(np.where(known, scaled, 0.0) * 255).astype(np.int64)]
    blended = (1.0 - alpha) * frames + alpha * colours
    blended = np.where(known[..., None], blended, frames)
    return np.rint(blended).clip(0, 255).astype(np.uint8)


def resized_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 (F, height, width, 3): every frame scaled (bilinear; unchanged when already that size)."""
    frames = np.asarray(frames)
    if frames.shape[1:3] == (height, width):
        return frames
    return np.stack([np.asarray(Image.fromarray(f).resize((width, height), Image.BILINEAR)) for f in frames])


def clip_overlays(
    frames: np.ndarray,
    layout: TokenLayout,
    values: np.ndarray,
    shape: tuple[int, int] | None = None,
    colormap: str = "inferno",
    alpha: float = 0.5,
) -> tuple[np.ndarray, tuple[float, float]]:
    """(uint8 (F, H, W, 3), (low, high)): the clip's ``frames`` (as the model read them) scaled to ``shape`` (H, W;
    default their own size), each with the map ``values`` (one per token or patch token of ``layout``) painted on it
    and blended in, on one colour scale for the whole clip, whose ends are returned."""
    height, width = shape or frames.shape[1:3]
    maps = paint_frames(layout, values, (height, width))
    if len(maps) != len(frames):
        raise ValueError(f"the layout covers {len(maps)} frames; got {len(frames)}")
    value_range = clip_range(maps)
    return overlay_frames(resized_frames(frames, height, width), maps, colormap, alpha, value_range), value_range


def _checked(frames: np.ndarray, fps: float) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or not len(frames):
        raise ValueError(f"frames must be uint8 (F, H, W, 3) with F >= 1; got {frames.dtype} {frames.shape}")
    if not 0 < fps <= MAX_FPS:
        raise ValueError(f"fps must be in (0, {MAX_FPS:g}]; got {fps}")
    return frames


def gif_bytes(frames: np.ndarray, fps: float = DEFAULT_FPS) -> bytes:
    """An animated GIF of ``frames`` (uint8 (F, H, W, 3)) at ``fps`` frames a second, looping forever. Each frame
    gets its own 256-colour palette (PIL's median cut)."""
    frames = _checked(frames, fps)
    pictures = [Image.fromarray(frame) for frame in frames]
    buffer = io.BytesIO()
    duration = max(20, round(1000 / fps))  # GIF delays are in 10 ms steps; browsers slow anything under 20 ms
    pictures[0].save(
        buffer, format="GIF", save_all=True, append_images=pictures[1:], duration=duration, loop=0, optimize=False
    )
    return buffer.getvalue()


def mp4_bytes(frames: np.ndarray, fps: float = DEFAULT_FPS) -> bytes:
    """An H.264 MP4 (yuv420p, so every player opens it) of ``frames`` (uint8 (F, H, W, 3)) at ``fps`` frames a
    second. 4:2:0 needs even sides: an odd last row or column is repeated."""
    frames = _checked(frames, fps)
    _, height, width, _ = frames.shape
    frames = np.pad(frames, ((0, 0), (0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=_rate(fps))
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.options = {"crf": "18", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode():
            output.mux(packet)
    return buffer.getvalue()


def _rate(fps: float) -> Fraction:
    """The frame rate as a fraction (MP4 time bases are rational): 4 -> 4, 2.5 -> 5/2."""
    return Fraction(fps).limit_denominator(1000)


def token_at(layout: TokenLayout, frame: int, x: float, y: float) -> int | None:
    """The token (its index in ``layout``) that covers input pixel (x, y) of input frame ``frame``: the patch token
    whose box holds the point and whose frames hold the frame; None where none does."""
    patches = layout.patch_indices
    boxes, spans = layout.boxes[patches], layout.frames[patches]
    inside = (
        (boxes[:, 0] <= x) & (x < boxes[:, 2]) & (boxes[:, 1] <= y) & (y < boxes[:, 3])
        & (spans[:, 0] <= frame) & (frame <= spans[:, 1])
    )  # fmt: skip
    found = np.flatnonzero(inside)
    return int(patches[found[0]]) if len(found) else None


def outline_token(picture: np.ndarray, layout: TokenLayout, token: int, width: int = 2) -> np.ndarray:
    """uint8 (H, W, 3): ``picture`` (a frame drawn at any size) with token ``token``'s box outlined in white over
    black, so it shows on light and dark maps alike."""
    height, picture_width = picture.shape[:2]
    sy, sx = height / layout.image_size[0], picture_width / layout.image_size[1]
    x0, y0, x1, y1 = layout.boxes[token]
    left, top = int(round(x0 * sx)), int(round(y0 * sy))
    right, bottom = int(round(x1 * sx)) - 1, int(round(y1 * sy)) - 1
    image = Image.fromarray(np.ascontiguousarray(picture))
    draw = ImageDraw.Draw(image)
    draw.rectangle((left, top, right, bottom), outline=(0, 0, 0), width=width + 2)
    draw.rectangle((left + 1, top + 1, right - 1, bottom - 1), outline=(255, 255, 255), width=width)
    return np.asarray(image)
