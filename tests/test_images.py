"""Preprocessing: the same tensors as torchvision's presets, and a lossless dict round trip."""

import io
import zlib

import numpy as np
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


def test_sixteen_bit_and_float_greyscale_are_scaled_not_clipped():
    dark = Image.fromarray(np.full((4, 4), 1000, dtype=np.uint16))  # 1000 / 65535 of full scale
    image = load_image(encode(dark, "PNG"))
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (4, 4, 4)  # rint(1000 / 65535 * 255)
    ramp = Image.fromarray(np.linspace(0.0, 1.0, 16, dtype=np.float32).reshape(4, 4), mode="F")
    image = load_image(encode(ramp, "TIFF"))
    assert image.getpixel((0, 0)) == (0, 0, 0) and image.getpixel((3, 3)) == (255, 255, 255)
    wide = Image.fromarray(np.array([[-500, 0], [250, 1500]], dtype=np.int32), mode="I")
    image = load_image(encode(wide, "TIFF"))
    assert image.getpixel((0, 0)) == (0, 0, 0) and image.getpixel((1, 1)) == (255, 255, 255)
    assert image.getpixel((0, 1)) == (96,) * 3  # (250 + 500) / 2000 * 255


def test_cmyk_and_palette_transparency_and_first_frames():
    cmyk = load_image(encode(Image.new("CMYK", (6, 6), (0, 255, 255, 0)), "JPEG"))
    red, green, blue = cmyk.getpixel((3, 3))
    assert red > 200 and green < 60 and blue < 60
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 255, 0, 255, 0, 0] + [0] * 762)  # index 1 is red, but transparent
    palette.info["transparency"] = 1
    assert load_image(encode(palette, "PNG", transparency=1)).getpixel((1, 1)) == (255, 255, 255)
    frames = [Image.new("RGB", (8, 8), c) for c in ((250, 0, 0), (0, 0, 250))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    assert load_image(gif.getvalue()).getpixel((4, 4))[0] > 200  # the first frame, red


def test_huge_jpeg_is_decoded_in_draft_mode():
    # 12000 x 9000 = 108 Mpx, above the 89 Mpx limit for other formats: decoded at a reduced scale
    big = Image.new("RGB", (12000, 9000), (10, 120, 200))
    data = encode(big, "JPEG", quality=50)
    del big
    image = load_image(data)
    assert image.size in {(6000, 4500), (3000, 2250), (1500, 1125)}
    assert image.width * image.height <= 16_000_000
    assert abs(image.getpixel((10, 10))[2] - 200) < 8


def test_tiny_and_extreme_aspect_images():
    assert load_image(encode(Image.new("RGB", (1, 1), (9, 8, 7)), "PNG")).getpixel((0, 0)) == (9, 8, 7)
    assert load_image(encode(Image.new("RGB", (5000, 1), (1, 2, 3)), "PNG")).size == (5000, 1)
