"""A corpus of hostile and awkward uploads, generated in code (no binary fixtures).

Each case is a name, a function that builds the file's bytes, and what `load_image` must do
with it: either return an RGB image with a known size and known pixels, or raise
`ImageError` with a message that names the problem. Used by tests/test_hostile_images.py
and, for the bad cases, by tests/test_app_images.py (through the upload widget).

    python tests/hostile_images.py      # print each case and what load_image did with it
"""

from __future__ import annotations

import io
import pickle
import random
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

RED, BLUE, WHITE, BLACK = (250, 0, 0), (0, 0, 250), (255, 255, 255), (0, 0, 0)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], bytes]
    size: tuple[int, int] | None = None  # a good case: the returned image's (width, height)
    pixels: dict = field(default_factory=dict)  # a good case: {(x, y): (r, g, b)}
    tolerance: int = 0  # per channel, for lossy formats
    error: str | None = None  # a bad case: a regular expression the ImageError message must match

    @property
    def good(self) -> bool:
        return self.error is None


def encode(image: Image.Image, format: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **kwargs)
    return buffer.getvalue()


def solid(color=RED, size=(40, 30), mode="RGB") -> Image.Image:
    return Image.new(mode, size, color)


def two_frames(format: str, **kwargs) -> bytes:
    """An animation whose first frame is red and second blue."""
    first, second = solid(RED, (16, 16)), solid(BLUE, (16, 16))
    return encode(first, format, save_all=True, append_images=[second], **kwargs)


def transparent_rgba() -> Image.Image:
    image = Image.new("RGBA", (8, 8), (0, 255, 0, 0))  # green hidden under full transparency
    image.putpixel((0, 0), (*RED, 255))
    return image


def grey_alpha() -> bytes:
    image = Image.new("LA", (8, 8), (0, 0))  # black hidden under full transparency
    image.putpixel((0, 0), (0, 255))  # one opaque black pixel
    return encode(image, "PNG")


def palette_with_transparency() -> bytes:
    image = Image.new("P", (4, 4), 1)
    image.putpalette([*BLACK, *RED] + [0] * 762)  # index 1 is red, and it is the transparent index
    image.putpixel((0, 0), 0)
    return encode(image, "PNG", transparency=1)


def sixteen_bit_grey() -> bytes:
    return encode(Image.fromarray(np.full((4, 4), 1000, dtype=np.uint16)), "PNG")  # 1000 of 65535


def float_grey_ramp() -> bytes:
    return encode(Image.fromarray(np.linspace(0.0, 1.0, 16, dtype=np.float32).reshape(4, 4), mode="F"), "TIFF")


def one_bit_checker() -> bytes:
    image = Image.new("1", (8, 8), 0)
    image.putpixel((1, 0), 1)
    return encode(image, "PNG")


def rotated_by_exif() -> bytes:
    image = solid(RED, (40, 20))
    image.paste(BLUE, (20, 0, 40, 20))  # left half red, right half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise: the left half ends up on top
    return encode(image, "JPEG", exif=exif, quality=95)


def png_with_bad_crc() -> bytes:
    data = bytearray(encode(solid(), "PNG"))
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4 : idat])
    data[idat + 4 + length] ^= 0xFF  # flip the first byte of the IDAT chunk's CRC
    return bytes(data)


def cut_in_half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def noise(size=(64, 64)) -> Image.Image:
    return Image.effect_noise(size, 60).convert("RGB")  # incompressible, so half the file is half the pixels


def png_declaring(width: int, height: int) -> bytes:
    """A valid few-byte PNG whose header claims width x height pixels."""
    data = encode(Image.new("L", (1, 1)), "PNG")
    ihdr = data.index(b"IHDR")
    body = b"IHDR" + struct.pack(">II", width, height) + data[ihdr + 12 : ihdr + 17]
    return data[: ihdr - 4] + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body)) + data[ihdr + 21 :]


def gif_declaring(width: int, height: int) -> bytes:
    data = encode(Image.new("P", (1, 1)), "GIF")
    return data[:6] + struct.pack("<HH", width, height) + data[10:]


def zip_of_a_png() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("photo.png", encode(solid(), "PNG"))
    return buffer.getvalue()


def random_bytes() -> bytes:
    return random.Random(0).randbytes(4096)


def png_with_a_huge_text_chunk() -> bytes:
    """A small PNG whose zTXt chunk inflates to 64 MB: the metadata, not the pixels, is the bomb."""
    data = encode(solid((10, 200, 10), (8, 8)), "PNG")
    body = b"zTXt" + b"comment\x00\x00" + zlib.compress(b"\x00" * 64_000_000, 9)
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    iend = data.index(b"IEND") - 4
    return data[:iend] + chunk + data[iend:]


CORPUS: list[Case] = [
    # -- decoded: every supported format, every awkward mode --
    Case("jpeg", lambda: encode(solid(), "JPEG", quality=95), (40, 30), {(20, 15): RED}, tolerance=12),
    Case("progressive-jpeg", lambda: encode(solid(), "JPEG", progressive=True), (40, 30), {(5, 5): RED}, tolerance=12),
    Case(
        "greyscale-jpeg", lambda: encode(solid(128, mode="L"), "JPEG"), (40, 30), {(3, 3): (128, 128, 128)}, tolerance=2
    ),
    Case("png", lambda: encode(solid(), "PNG"), (40, 30), {(0, 0): RED, (39, 29): RED}),
    Case("interlaced-png", lambda: encode(noise((9, 7)), "PNG", interlace=1), (9, 7)),
    Case("webp-lossless", lambda: encode(solid(), "WEBP", lossless=True), (40, 30), {(20, 15): RED}),
    Case("bmp", lambda: encode(solid(), "BMP"), (40, 30), {(20, 15): RED}),
    Case("tiff", lambda: encode(solid(), "TIFF"), (40, 30), {(20, 15): RED}),
    Case("animated-gif", lambda: two_frames("GIF"), (16, 16), {(8, 8): RED}, tolerance=8),
    Case("animated-webp", lambda: two_frames("WEBP", lossless=True), (16, 16), {(8, 8): RED}),
    Case("apng", lambda: two_frames("PNG"), (16, 16), {(8, 8): RED}),
    Case("multipage-tiff", lambda: two_frames("TIFF"), (16, 16), {(8, 8): RED}),
    Case("rgba-hidden-colour", lambda: encode(transparent_rgba(), "PNG"), (8, 8), {(5, 5): WHITE, (0, 0): RED}),
    Case(
        "webp-rgba",
        lambda: encode(transparent_rgba(), "WEBP", lossless=True, exact=True),
        (8, 8),
        {(5, 5): WHITE, (0, 0): RED},
    ),
    Case("grey-alpha", grey_alpha, (8, 8), {(5, 5): WHITE, (0, 0): BLACK}),
    Case("palette-transparency", palette_with_transparency, (4, 4), {(2, 2): WHITE, (0, 0): BLACK}),
    Case(
        "cmyk-jpeg",
        lambda: encode(solid((0, 255, 255, 0), mode="CMYK"), "JPEG"),
        (40, 30),
        {(5, 5): (255, 0, 0)},
        tolerance=30,
    ),
    Case("16-bit-grey", sixteen_bit_grey, (4, 4), {(0, 0): (4, 4, 4)}),  # rint(1000 / 65535 * 255): not clipped
    Case("float-grey", float_grey_ramp, (4, 4), {(0, 0): BLACK, (3, 3): WHITE}),
    Case("1-bit", one_bit_checker, (8, 8), {(0, 0): BLACK, (1, 0): WHITE}),
    Case("exif-rotated", rotated_by_exif, (20, 40), {(10, 5): RED, (10, 35): BLUE}, tolerance=40),
    Case("1x1", lambda: encode(solid((9, 8, 7), (1, 1)), "PNG"), (1, 1), {(0, 0): (9, 8, 7)}),
    Case("1x100", lambda: encode(solid((9, 8, 7), (1, 100)), "PNG"), (1, 100), {(0, 99): (9, 8, 7)}),
    # -- refused: not images, unsupported, damaged, or too large --
    Case("empty", lambda: b"", error="empty"),
    Case("text", lambda: b"just some notes\nabout a cat\n", error="text file"),
    Case("html", lambda: b"<!DOCTYPE html><html><body><img src=x></body></html>", error="HTML page"),
    Case(
        "svg",
        lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="9" height="9"/></svg>',
        error="SVG",
    ),
    Case("pdf", lambda: b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n", error="PDF"),
    Case("zip", zip_of_a_png, error="ZIP archive"),
    Case("random-bytes", random_bytes, error="unrecognised"),
    Case("executable", lambda: b"\x7fELF\x02\x01\x01" + bytes(120), error="program"),
    Case("pickle", lambda: pickle.dumps({"not": "an image"}), error="pickle"),
    Case("ico", lambda: encode(solid(size=(16, 16)), "ICO"), error="ICO icon"),
    Case("png-bad-crc", png_with_bad_crc, error="CRC"),
    Case("jpeg-cut-in-half", lambda: cut_in_half(encode(noise(), "JPEG")), error="corrupt or truncated"),
    Case("png-cut-in-half", lambda: cut_in_half(encode(noise(), "PNG")), error="truncated"),
    Case("gif-cut-in-half", lambda: cut_in_half(encode(noise().quantize(), "GIF")), error="corrupt or truncated"),
    Case("webp-cut-in-half", lambda: cut_in_half(encode(noise(), "WEBP")), error="corrupt"),
    Case("tiff-cut-in-half", lambda: cut_in_half(encode(noise(), "TIFF")), error="corrupt or truncated"),
    Case("jpeg-damaged-header", lambda: b"\xff\xd8\xff\xe0" + bytes(200), error="header is damaged"),
    Case("png-bomb-100k-x-100k", lambda: png_declaring(100_000, 100_000), error="declares .* Mpx, above the limit"),
    Case("gif-bomb-65k-x-65k", lambda: gif_declaring(65_535, 65_535), error="declares .* Mpx, above the limit"),
    Case("png-text-bomb", png_with_a_huge_text_chunk, error="Decompressed data too large"),
    Case("1x5000", lambda: encode(solid(size=(1, 5000)), "PNG"), error="times longer than it is wide"),
]


def outcome(case: Case) -> str:
    """What load_image does with a case, in one line (for the report)."""
    from vitviz.preprocessing import ImageError, load_image

    try:
        image = load_image(case.make())
    except ImageError as error:
        return f"ImageError: {error}"
    return f"{image.mode} {image.width}x{image.height}"


if __name__ == "__main__":
    for case in CORPUS:
        print(f"{case.name:>22}  {'decoded' if case.good else 'refused'}  {outcome(case)}")
