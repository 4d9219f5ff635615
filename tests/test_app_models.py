"""The Photo page's model picker through Streamlit's AppTest: paths, uploads, curated and typed specs, offline."""

import pickle

import pytest
import streamlit as st
import torch
from app_harness import NAMES, chart_specs, open_tab, png_bytes, started_app, uploaded_app
from tiny_models import tiny_checkpoint

import vitviz.loading.specs
from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint
from vitviz_dashboard.cache import budget
from vitviz_dashboard.state import PHOTO_TAB

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def test_a_model_with_fewer_layers_under_the_same_name_resets_the_layer_controls(default_model, tmp_path, monkeypatch):
    # the same path, a different model after the file changed: stored layer choices must not overflow
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))  # the page opens typed paths only in allowed folders
    path = tmp_path / "changing.pt"
    torch.manual_seed(0)
    save_checkpoint(
        path,
        ViT(
            ViTConfig(
                image_size=32, patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64, num_classes=3
            )
        ),
        NAMES,
        Preprocessing(resize=32, crop=32),
    )
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    at.sidebar.text_input[0].set_value(str(path)).run()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    next(s for s in at.slider if s.label == "Start layer").set_value(2).run()
    open_tab(at, "Heads & layers")
    next(n for n in at.number_input if n.label == "A: layer").set_value(2).run()
    tiny_checkpoint(path)  # two layers now
    st.cache_resource.clear()
    budget.STORE.clear()
    at.run()
    assert not at.exception, at.exception
    assert next(n for n in at.number_input if n.label == "A: layer").value == 1  # the new last layer, its default
    open_tab(at, "Overview")
    assert next(s for s in at.slider if s.label == "Start layer").value == 0


def test_missing_model_shows_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", tmp_path / "nothing.pt")
    at = started_app()
    assert "no default checkpoint" in at.error[0].value


def test_checkpoint_by_path_and_a_bad_path(default_model, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))  # the page opens typed paths only in allowed folders
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    at.sidebar.text_input[0].set_value(str(tiny_checkpoint(tmp_path / "other.pt"))).run()
    assert not at.error and "other.pt" in at.sidebar.caption[0].value
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    at.sidebar.text_input[0].set_value(str(tmp_path / "bad.pt")).run()
    assert not at.exception and "not a readable PyTorch file" in at.error[0].value


def test_tab_settings_survive_another_model_and_a_failed_load(default_model, tmp_path, monkeypatch):
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))
    at = uploaded_app()
    next(s for s in at.slider if s.label == "Discard ratio").set_value(0.5).run()
    open_tab(at, "Class-specific")
    next(m for m in at.multiselect if m.label == "Methods").select("gradcam").run()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    (tmp_path / "bad.pt").write_bytes(b"garbage")
    at.sidebar.text_input[0].set_value(str(tmp_path / "bad.pt")).run()  # a model that fails to load
    assert "not a readable PyTorch file" in at.error[0].value
    at.sidebar.text_input[0].set_value(str(tiny_checkpoint(tmp_path / "other.pt", num_layers=3))).run()  # another model
    assert not at.exception and not at.error
    at.sidebar.selectbox[0].set_value("default").run()  # and back
    assert not at.exception
    assert next(m for m in at.multiselect if m.label == "Methods").value == ["relevance", "legrad", "gradcam"]
    open_tab(at, "Overview")
    assert next(s for s in at.slider if s.label == "Discard ratio").value == 0.5


def test_uploaded_checkpoints_are_opened_safely_size_limited_and_bounded_on_disk(default_model, tmp_path, monkeypatch):
    import tempfile

    from hostile_models import CreatesAFile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the app stores uploads
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    marker = tmp_path / "pwned"
    at.sidebar.file_uploader[0].set_value(
        (
            "evil.pt",
            pickle.dumps({"format": "vitviz-checkpoint", "x": CreatesAFile(marker)}),
            "application/octet-stream",
        )
    ).run()
    assert not at.exception and "could run code" in at.error[0].value and not marker.exists()
    at.sidebar.file_uploader[0].set_value(("huge.pt", bytes(51 * 2**20), "application/octet-stream")).run()
    assert not at.exception and "the limit is 50 MB" in at.sidebar.error[0].value
    for i in range(5):  # five different good checkpoints, one after another
        checkpoint = torch.load(tiny_checkpoint(tmp_path / f"model{i}.pt"), weights_only=True)
        checkpoint["state_dict"]["head.bias"] += i  # a different file each time
        torch.save(checkpoint, tmp_path / f"model{i}.pt")
        data = (tmp_path / f"model{i}.pt").read_bytes()
        at.sidebar.file_uploader[0].set_value((f"model{i}.pt", data, "application/octet-stream")).run()
        assert not at.exception and not at.error and "vitviz-uploads" in at.sidebar.caption[0].value
    assert len(list((tmp_path / "vitviz-uploads").glob("*.pt"))) == 3


def test_torchvision_model_offline_shows_a_message_and_the_page_keeps_working(default_model, tmp_path, monkeypatch):
    import urllib.error

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(vitviz.loading.download.urllib.request, "urlopen", offline)
    at = started_app()
    at.sidebar.selectbox[0].set_value("torchvision:vit_b_16").run()
    assert not at.exception and "could not download" in at.error[0].value and "offline" in at.error[0].value
    at.sidebar.selectbox[0].set_value("default").run()
    assert not at.error and "Upload one or more photos" in at.info[0].value


def test_choosing_another_model_keeps_the_images_the_chosen_one_and_the_open_tab(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("a.png", png_bytes(), "image/png"), ("b.png", png_bytes((30, 60)), "image/png")]
    ).run()
    next(s for s in at.selectbox if s.label == "Image").set_value("a.png").run()
    open_tab(at, "Heads & layers")
    at.sidebar.selectbox[0].set_value("path or upload...").run()  # no path yet: the page stops early
    assert "Upload a vitviz checkpoint in the sidebar, or enter the path" in at.info[0].value
    at.sidebar.selectbox[0].set_value("default").run()
    assert not at.exception and at.session_state[str(PHOTO_TAB)] == "Heads & layers"
    assert next(s for s in at.selectbox if s.label == "Image").value == "a.png"
    assert [f.name for f in at.file_uploader[0].value] == ["a.png", "b.png"]


@pytest.fixture()
def offline_hub(tmp_path, monkeypatch):
    """No Hub and an empty Hub cache (AppTest runs the page in this process, so patching modules works)."""
    from huggingface_hub import constants

    import vitviz.loading.download

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setattr(vitviz.loading.download, "hub_reachable", lambda *a, **k: False)
    return tmp_path / "empty-hub-cache"


def test_the_popular_models_exist_and_convert_and_the_spec_field_reads_any_spec(offline_hub):
    import timm

    from vitviz_dashboard.sidebar.model_dirs import check_hub_spec
    from vitviz_dashboard.sidebar.model_picker import CURATED_MODELS

    pretrained = set(timm.list_pretrained())
    for spec in CURATED_MODELS.values():
        assert not spec.startswith("timm:") or spec.removeprefix("timm:") in pretrained, spec
        # offline, each gets as far as the download: vitviz's ViT can reproduce it (a timm model that it could
        # not is refused before any download, by name of the feature it lacks)
        with pytest.raises(vitviz.ModelLoadError, match="offline"):
            vitviz.load_model(spec)
    assert check_hub_spec(" timm:vit_small_patch8_224.dino ") == "timm:vit_small_patch8_224.dino"
    assert check_hub_spec("google/vit-base-patch16-224") == "hf:google/vit-base-patch16-224"
    assert check_hub_spec("vit_small_patch8_224.dino") == "timm:vit_small_patch8_224.dino"
    assert check_hub_spec("") == ""
    assert check_hub_spec("open_clip:ViT-B-16/openai") == "open_clip:ViT-B-16/openai"


def test_a_curated_model_offline_shows_a_message_and_the_page_keeps_working(default_model, offline_hub):
    from vitviz_dashboard.sidebar.model_picker import CURATED_MODELS

    at = started_app()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    picker = at.sidebar.selectbox[0]
    assert all(label in picker.options for label in CURATED_MODELS)
    assert "timm, Hugging Face or open_clip spec..." in picker.options and "path or upload..." in picker.options
    picker.set_value("timm:vit_small_patch8_224.dino").run()
    assert not at.exception
    assert "Could not load model `timm:vit_small_patch8_224.dino`" in at.error[0].value
    assert "offline" in at.error[0].value and str(offline_hub) in at.error[0].value
    assert next(s for s in at.selectbox if s.label == "Image").value == "photo.png"  # the upload stays
    at.sidebar.selectbox[0].set_value("default").run()
    assert not at.exception and not at.error and "cat" in chart_specs(at)


def test_any_timm_or_hugging_face_spec_can_be_typed(default_model, offline_hub):
    at = started_app()
    at.sidebar.selectbox[0].set_value("timm, Hugging Face or open_clip spec...").run()
    assert any("Enter a timm model" in info.value for info in at.info)  # nothing typed yet
    at.sidebar.text_input[0].set_value("google/vit-base-patch16-224").run()
    assert not at.exception and "Could not load model `hf:google/vit-base-patch16-224`" in at.error[0].value
    at.sidebar.text_input[0].set_value("timm:no_such_model").run()
    assert not at.exception and "timm has no model 'no_such_model'" in at.error[0].value


def test_what_looks_like_a_path_in_the_model_box(tmp_path):
    from vitviz_dashboard.sidebar.model_picker import looks_like_path

    (tmp_path / "folder").mkdir()
    for path in (
        "/srv/models/vit.pt",
        "~/models",
        "./checkpoints",
        "..\\x",
        "C:\\models\\vit",
        "model.pt",
        "weights.safetensors",
        str(tmp_path / "folder"),
    ):
        assert looks_like_path(path), path
    for spec in (
        "timm:vit_small_patch16_dinov3.lvd1689m",
        "hf:google/vit-base-patch16-224",
        "google/vit-base-patch16-224",
        "open_clip:ViT-B-16/openai",
        "vit_small_patch8_224.dino",
    ):
        assert not looks_like_path(spec), spec


@pytest.mark.parametrize("family", ["videomae", "vivit"])  # any video config: one check on model.config.is_video
def test_a_video_model_on_the_photo_page_is_one_line_naming_the_video_page(
    default_model, tmp_path, monkeypatch, family
):
    from tiny_videos import tiny_video_folder

    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))
    folder = tiny_video_folder(tmp_path / family, family)
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    at.sidebar.text_input[0].set_value(str(folder)).run()
    assert not at.exception, at.exception
    assert len(at.error) == 1 and "is a video model" in at.error[0].value and "Video page" in at.error[0].value
