"""Preprocessing: the same tensors as torchvision's presets, and a lossless dict round trip."""

import pytest
import torch
from PIL import Image
from torchvision.transforms._presets import ImageClassification
from torchvision.transforms import InterpolationMode

from vitviz.images import Preprocessing


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
