"""The path guard (issue 15): the page opens typed paths only inside the folders the server's owner allows
(VITVIZ_MODEL_DIRS), with one message for every path outside them, and opens no local path from a spec."""

import os
import tempfile
from pathlib import Path

import pytest
from app_harness import started_app
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.specs
from vitviz.loading.specs import typed_spec
from vitviz_dashboard.sidebar.model_dirs import (
    MODEL_DIRS,
    OUTSIDE_MESSAGE,
    PATHS_OFF_MESSAGE,
    ModelRefused,
    allowed_model_dirs,
    check_hub_spec,
    check_model_path,
)

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture()
def folders(tmp_path) -> tuple[Path, Path]:
    """An allowed folder with a checkpoint in it, and beside it a private folder that the page must not open."""
    allowed, private = tmp_path / "models", tmp_path / "private"
    allowed.mkdir()
    private.mkdir()
    tiny_checkpoint(allowed / "model.pt")
    (private / "secret.pt").write_bytes(b"not a checkpoint")
    (private / "unreadable.pt").write_bytes(b"")
    (private / "unreadable.pt").chmod(0)
    (allowed / "link.pt").symlink_to(private / "secret.pt")
    return allowed, private


def refusal(text: str, roots: list[Path]) -> str:
    with pytest.raises(ModelRefused) as refused:
        check_model_path(text, roots)
    return str(refused.value)


def test_every_path_outside_the_allowed_folders_gets_the_same_message(folders):
    allowed, private = folders
    refused = {
        "an existing file": str(private / "secret.pt"),
        "a missing file": str(private / "missing.pt"),
        "a folder": str(private),
        "an unreadable file": str(private / "unreadable.pt"),
        "a symlink out of the allowed folder": str(allowed / "link.pt"),
        "a .. path": f"{allowed}{os.sep}..{os.sep}private{os.sep}secret.pt",
        "a folder whose name starts like the allowed one's": f"{allowed}-old{os.sep}model.pt",
        "a system file": "/etc/passwd",
        "a NUL byte": f"{allowed}{os.sep}model.pt\0",
    }
    messages = {case: refusal(text, [allowed]) for case, text in refused.items()}
    assert set(messages.values()) == {OUTSIDE_MESSAGE}, messages
    assert str(allowed.parent) not in OUTSIDE_MESSAGE


def test_a_checkpoint_inside_an_allowed_folder_loads_with_load_models_own_messages(folders, monkeypatch):
    allowed, _ = folders
    monkeypatch.chdir(allowed.parent)  # relative paths are relative to the working directory
    monkeypatch.setenv("HOME", str(allowed.parent))
    real = (allowed / "model.pt").resolve()
    for text in ("models/model.pt", "models/../models/model.pt", "~/models/model.pt", f" {real} "):
        assert check_model_path(text, [Path("models")]) == real
    assert vitviz.load_model(str(real)).class_names == ["cat", "dog", "bird"]
    # inside, load_model's messages stay; a text that looks like a spec is a (missing) file there, never a spec
    with pytest.raises(vitviz.ModelLoadError, match="not found"):
        vitviz.load_model(str(check_model_path("models/timm:local-dir:/etc", [allowed])))


def test_the_allowed_folders_come_from_vitviz_model_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(
        vitviz.loading.specs, "DEFAULT_CHECKPOINT", tmp_path / "elsewhere" / "default.pt"
    )  # read at call time
    assert allowed_model_dirs({}) == [tmp_path / "elsewhere", Path.cwd()]
    monkeypatch.setenv("HOME", str(tmp_path))
    several = os.pathsep.join([str(tmp_path / "a"), "", " ~/b ", "relative"])
    assert allowed_model_dirs({MODEL_DIRS: several}) == [tmp_path / "a", tmp_path / "b", Path("relative")]
    assert allowed_model_dirs({MODEL_DIRS: ""}) == []  # paths off: nothing can be opened
    assert refusal(str(tiny_checkpoint(tmp_path / "model.pt")), []) == OUTSIDE_MESSAGE


@pytest.mark.parametrize(
    "text",
    [
        "timm:local-dir:/etc",
        "timm: local-dir:/etc",
        "timm:local-dir:C:\\models",
        "timm:hf-hub:timm/vit_small_patch8_224",
        "local-dir:/etc",
        "hf:/etc/passwd",
        "hf:../models",
        "hf:~/models",
        "/etc/passwd",
        "~/models",
        "open_clip:local-dir:/etc",
        "open_clip:/etc/passwd",
        "open_clip:hf-hub:../x",
        "open_clip: local-dir:/etc",
    ],
)
def test_the_spec_field_opens_no_local_path(text):
    with pytest.raises(ModelRefused, match="never a local path"):
        check_hub_spec(text)


def test_the_spec_field_reads_timm_names_and_hub_repositories():
    for text in (
        "timm:vit_small_patch8_224.dino",
        "vit_small_patch8_224.dino",
        "google/vit-base-patch16-224",
        "",
        "open_clip:ViT-B-16/openai",
        "open_clip:hf-hub:timm/ViT-B-16-SigLIP",
    ):
        assert check_hub_spec(text) == typed_spec(text)


def errors(where) -> list[str]:
    return [error.value for error in where.error]


def test_the_page_refuses_paths_outside_alike_and_opens_checkpoints_inside(default_model, tmp_path, monkeypatch):
    allowed = tmp_path / "models"
    allowed.mkdir()
    monkeypatch.setenv(MODEL_DIRS, str(allowed))  # not tmp_path, where the default checkpoint is
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    field = at.sidebar.text_input[0]
    for outside in ("/etc/passwd", str(tmp_path / "missing.pt"), str(vitviz.loading.specs.DEFAULT_CHECKPOINT)):
        field.set_value(outside).run()
        assert not at.exception and errors(at.sidebar) == errors(at) == [OUTSIDE_MESSAGE], outside
    field.set_value(str(tiny_checkpoint(allowed / "mine.pt"))).run()
    assert not at.exception and not at.error and "mine.pt" in at.sidebar.caption[0].value
    at.sidebar.selectbox[0].set_value("timm, Hugging Face or open_clip spec...").run()
    at.sidebar.text_input[0].set_value(f"timm:local-dir:{allowed}").run()
    assert not at.exception and "never a local path" in errors(at.sidebar)[0]


def test_with_paths_off_the_field_is_disabled_and_uploads_still_work(default_model, tmp_path, monkeypatch):
    monkeypatch.setenv(MODEL_DIRS, "")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "uploads"))  # where the page stores uploads
    (tmp_path / "uploads").mkdir()
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    assert at.sidebar.text_input[0].disabled
    assert PATHS_OFF_MESSAGE in [caption.value for caption in at.sidebar.caption]
    data = vitviz.loading.specs.DEFAULT_CHECKPOINT.read_bytes()
    at.sidebar.file_uploader[0].set_value(("mine.pt", data, "application/octet-stream")).run()
    assert not at.exception and not at.error
    assert any("vitviz-uploads" in caption.value for caption in at.sidebar.caption)
