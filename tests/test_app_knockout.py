"""Knocking heads and tokens out of the page's model, through Streamlit's AppTest: the banner, the changed
prediction, the head ranking and logit attribution against explain's functions, and one click to restore."""

import io
import json

import numpy as np
import pytest
import torch
from app_harness import APP, PHOTOS, assert_changes, open_tab, prediction, values
from page_reading import assert_percent, shown_in
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.specs
from vitviz import explain

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def app_with(path, monkeypatch, tab: str) -> AppTest:
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.file_uploader[0].set_value([(name, data, "image/png") for name, data in PHOTOS.items()]).run()
    return open_tab(at, tab)


def banners(at) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith("**Intervened model.**")]


def test_small_changes_get_the_digits_to_show_them():
    from vitviz_dashboard.knockout import change_decimals, percent, signed

    decimals = change_decimals(0.025)  # [CLS] out of the default model: 2.5e-4 of the top probability
    shown = (percent(0.92030, decimals), percent(0.92005, decimals), signed(-0.025))
    assert shown == ("92.030 %", "92.005 %", "−0.025")
    assert [change_decimals(x) for x in (30, 5, 0.5, 0.05, 1e-9, 0)] == [1, 1, 2, 3, 6, 1]
    assert (signed(0.5), signed(0), signed(-1e-5)) == ("+0.5", "0", "−1e-05")


def photo_pixels(model) -> torch.Tensor:
    """The page's photo (the last uploaded) as the model's input."""
    return model.transform(Image.open(io.BytesIO(PHOTOS["b.png"])).convert("RGB"))[None]


def test_knock_a_head_out_see_the_banner_and_a_changed_prediction_then_restore(tmp_path, monkeypatch):
    path = tiny_checkpoint(tmp_path / "model.pt")
    at = app_with(path, monkeypatch, "Heads & layers")
    intact = prediction(at)
    assert "Which heads the prediction depends on" in [s.value for s in at.subheader] and not banners(at)
    # the ranking is explain.head_importance of the page's model on its photo, for the top class
    model = vitviz.load_model(path)
    expected = explain.head_importance(model, photo_pixels(model))
    ranking = next(
        f
        for f in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
        if f["layout"].get("title", {}).get("text", "").startswith("Logit drop when removed")
    )
    np.testing.assert_allclose(
        values(ranking["data"][1]["customdata"]).astype(float), -expected.logit_change[0].numpy().ravel(), atol=1e-5
    )
    parts = explain.direct_logit_attribution(model, photo_pixels(model))
    caption = next(c.value for c in at.caption if c.value.startswith("Logit "))
    assert shown_in(
        f"Logit {parts.logit[0]:.3f} = embeddings {parts.embeddings[0]:.3f}", [caption.split(" + heads")[0]]
    )

    strongest = np.unravel_index(np.abs(expected.logit_change[0].numpy()).argmax(), (2, 4))
    label = f"L{strongest[0]} H{strongest[1]}"
    next(m for m in at.multiselect if m.label == "Knock out heads").set_value([label]).run()
    assert not at.exception and not at.error
    assert banners(at) == [
        f"**Intervened model.** Heads removed: {label}. The predictions and every map below are this model's."
    ]
    knocked = model.knock_out(heads=[tuple(int(v) for v in strongest)])
    with torch.no_grad():
        probabilities = knocked.probabilities(knocked(photo_pixels(knocked)).logits)[0]
    top = int(probabilities.argmax())
    assert_percent(prediction(at), f"**Prediction: {model.class_names[top]} (", float(probabilities[top]))
    assert prediction(at) != intact
    # the tab where the head was knocked out shows what that changed, in numbers
    with torch.no_grad():
        intact_probabilities = model.probabilities(model(photo_pixels(model)).logits)[0]
    assert_changes(at, model.class_names, intact_probabilities, probabilities)
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    marks = [t for f in figures for t in f["data"] if t.get("name") == "knocked out"]
    assert marks and list(values(marks[0]["x"])) == [strongest[1]] and list(values(marks[0]["y"])) == [strongest[0]]

    open_tab(at, "Overview")  # every tab shows the intervened model
    assert banners(at) and prediction(at) != intact
    at.button(key="restore_model").click().run()
    assert not banners(at) and prediction(at) == intact
    open_tab(at, "Heads & layers")
    assert next(m for m in at.multiselect if m.label == "Knock out heads").value == []


def test_take_the_registers_out_of_the_attention_and_see_what_changes(tmp_path, monkeypatch):
    path = tiny_checkpoint(tmp_path / "model.pt", num_register_tokens=2)
    at = app_with(path, monkeypatch, "Tokens")
    picker = next(m for m in at.multiselect if m.label == "Take out of the attention")
    assert picker.options == ["[CLS]", "register 1", "register 2"]
    picker.set_value(["register 1", "register 2"]).run()
    assert not at.exception and not at.error
    assert banners(at) == [
        "**Intervened model.** Taken out of the attention: register 1, register 2. The predictions "
        "and every map below are this model's."
    ]
    model = vitviz.load_model(path)
    with torch.no_grad():
        before = model.probabilities(model(photo_pixels(model)).logits)[0]
        after = model.probabilities(
            model(photo_pixels(model), key_mask=torch.tensor([True, False, False] + [True] * 16)).logits
        )[0]
    assert_changes(at, model.class_names, before, after)
    captions = [img.proto.imgs[0].caption for img in at.get("image")]
    assert "intact: [CLS] attention, last layer, mean over heads" in captions


def test_a_backbone_has_no_head_ranking_but_can_lose_its_cls_token(tmp_path, monkeypatch):
    at = app_with(tiny_checkpoint(tmp_path / "backbone.pt", names=()), monkeypatch, "Heads & layers")
    assert "This model has no classifier (a backbone): head importance and logit attribution need classes." in [
        i.value for i in at.info
    ]
    open_tab(at, "Tokens")
    next(m for m in at.multiselect if m.label == "Take out of the attention").set_value(["[CLS]"]).run()
    assert not at.exception and not at.error and banners(at)
