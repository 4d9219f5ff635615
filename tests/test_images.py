"""Preprocessing against torchvision's presets, greyscale scaling, and huge JPEGs (the hostile corpus:
test_hostile_images.py)."""

import hashlib
import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms._presets import ImageClassification

from vitviz.preprocessing import ImageFile, Preprocessing, load_image


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


def test_huge_jpeg_is_decoded_in_draft_mode():
    # 12000 x 9000 = 108 Mpx, above the 89 Mpx limit for other formats: decoded at a reduced scale
    big = Image.new("RGB", (12000, 9000), (10, 120, 200))
    data = encode(big, "JPEG", quality=50)
    del big
    image = load_image(data)
    # asked for at least 2309 x 1732 (half the 16 Mpx working scale), draft mode takes the strongest reduction
    # that covers it: 1/4 (1/8 would be 1500 x 1125, too small)
    assert image.size == (3000, 2250)
    assert abs(image.getpixel((10, 10))[2] - 200) < 8


def test_image_files_pickle_under_a_stable_name():
    # Streamlit's st.cache_data pickles what it stores; app.py runs as a fresh __main__ for every session,
    # so a class defined there could not be unpickled reliably
    file = ImageFile.of(b"some bytes")
    assert file.key == hashlib.sha256(b"some bytes").hexdigest()
    copy = pickle.loads(pickle.dumps(file))
    assert ImageFile.__module__ == "vitviz.preprocessing" and (copy.data, copy.key) == (file.data, file.key)
