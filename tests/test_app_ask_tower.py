"""The Ask page's "Open the vision tower in Photo" through Streamlit's AppTest: on a tiny LLaVA the button hands the
tower (vitviz.vlm.vision_tower) to the Photo page's model picker with the photo chosen, and every tab draws on it;
a Qwen2-VL folder gets the refusal's reason in a caption and no button."""

import tempfile

import pytest
from app_harness import render_every_tab
from test_app_ask import ask_app, checked, press_ask
from tiny_vlms import tiny_vlm_folder

import vitviz
from vitviz.vlm import VLMError, load_vlm
from vitviz_dashboard.ask.tower import TOWER_BUTTON
from vitviz_dashboard.sidebar.model_picker import MAX_STORED_CHECKPOINTS, store_checkpoint
from vitviz_dashboard.state import HANDED, MODEL_BOX, PATH_OR_UPLOAD

pytestmark = pytest.mark.usefixtures("fresh_caches", "default_model")
BUTTON = "Open the vision tower in Photo"


@pytest.fixture(autouse=True)
def uploads(tmp_path, monkeypatch):
    """The uploads folder (<tmp>/vitviz-uploads) inside this test's own folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / "vitviz-uploads"


def test_the_tower_opens_in_photo_with_the_photo_chosen(tmp_path_factory, monkeypatch, uploads):
    folder = tiny_vlm_folder("llava", tmp_path_factory)
    at = press_ask(ask_app(folder, monkeypatch, given="a cat"))
    assert not at.error
    at._page_hash = ""  # later runs start on the page the last one finished on (ask_app chose the Ask page)
    at.sidebar.button(key=TOWER_BUTTON).click()
    checked(at.run())
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"  # the Photo page
    assert at.selectbox(key=str(MODEL_BOX)).value == PATH_OR_UPLOAD
    [path] = list(uploads.glob("*.pt"))
    assert at.session_state[str(HANDED)].path == str(path)
    assert f"The vision tower of `{folder}`" in " ".join(c.value for c in at.sidebar.caption)
    assert any(c.value.startswith(f"**{path}**: 2 layers x 2 heads") for c in at.sidebar.caption)  # the model shown
    [picker] = [s for s in at.selectbox if s.label == "Image"]
    assert picker.value == "photo.png"
    expected = load_vlm(folder).vision_tower()
    assert vitviz.load_model(str(path)).config == expected.config
    seen = render_every_tab(at)  # a backbone without predictions: every tab draws, none fails
    assert at.title[0].value == "vitviz: what does the Vision Transformer look at?"  # still the Photo page
    assert seen["Overview"]["captions"] == ["photo.png, 300x200 (full resolution in the PNG download)"]
    assert seen["Heads & layers"]["captions"][:2] == ["head 0", "head 1"]  # the tower's two heads
    assert at.session_state[str(HANDED)].path == str(path)  # the hand-over holds through the tabs' runs
    # another model chosen in the box: the hand-over ends
    at.selectbox(key=str(MODEL_BOX)).set_value("default")
    checked(at.run())
    assert str(HANDED) not in at.session_state


def test_a_qwen_tower_is_refused_with_its_reason(tmp_path_factory, monkeypatch):
    folder = tiny_vlm_folder("qwen2_vl", tmp_path_factory)
    at = press_ask(ask_app(folder, monkeypatch, given="a cat"))
    assert not at.error
    with pytest.raises(VLMError) as refusal:
        load_vlm(folder).vision_tower()
    said = f"The vision tower cannot be opened in Photo: {str(refusal.value).rstrip('.')}."
    assert said in [c.value for c in at.sidebar.caption]
    assert not [b for b in at.button if b.label == BUTTON]


def test_stored_checkpoints_stay_bounded(uploads):
    paths = [store_checkpoint(bytes([n]) * 10) for n in range(MAX_STORED_CHECKPOINTS + 2)]
    assert store_checkpoint(bytes([0]) * 10) == paths[0]  # the same bytes: the same file
    assert len(list(uploads.glob("*.pt"))) == MAX_STORED_CHECKPOINTS
