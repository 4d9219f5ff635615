"""Bytes in, safe RGB image out; image in, model tensor out.

``load_image`` is the one intake for uploads and files: it refuses what is not an image
(or is too large to decode safely) with an ``ImageError`` that names the problem.
``Preprocessing`` is the per-model recipe (resize, crop, normalise). It is a plain
dataclass so a checkpoint can store it as a dict, and it is callable, so
``model.transform(image)`` gives the (3, H, W) input tensor.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import struct
import warnings
import zlib
from dataclasses import asdict, dataclass, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from vitviz.messages import echo

MAX_PIXELS = 89_478_485  # PIL's own decompression-bomb threshold (about 89 Mpx)
WORKING_PIXELS = 16_000_000  # larger JPEGs are decoded at a reduced scale (draft mode)
MAX_JPEG_PIXELS = 2 * MAX_PIXELS  # above this PIL itself refuses to open a file (a decompression bomb)
MAX_FILE_BYTES = 1 << 30  # a path's file is read whole: 1 GiB, far above any photo PIL decodes under MAX_PIXELS
MAX_ASPECT_RATIO = 100  # longer side / shorter side; beyond this, resizing the shorter side explodes memory
FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}  # the files a folder's images are
# Signatures of common files that are not images vitviz reads, so the error can say what the file is.
_NOT_IMAGES = [
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a program (ELF executable)"),
    (b"MZ", "a program (Windows executable)"),
    (b"\x00\x00\x01\x00", "an ICO icon"),
    (b"8BPS", "a Photoshop document"),
    (b"\x80", "a Python pickle"),
]
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IMAGE_SIGNATURES = [
    (b"\xff\xd8\xff", "JPEG"),
    (_PNG_SIGNATURE, "PNG"),
    (b"GIF8", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"RIFF", "WEBP"),
]


def image_files(folder: str | Path) -> list[Path]:
    """The image files under ``folder``, in its sub-folders too, sorted by path: the one folder walk of vitviz (every
    command, the dataset index's folder sources and SAE training use it). An image is a file with one of
    IMAGE_SUFFIXES (any case); hidden files (a name starting with ".", such as macOS's ._ files) are left out."""
    return sorted(
        p
        for p in Path(folder).rglob("*")
        if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


@dataclass(frozen=True, eq=False)
class ImageFile:
    """An image file as it arrived (not yet decoded), with the sha256 digest of its bytes, computed once:
    a cheap key for everything computed from it. Defined here, not in app.py, so Streamlit's caches can
    pickle it under a stable name."""

    data: bytes
    key: str

    @classmethod
    def of(cls, data: bytes) -> ImageFile:
        return cls(data, hashlib.sha256(data).hexdigest())


class ImageError(ValueError):
    """The bytes are not an image vitviz can use; the message says why."""


def read_image_bytes(source: bytes | bytearray | memoryview | str | os.PathLike) -> bytes:
    """The bytes of ``source``: bytes as they are, or a path's (str or PathLike) file read whole, as PIL, timm and
    transformers users pass a photo. A path that is missing, a folder, above MAX_FILE_BYTES or unreadable is an
    ``ImageError`` that names it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"an image is given as bytes or a path (str or PathLike), not {type(source).__name__}")
    path = Path(source)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise ImageError(f"{path} is a folder, not an image file")
        if size > MAX_FILE_BYTES:
            raise ImageError(f"{path} is {size / 1e6:,.0f} MB, above the limit of {MAX_FILE_BYTES / 1e6:,.0f} MB")
        return path.read_bytes()
    except FileNotFoundError:
        raise ImageError(f"{path}: no such file") from None
    except OSError as error:
        raise ImageError(f"{path} cannot be read: {error.strerror or error}") from None


def load_image(data: bytes | str | os.PathLike, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Decode an image file into an RGB image: EXIF orientation applied, transparency on ``background``.

    ``data`` is the file's bytes or its path (str or PathLike; read by ``read_image_bytes``). Refuses missing,
    empty, unknown, oversized (checked before decoding) and corrupt files with ``ImageError``. Animated images
    give their first frame. JPEGs above WORKING_PIXELS are decoded at a reduced scale (JPEG draft mode), so a
    100-megapixel photo loads quickly. 16-bit and 32-bit greyscale are scaled to 8 bits by their range instead
    of being clipped.
    """
    data = read_image_bytes(data)
    if not data:
        raise ImageError("the file is empty")
    if data.startswith(_PNG_SIGNATURE):
        _check_png_chunks(data)
    try:
        with warnings.catch_warnings():  # sizes are checked below, with a message of our own
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.UnidentifiedImageError:
        raise ImageError(f"{_describe(data)}, not an image in a supported format ({', '.join(FORMATS)})") from None
    except Image.DecompressionBombError as error:  # PIL's own check on the declared size, before decoding
        declared = re.search(r"\((\d+) pixels\)", str(error))
        size = f"declares {int(declared.group(1)) / 1e6:,.0f} Mpx, " if declared else "is "
        raise ImageError(
            f"the image {size}above the limit of {MAX_PIXELS / 1e6:.0f} Mpx (a decompression bomb?)"
        ) from None
    except (OSError, ValueError, SyntaxError) as error:
        kind = next((name for signature, name in _IMAGE_SIGNATURES if data.startswith(signature)), "image")
        raise ImageError(f"the {kind} file is corrupt or truncated: {error}") from None
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageError(f"image has no pixels ({width}x{height})")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageError(
            f"image is {width}x{height}, more than {MAX_ASPECT_RATIO} times longer than it is wide; "
            "crop it to the part you want explained"
        )
    if image.format == "JPEG" and width * height > WORKING_PIXELS and width * height <= MAX_JPEG_PIXELS:
        # decode at 1/2, 1/4 or 1/8 scale straight from the DCT: fast, and never the full bitmap
        # draft picks the strongest reduction that still covers the requested size, so asking for
        # half the working scale gives between a quarter of WORKING_PIXELS and all of it
        scale = math.sqrt(WORKING_PIXELS / (width * height)) / 2
        image.draft("RGB", (max(1, int(width * scale)), max(1, int(height * scale))))
    elif width * height > MAX_PIXELS:
        raise ImageError(
            f"the image is {width}x{height} = {width * height / 1e6:.1f} Mpx, "
            f"above the limit of {MAX_PIXELS / 1e6:.0f} Mpx"
        )
    try:
        image.seek(0)
        image.load()  # decode now, so a truncated file fails here rather than later
        image = ImageOps.exif_transpose(image)
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as error:
        raise ImageError(f"the {image.format} file is corrupt or truncated: {error}") from None
    return _to_rgb(image, background)


def _describe(data: bytes) -> str:
    """What a file that is not a supported image seems to be, for the error message."""
    for signature, name in _NOT_IMAGES:
        if data.startswith(signature):
            return f"this is {name}"
    for signature, name in _IMAGE_SIGNATURES:
        if data.startswith(signature):
            return f"this starts like a {name} file but its header is damaged"
    head = data[:512].lstrip().lower()
    if head.startswith((b"<svg", b"<?xml")) or b"<svg" in head:
        return "this is SVG or XML text (vector images are not supported: export a PNG)"
    if head.startswith((b"<!doctype html", b"<html")):
        return "this is an HTML page"
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return "the file's content is unrecognised"
    return "this is a text file"


def _check_png_chunks(data: bytes) -> None:
    """Refuse a PNG whose chunks are cut short or fail their CRC; PIL does not check image data CRCs."""
    position = len(_PNG_SIGNATURE)
    while position < len(data):
        if position + 12 > len(data):
            raise ImageError("the PNG file is truncated (a chunk header is cut off)")
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        end = position + 8 + length
        if end + 4 > len(data):
            raise ImageError(f"the PNG file is truncated (chunk {kind.decode('latin-1')} is cut off)")
        (crc,) = struct.unpack(">I", data[end : end + 4])
        if zlib.crc32(data[position + 4 : end]) != crc:
            name = kind.decode("latin-1")
            raise ImageError(f"the PNG file is corrupt: chunk {name} fails its CRC check")
        if kind == b"IEND":
            return
        position = end + 4
    raise ImageError("the PNG file is truncated (no IEND chunk)")


def _to_rgb(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")  # colours under transparent pixels are hidden by the composite
        canvas = Image.new("RGB", rgba.size, background)
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    if image.mode.startswith("I;16"):
        values = np.asarray(image, dtype=np.float64) / 65535.0  # 16-bit: by the type's full range
        return Image.fromarray(np.rint(values * 255).astype(np.uint8)).convert("RGB")
    if image.mode in ("I", "F"):
        values = np.asarray(image, dtype=np.float64)
        finite = values[np.isfinite(values)]
        low, high = (
            (0.0, 1.0)
            if image.mode == "F" and finite.size and finite.min() >= 0 and finite.max() <= 1
            else ((float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0))
        )
        scaled = (np.nan_to_num(values, nan=low) - low) / (high - low) if high > low else np.zeros_like(values)
        return Image.fromarray(np.rint(np.clip(scaled, 0, 1) * 255).astype(np.uint8)).convert("RGB")
    return image.convert("RGB")


MAX_SIDE = 8192  # pixels: a resize or crop beyond this is a mistake (ViTs take 224 to 1,024 pixels a side)
MAX_CHANNELS = 4  # mean and std values: one per channel of the (RGB) input, or one for all
Interpolation = Literal["nearest", "bilinear", "bicubic"]
_INTERPOLATIONS: dict[str, InterpolationMode] = {
    "nearest": InterpolationMode.NEAREST,
    "bilinear": InterpolationMode.BILINEAR,
    "bicubic": InterpolationMode.BICUBIC,
}


@dataclass(frozen=True)
class Preprocessing:
    """Resize, centre-crop, scale to [0, 1] and normalise, in torchvision's conventions."""

    resize: int | tuple[int, int] | None = 224  # int: shorter side to this; (h, w): exactly this
    crop: int | tuple[int, int] | None = None  # centre crop after resizing; None keeps the resized image
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    interpolation: Interpolation = "bilinear"

    def __post_init__(self) -> None:
        # tuples, not lists, so the object stays hashable after a round trip through a dict
        for name in ("resize", "crop", "mean", "std"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        problems = _preprocessing_problems(self)
        if problems:
            raise ValueError("invalid preprocessing: " + "; ".join(problems))

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """PIL image -> float tensor (C, H, W), normalised."""
        if self.resize is not None:
            size = [self.resize] if isinstance(self.resize, int) else list(self.resize)
            image = TF.resize(image, size, interpolation=_INTERPOLATIONS[self.interpolation], antialias=True)
        if self.crop is not None:
            image = TF.center_crop(image, [self.crop] if isinstance(self.crop, int) else list(self.crop))
        tensor = TF.pil_to_tensor(image).float().div_(255)  # (C, H, W) in [0, 1]
        return TF.normalize(tensor, mean=list(self.mean), std=list(self.std))

    def crop_box(self, width: int, height: int) -> tuple[float, float, float, float]:
        """The region of the original image the model sees, as (left, top, right, bottom) in its pixels.

        Follows torchvision's resize and centre-crop arithmetic, so a patch map drawn into this
        box lands on the pixels that produced it, even when the preset crops the photo.
        """
        resized_w, resized_h = width, height
        if isinstance(self.resize, int):
            short, long = min(width, height), max(width, height)
            new_short, new_long = self.resize, int(self.resize * long / short)
            resized_w, resized_h = (new_short, new_long) if width <= height else (new_long, new_short)
        elif self.resize is not None:
            resized_h, resized_w = self.resize
        left, top, right, bottom = 0.0, 0.0, float(resized_w), float(resized_h)
        if self.crop is not None:
            crop_h, crop_w = (self.crop, self.crop) if isinstance(self.crop, int) else self.crop
            top, left = float(round((resized_h - crop_h) / 2.0)), float(round((resized_w - crop_w) / 2.0))
            right, bottom = left + crop_w, top + crop_h
        sx, sy = width / resized_w, height / resized_h
        return left * sx, top * sy, right * sx, bottom * sy

    @property
    def output_size(self) -> tuple[int, int] | None:
        """(height, width) of every output, or None when it depends on the image's shape."""
        if self.crop is not None:
            return (self.crop, self.crop) if isinstance(self.crop, int) else self.crop
        return self.resize if isinstance(self.resize, tuple) else None  # shorter side only: depends on the image

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Preprocessing:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown preprocessing fields {unknown}; known fields are {sorted(known)}")
        return cls(**values)


def _preprocessing_problems(preprocessing: Preprocessing) -> list[str]:
    """What is wrong with a Preprocessing's values, checked when it is made (so when a model's file is read): sizes
    that are not whole numbers of pixels from 1 to MAX_SIDE, a mean or std that is not a finite number per channel."""
    problems = []
    for name in ("resize", "crop"):
        value = getattr(preprocessing, name)
        sides = value if isinstance(value, tuple) and len(value) == 2 else (value,)
        if value is not None and not all(_is_side(side) for side in sides):
            problems.append(
                f"{name} must be a side or (height, width) in pixels, from 1 to {MAX_SIDE:,}; got {echo(value, 80)}"
            )
    for name in ("mean", "std"):
        values = getattr(preprocessing, name)
        numbers = isinstance(values, tuple) and all(_is_finite(v) for v in values)
        if not numbers or not 1 <= len(values) <= MAX_CHANNELS or (name == "std" and min(values) <= 0):
            kind = "positive numbers" if name == "std" else "finite numbers"
            problems.append(f"{name} must be 1 to {MAX_CHANNELS} {kind}, one per channel; got {echo(values, 80)}")
    if not problems and len(preprocessing.mean) != len(preprocessing.std):
        problems.append(
            f"mean and std must have as many values; got {len(preprocessing.mean)} and {len(preprocessing.std)}"
        )
    interpolation = preprocessing.interpolation
    if not isinstance(interpolation, str) or interpolation not in _INTERPOLATIONS:
        problems.append(f"interpolation must be one of {sorted(_INTERPOLATIONS)}; got {echo(interpolation)}")
    return problems


def _is_side(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and 1 <= value <= MAX_SIDE


def _is_finite(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
