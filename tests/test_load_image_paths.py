"""``vitviz.load_image`` takes a path (str or PathLike) as well as bytes, with the same checks (issue 44, item 25)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitviz
from vitviz.preprocessing import ImageError


def png_bytes(colour=(200, 30, 60), size=(7, 5)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("kind", [str, Path])
def test_a_path_loads_the_same_image_as_its_bytes(tmp_path, kind):
    data = png_bytes()
    (tmp_path / "photo.png").write_bytes(data)
    from_path = vitviz.load_image(kind(tmp_path / "photo.png"))
    np.testing.assert_array_equal(np.asarray(from_path), np.asarray(vitviz.load_image(data)))
    assert from_path.size == (7, 5) and from_path.mode == "RGB"


def test_bytearray_and_memoryview_are_bytes():
    data = png_bytes()
    assert vitviz.load_image(bytearray(data)).size == vitviz.load_image(memoryview(data)).size == (7, 5)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda folder: folder / "missing.png", "no such file"),
        (lambda folder: folder, "is a folder, not an image file"),
        (lambda folder: (folder / "notes.txt").write_text("not an image") and folder / "notes.txt", "not an image"),
        (lambda folder: (folder / "empty.png").write_bytes(b"") is not None and folder / "empty.png", "is empty"),
    ],
)
def test_bad_paths_are_one_clear_image_error(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(ImageError, match=message):
        vitviz.load_image(str(path))


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(vitviz.preprocessing, "MAX_FILE_BYTES", 10)
    (tmp_path / "big.png").write_bytes(png_bytes())
    with pytest.raises(ImageError, match="above the limit"):
        vitviz.load_image(tmp_path / "big.png")


def test_another_type_is_a_type_error_that_names_it():
    with pytest.raises(TypeError, match="bytes or a path .* not int"):
        vitviz.load_image(42)
