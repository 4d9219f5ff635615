"""vitviz_dashboard/state.py: typed keys over the session state, kept values written back in every run, and the
accessors by which one page reads or sets another's values. A dict stands in for st.session_state."""

from __future__ import annotations

import pytest

from vitviz.text import PromptError, prompt_set, template_set
from vitviz_dashboard import state
from vitviz_dashboard.state import (
    DEFAULT_PROMPTS,
    HANDED,
    KEPT,
    MODEL_BOX,
    MODEL_PATH,
    MY_PROMPTS,
    PATH_OR_UPLOAD,
    HandedCheckpoint,
    Key,
    kept,
)


class Session(dict):
    """A session state that records which keys were assigned, as Streamlit's marks a widget's value as set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.assigned: list[str] = []

    def __setitem__(self, key, value):
        self.assigned.append(key)
        super().__setitem__(key, value)


@pytest.fixture
def session(monkeypatch) -> Session:
    fake = Session()
    monkeypatch.setattr(state.st, "session_state", fake)
    return fake


def test_a_key_gets_sets_and_pops_its_entry(session):
    key: Key[int] = Key("count")
    assert key.get() is None and key.get(3) == 3 and not key.present
    assert key.setdefault(5) == 5 and key.setdefault(7) == 5  # the first value stays
    key.set(9)
    assert session["count"] == 9 and key.get() == 9 and key.present and str(key) == "count"
    assert key.pop() == 9 and not key.present and key.pop(1) == 1


def test_keep_widgets_writes_back_every_kept_key_and_no_other(session):
    session.update({kept("photo|colormap"): "viridis", f"{KEPT}vit|layer": 3, "newest": "a.jpg", 7: "not a name"})
    session.assigned.clear()
    state.keep_widgets()
    assert sorted(session.assigned) == sorted([kept("photo|colormap"), f"{KEPT}vit|layer"])
    assert session[kept("photo|colormap")] == "viridis" and session["newest"] == "a.jpg"


def test_the_photo_page_sidebar_and_tab_are_kept_so_keep_widgets_writes_them_back(session):
    photo_widgets = [state.MODEL_BOX, state.MODEL_PATH, state.MODEL_HUB_SPEC, state.PHOTO_PRECISION]
    photo_widgets += [state.PHOTO_COLORMAP, state.PHOTO_ALPHA, state.PHOTO_TAB, state.PROMPTS, state.PROMPT_SOURCE]
    for key in photo_widgets:
        key.set("a value")
    session.assigned.clear()
    state.keep_widgets()
    assert sorted(session.assigned) == sorted(map(str, photo_widgets))


def test_per_model_keys_differ_by_model_and_are_kept():
    assert state.knocked_heads("a") != state.knocked_heads("b") != state.knocked_tokens("b")
    assert str(state.sae_edit("a")).startswith(KEPT) and str(state.knocked_tokens("a")).startswith(KEPT)
    assert state.tab_widget("a", "layer") != state.tab_widget("b", "layer")
    assert state.tab_widget("a", "layer").startswith(KEPT)


@pytest.mark.parametrize(
    ("box", "path", "expected"),
    [
        (None, None, "default"),  # the Photo page never drawn
        ("timm:vit_tiny_patch16_224", None, "timm:vit_tiny_patch16_224"),
        (state.HUB_SPEC, None, "default"),  # the field's text may not be a checked spec yet
        (PATH_OR_UPLOAD, "  models/a.pt ", "models/a.pt"),
        (PATH_OR_UPLOAD, "", "default"),  # an uploaded checkpoint: nothing another page can reload
    ],
)
def test_photo_page_model(session, box, path, expected):
    if box is not None:
        MODEL_BOX.set(box)
    if path is not None:
        MODEL_PATH.set(path)
    assert state.photo_page_model() == expected


def test_photo_page_prompts_typed_and_ready_sets(session):
    assert state.photo_page_prompts()[0] == DEFAULT_PROMPTS.splitlines()  # the sidebar never shown: its defaults
    state.PROMPTS.set("a cat\na dog")
    prompts, templates, record = state.photo_page_prompts()
    assert (prompts, templates) == (["a cat", "a dog"], None)
    assert record == {"prompts": ["a cat", "a dog"], "prompt_set": None, "templates": None}
    state.PROMPT_SOURCE.set("cifar10")
    state.PROMPT_ENSEMBLE.set(True)
    prompts, templates, record = state.photo_page_prompts()
    assert prompts == list(prompt_set("cifar10")) and templates == list(template_set("openai-80"))
    assert record == {"prompts": None, "prompt_set": "cifar10", "templates": "openai-80"}
    state.PROMPT_SOURCE.set(MY_PROMPTS)
    state.PROMPTS.set("\n\n")
    with pytest.raises(PromptError):
        state.photo_page_prompts()


def test_handing_a_model_and_a_photo_to_the_photo_page(session):
    MODEL_PATH.set("models/typed.pt")
    state.pick_photo_page_model("timm:vit_tiny_patch16_224")
    assert MODEL_BOX.get() == "timm:vit_tiny_patch16_224" and MODEL_PATH.get() == "models/typed.pt"  # left alone
    state.pick_photo_page_model(PATH_OR_UPLOAD, "models/b.pt")
    assert state.photo_page_model() == "models/b.pt"
    state.hand_checkpoint_to_photo_page(HandedCheckpoint("/tmp/tower.pt", "a tower"))
    assert HANDED.get() == HandedCheckpoint("/tmp/tower.pt", "a tower")
    assert MODEL_BOX.get() == PATH_OR_UPLOAD and MODEL_PATH.get() == ""  # a typed path would come first
    state.show_on_photo_page("b.jpg")
    assert state.NEWEST.get() == "b.jpg" and state.session_photos() == {}
