"""The page through Streamlit's AppTest: model loading, uploads, controls, errors."""

import io
from pathlib import Path

import pytest
import streamlit as st
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

import vitviz.load
from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture(autouse=True)
def fresh_caches():
    # AppTest runs every page in this process, so Streamlit's caches outlive a test
    st.cache_resource.clear()
    st.cache_data.clear()


@pytest.fixture()
def default_model(tmp_path, monkeypatch):
    """A small checkpoint standing in for the shipped default (AppTest runs the page in this process)."""
    torch.manual_seed(0)
    model = ViT(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64,
                          num_classes=3))  # fmt: skip
    with torch.no_grad():
        model.head.weight.normal_()
    save_checkpoint(tmp_path / "default.pt", model, ["cat", "dog", "bird"], Preprocessing(resize=(32, 32)))
    monkeypatch.setattr(vitviz.load, "DEFAULT_CHECKPOINT", tmp_path / "default.pt")


def png_bytes(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, color)
    image.paste((20, 20, 220), (0, 0, size[0] // 2, size[1] // 2))
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def started_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    return at


def test_app_starts_on_the_default_model(default_model):
    at = started_app()
    assert not at.error
    assert "2 layers x 4 heads" in at.sidebar.caption[0].value and "3 classes" in at.sidebar.caption[0].value
    assert "Upload a photo" in at.info[0].value


def test_upload_renders_predictions_and_attention_and_controls_change_it(default_model):
    at = started_app()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    assert not at.exception and not at.error
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    assert "layer 1, mean over heads" in charts[1].proto.spec
    at.sidebar.slider[0].set_value(0).run()
    at.sidebar.selectbox[1].set_value(2).run()
    assert "layer 0, head 2" in at.get("plotly_chart")[1].proto.spec


@pytest.mark.parametrize("content", [b"", b"<html>not an image</html>", png_bytes()[:60]])
def test_bad_upload_shows_an_error_not_an_exception(default_model, content):
    at = started_app()
    at.file_uploader[0].set_value(("broken.png", content, "image/png")).run()
    assert not at.exception
    assert at.error and "Could not read broken.png" in at.error[0].value


def test_missing_model_shows_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(vitviz.load, "DEFAULT_CHECKPOINT", tmp_path / "nothing.pt")
    at = started_app()
    assert "no default checkpoint" in at.error[0].value
