"""The Photo page's images through Streamlit's AppTest: uploads, camera photos, samples, bad files, compare sides."""

import io
import re
import zipfile

import numpy as np
import pytest
from app_harness import (
    captions,
    chart_specs,
    download_labels,
    jpeg_bytes,
    open_tab,
    png_bytes,
    started_app,
    uploaded_app,
)
from hostile_images import CORPUS
from PIL import Image

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def test_camera_photos_each_join_the_image_picker(default_model):
    at = started_app()
    at.camera_input[0].set_value(("image.jpg", jpeg_bytes(), "image/jpeg")).run()
    assert not at.exception and not at.error
    assert next(s for s in at.selectbox if s.label == "Image").value == "camera photo 1.jpg"
    assert captions(at)[0].startswith("camera photo 1.jpg, 64x48")
    at.camera_input[0].set_value(("image.jpg", jpeg_bytes((40, 40), (200, 10, 10)), "image/jpeg")).run()
    picker = next(s for s in at.selectbox if s.label == "Image")  # the browser names every shot image.jpg
    assert picker.options == ["camera photo 1.jpg", "camera photo 2.jpg"] and picker.value == "camera photo 2.jpg"
    at.file_uploader[0].set_value(("upload.png", png_bytes(), "image/png")).run()  # the camera still holds a shot
    assert next(s for s in at.selectbox if s.label == "Image").value == "upload.png"  # the newest arrival is shown
    at.sidebar.slider[0].set_value(0.3).run()  # and stays chosen on later runs
    assert next(s for s in at.selectbox if s.label == "Image").value == "upload.png"


def test_different_files_with_the_same_name_are_both_kept(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("image.jpg", jpeg_bytes(), "image/jpeg"), ("image.jpg", jpeg_bytes(colour=(250, 250, 0)), "image/jpeg")]
    ).run()
    picker = next(s for s in at.selectbox if s.label == "Image")
    assert picker.options == ["image.jpg", "image (2).jpg"] and picker.value == "image (2).jpg"


def test_the_compare_sides_tell_apart_two_images_with_the_same_bytes(default_model):
    at = started_app()
    at.file_uploader[0].set_value([("x.png", png_bytes(), "image/png"), ("y.png", png_bytes(), "image/png")]).run()
    open_tab(at, "Heads & layers")
    next(s for s in at.selectbox if s.label == "Image").set_value("x.png").run()
    values = {s.label: s.value for s in at.selectbox}
    assert values["A: image"] == values["B: image"] == "x.png"
    assert "Overlay (PNG, full size)" in download_labels(at)


@pytest.mark.parametrize("case", [c for c in CORPUS if not c.good], ids=lambda c: c.name)
def test_bad_upload_shows_an_error_not_an_exception(default_model, case):
    # every refused kind of the hostile corpus, through the upload widget
    at = uploaded_app("upload.png", case.make())
    assert at.error and "Could not read upload.png" in at.error[0].value
    assert re.search(case.error, at.error[0].value), at.error[0].value
    assert not at.get("plotly_chart")  # nothing drawn from a refused file


def test_sample_images_are_offered_before_any_upload(default_model, tmp_path, monkeypatch):
    archive = tmp_path / "samples.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for label in ("cat", "dog"):
            buffer = io.BytesIO()
            Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buffer, "PNG")
            z.writestr(f"test/{label}/0001.png", buffer.getvalue())
    monkeypatch.setenv("VITVIZ_SAMPLES", str(archive))
    at = started_app()
    assert not at.error
    image_picker = next(s for s in at.selectbox if s.label == "Image")
    assert image_picker.options == ["sample: cat 0001.png", "sample: dog 0001.png"]
    assert "cat" in chart_specs(at)


def test_a_fresh_page_offers_the_bundled_example_photos(default_model, monkeypatch):
    monkeypatch.delenv("VITVIZ_SAMPLES")  # the default: the bundled examples (and a CIFAR-10 zip, if one is found)
    at = started_app()
    assert not at.error
    options = next(s for s in at.selectbox if s.label == "Image").options
    assert options[:4] == [
        "sample: Chelsea the cat.jpg",
        "sample: astronaut.jpg",
        "sample: coffee.jpg",
        "sample: rocket.jpg",
    ]
    assert any("Showing sample photos" in c.value for c in at.caption)
    assert "Attention rollout" in [s.value for s in at.subheader]  # the first is analysed at once
    at.file_uploader[0].set_value(("mine.png", png_bytes(), "image/png")).run()
    assert next(s for s in at.selectbox if s.label == "Image").value == "mine.png"
    assert not any("Showing sample photos" in c.value for c in at.caption)


def test_two_images_side_by_side(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("first.png", png_bytes((64, 48)), "image/png"), ("second.png", png_bytes((30, 60)), "image/png")]
    ).run()
    assert not at.exception and not at.error
    open_tab(at, "Heads & layers")
    image_b = next(s for s in at.selectbox if s.label == "B: image")
    assert image_b.options == ["first.png", "second.png"]
    image_b.set_value("first.png" if image_b.value == "second.png" else "second.png").run()
    captions = [img.proto.imgs[0].caption for img in at.get("image")]
    shown = next(s for s in at.selectbox if s.label == "Image").value
    other = "first.png" if shown == "second.png" else "second.png"
    assert any(c.startswith(f"{shown}: layer") for c in captions)
    assert any(c.startswith(f"{other}: layer") for c in captions)


def test_an_unreadable_upload_is_reported_and_left_out_of_every_image_choice(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("good.png", png_bytes(), "image/png"), ("broken.png", b"not an image", "image/png")]
    ).run()
    assert not at.exception
    assert any("Could not read broken.png" in e.value for e in at.error)
    open_tab(at, "Heads & layers")
    choices = [s for s in at.selectbox if s.label in ("Image", "A: image", "B: image")]
    assert len(choices) == 3 and all(s.options == ["good.png"] for s in choices)
    assert any((img.proto.imgs[0].caption or "").startswith("good.png: layer") for img in at.get("image"))


def test_compare_sides_follow_a_new_main_image(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("first.png", png_bytes((64, 48)), "image/png"), ("second.png", png_bytes((30, 60)), "image/png")]
    ).run()
    open_tab(at, "Heads & layers")
    for name in ("first.png", "second.png"):
        next(s for s in at.selectbox if s.label == "Image").set_value(name).run()
        sides = [s.value for s in at.selectbox if s.label in ("A: image", "B: image")]
        assert sides == [name, name]


def test_the_compare_choice_survives_viewing_another_image(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [
            ("first.png", png_bytes((64, 48)), "image/png"),
            ("second.png", png_bytes((30, 60)), "image/png"),
            ("third.png", png_bytes((40, 40)), "image/png"),
        ]
    ).run()
    next(s for s in at.selectbox if s.label == "Image").set_value("first.png").run()
    open_tab(at, "Heads & layers")
    next(s for s in at.selectbox if s.label == "B: image").set_value("second.png").run()
    next(s for s in at.selectbox if s.label == "Image").set_value("third.png").run()
    assert next(s for s in at.selectbox if s.label == "B: image").value == "third.png"  # a new main image: its own
    next(s for s in at.selectbox if s.label == "Image").set_value("first.png").run()
    assert next(s for s in at.selectbox if s.label == "B: image").value == "second.png"  # back: the choice made
    assert not at.exception
