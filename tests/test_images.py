"""Preprocessing: the same tensors as torchvision's presets, and a lossless dict round trip."""

import io
import zlib

import pytest
import torch
from PIL import Image
from torchvision.transforms._presets import ImageClassification
from torchvision.transforms import InterpolationMode

from vitviz.images import ImageError, Preprocessing, load_image


def photo(width=300, height=200) -> Image.Image:
    return Image.effect_mandelbrot((width, height), (-2, -1.2, 1, 1.2), 60).convert("RGB")


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_matches_torchvision_image_classification_preset(interpolation):
    ours = Preprocessing(resize=256, crop=224, interpolation=interpolation)
    reference = ImageClassification(crop_size=224, resize_size=256, interpolation=InterpolationMode(interpolation))
    for image in (photo(300, 200), photo(180, 400)):
        torch.testing.assert_close(ours(image), reference(image))


def test_exact_resize_without_crop_keeps_a_non_square_size():
    prep = Preprocessing(resize=(32, 48), crop=None, mean=(0.5,) * 3, std=(0.5,) * 3)
    pixels = prep(Image.new("RGB", (10, 10), (255, 0, 127)))
    assert pixels.shape == (3, 32, 48) and prep.output_size == (32, 48)
    # (255 / 255 - 0.5) / 0.5 = 1 and (0 - 0.5) / 0.5 = -1: the known answer for pure colours
    torch.testing.assert_close(pixels[0], torch.ones(32, 48))
    torch.testing.assert_close(pixels[1], -torch.ones(32, 48))


def test_output_size_is_none_when_it_depends_on_the_image():
    assert Preprocessing(resize=224, crop=None).output_size is None
    assert Preprocessing(resize=256, crop=224).output_size == (224, 224)


def test_dict_round_trip_and_validation():
    prep = Preprocessing(resize=(40, 60), crop=32, mean=(0.1, 0.2, 0.3), std=(1.0, 2.0, 3.0), interpolation="nearest")
    assert Preprocessing.from_dict(prep.to_dict()) == prep
    assert Preprocessing.from_dict({**prep.to_dict(), "mean": [0.1, 0.2, 0.3]}) == prep  # lists from JSON
    with pytest.raises(ValueError, match="interpolation must be one of"):
        Preprocessing(interpolation="lanczos")
    with pytest.raises(ValueError, match="unknown preprocessing fields"):
        Preprocessing.from_dict({"resize": 3, "flip": True})


def encode(image: Image.Image, format: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **kwargs)
    return buffer.getvalue()


@pytest.mark.parametrize("format", ["PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF"])
def test_load_image_decodes_supported_formats_to_rgb(format):
    image = load_image(encode(Image.new("RGB", (40, 30), (250, 0, 0)), format))
    assert image.mode == "RGB" and image.size == (40, 30)
    red, green, blue = image.getpixel((20, 15))
    assert red > 200 and green < 60 and blue < 60


def test_load_image_composites_transparency_on_white():
    rgba = Image.new("RGBA", (8, 8), (0, 255, 0, 0))  # hidden green under full transparency
    rgba.putpixel((0, 0), (255, 0, 0, 255))
    image = load_image(encode(rgba, "PNG"))
    assert image.getpixel((5, 5)) == (255, 255, 255) and image.getpixel((0, 0)) == (255, 0, 0)


def test_load_image_applies_exif_orientation():
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    image = load_image(encode(Image.new("RGB", (40, 20)), "JPEG", exif=exif))
    assert image.size == (20, 40)


@pytest.mark.parametrize(
    "data,message",
    [
        (b"", "empty"),
        (b"<html><body>hello</body></html>", "not an image"),
        (b"%PDF-1.4 not really", "not an image"),
    ],
)
def test_load_image_refuses_non_images(data, message):
    with pytest.raises(ImageError, match=message):
        load_image(data)


def test_load_image_refuses_truncated_files_and_bombs():
    data = encode(photo(200, 200), "JPEG")
    with pytest.raises(ImageError, match="corrupt or truncated"):
        load_image(data[: len(data) // 2])
    # a PNG header declaring 100,000 x 100,000 pixels, refused before any pixel is allocated
    header = encode(Image.new("L", (1, 1)), "PNG")
    ihdr = header.index(b"IHDR")
    body = b"IHDR" + (100_000).to_bytes(4, "big") * 2 + header[ihdr + 12 : ihdr + 17]
    bomb = header[: ihdr - 4] + (13).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big") + header[ihdr + 21 :]
    with pytest.raises(ImageError, match="too large|above the limit"):
        load_image(bomb)
