"""What a notebook view sends to the browser, packed small: maps as uint8 bytes on one shared colour scale, photos as
JPEG data URLs no larger than they are drawn, the colour map as one 256-entry table. Pure functions of arrays.

A map of N patches costs N bytes per image (base64: 4/3 of that), whatever the model: a ViT-L at 518 px
(37 x 37 = 1,369 patches) sends 1.8 kB per image per change. The photo is sent once, downscaled to at most
``PHOTO_SIDE`` pixels a side, and smaller where many photos would weigh more than ``PHOTO_BUDGET`` together
(``fit_photos``). ``payload_bytes`` counts what a view's synced state weighs; every view checks it is at most
``PAYLOAD_LIMIT`` when it is made, and refuses in one line otherwise (tests/test_notebook_view.py).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence

import numpy as np
from PIL import Image

from vitviz.render.overlays import colormap_table

PAYLOAD_LIMIT = 2_000_000  # bytes: what one view may send to the browser
PHOTO_SIDE = 384  # pixels: the longest side of a photo as sent (it is drawn at most this large)
PHOTO_BUDGET = 1_500_000  # bytes: what a view's photos may weigh together; the rest is left to maps and settings
MIN_PHOTO_SIDE = 48  # pixels: photos are shrunk to fit PHOTO_BUDGET down to this, no further
JPEG_QUALITY = 85


def scale_of(maps: Sequence[np.ndarray]) -> tuple[float, float]:
    """The one colour scale (low, high) of several images' maps: their common minimum and maximum (NaN, a cell no
    value covers, left out; (0, 0) when there is no value at all)."""
    finite = [m[np.isfinite(m)] for m in (np.asarray(m, dtype=np.float64) for m in maps)]
    finite = [f for f in finite if f.size]
    if not finite:
        return 0.0, 0.0
    return min(float(f.min()) for f in finite), max(float(f.max()) for f in finite)


def quantize(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Values -> uint8 levels 0..255 on the scale (low, high): round(255 * (v - low) / (high - low)); a flat scale
    gives all zeros. The level is also the colour map's table entry, as render.overlays.colorize picks it."""
    values = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=low)  # NaN: drawn clear (pack_maps' masks)
    if not high > low:
        return np.zeros(values.shape, dtype=np.uint8)
    return np.clip(np.rint((values - low) / (high - low) * 255), 0, 255).astype(np.uint8)


def encode_bytes(levels: np.ndarray) -> str:
    """uint8 array -> base64 text (row-major), as the browser's atob reads it back."""
    return base64.b64encode(np.ascontiguousarray(levels, dtype=np.uint8).tobytes()).decode("ascii")


def decode_bytes(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """base64 text -> the uint8 array of ``shape``: encode_bytes undone (for tests and readers of exports)."""
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape)


def pack_maps(maps: Sequence[np.ndarray]) -> dict:
    """Several images' (rows, cols) maps of one shape on one colour scale: {"low", "high", "rows", "cols", "maps":
    [base64 uint8 per image]}, and "masks" (base64, 1 where a cell has no value: NaN, drawn clear) where any has
    none. What the view's ``frame`` trait holds and the script draws."""
    if not maps:
        raise ValueError("pack_maps needs at least one map")
    rows, cols = np.asarray(maps[0]).shape
    if any(np.asarray(m).shape != (rows, cols) for m in maps):
        raise ValueError(f"pack_maps packs maps of one shape; got {[np.asarray(m).shape for m in maps]}")
    low, high = scale_of(maps)
    packed = {
        "low": low,
        "high": high,
        "rows": int(rows),
        "cols": int(cols),
        "maps": [encode_bytes(quantize(m, low, high)) for m in maps],
    }
    missing = [np.isnan(np.asarray(m, dtype=np.float64)) for m in maps]
    if any(m.any() for m in missing):
        packed["masks"] = [encode_bytes(m.astype(np.uint8)) for m in missing]
    return packed


def colormap_base64(name: str) -> str:
    """The colour map ``name`` (render.overlays.COLORMAPS) as 256 x RGB bytes in base64: the legend's and map's
    colours, the same table the PNGs are drawn with."""
    return encode_bytes(colormap_table(name))


def photo_data_url(image: Image.Image, side: int = PHOTO_SIDE, quality: int = JPEG_QUALITY) -> str:
    """The photo as a JPEG data URL (``quality``), downscaled so its longest side is at most ``side`` pixels."""
    photo = image.convert("RGB")
    scale = side / max(photo.size)
    if scale < 1:
        photo = photo.resize((max(1, round(photo.width * scale)), max(1, round(photo.height * scale))), Image.BILINEAR)
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def fit_photos(
    images: Sequence[Image.Image], entries: Sequence[dict], side: int = PHOTO_SIDE, budget: int = PHOTO_BUDGET
) -> list[dict]:
    """Each entry with its photo as "src" (photo_data_url), every photo downscaled alike until they weigh at most
    ``budget`` bytes together, or down to MIN_PHOTO_SIDE pixels a side (the view's own check then refuses it)."""
    while True:
        sent = [
            dict(entry) | {"src": photo_data_url(image, side)} for image, entry in zip(images, entries, strict=True)
        ]
        size = payload_bytes({"photos": sent})
        if size <= budget or side <= MIN_PHOTO_SIDE:
            return sent
        side = max(MIN_PHOTO_SIDE, min(side - 1, int(side * (budget / size) ** 0.5 * 0.95)))


def payload_bytes(state: dict) -> int:
    """What ``state`` (a view's synced traits) weighs as the JSON the kernel sends."""
    return len(json.dumps(state, separators=(",", ":")).encode("utf-8"))
