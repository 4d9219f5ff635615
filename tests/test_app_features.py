"""The Features tab through Streamlit's AppTest: PCA colours fitted over the chosen photos, click-to-match and parts,
for the default model and for a DINOv3-style backbone (random weights), with two photos."""

import io

import numpy as np
import pytest
import torch
from app_harness import APP, DINOV3_STYLE, PHOTOS, captions, open_tab
from page_reading import shown_in
from PIL import Image
from streamlit.testing.v1 import AppTest
from tiny_models import tiny_checkpoint

import vitviz
import vitviz.loading.specs
from vitviz import explain
from vitviz_dashboard.cache import budget
from vitviz_dashboard.state import FEATURES_PATCH

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def features_tab(path, monkeypatch) -> AppTest:
    """The page with the checkpoint at ``path`` as its default model, two photos uploaded, the Features tab open."""
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.file_uploader[0].set_value([(name, data, "image/png") for name, data in PHOTOS.items()]).run()
    return open_tab(at, "Features")


def kept(name: str) -> list:
    """Every value the page's store holds for the cached function ``name`` (vitviz_dashboard/cache/results.py)."""
    return [value for key, (value, _) in budget.STORE._entries.items() if key[0] == name]


def pictures(at, suffix: str = "") -> list[str]:
    """The URLs of the tab's pictures whose caption ends with ``suffix``."""
    return [img.proto.imgs[0].url for img in at.get("image") if (img.proto.imgs[0].caption or "").endswith(suffix)]


def reference_features(path, block: int, facet: str) -> list[torch.Tensor]:
    """The photos' patch features computed here, from the model and its own preprocessing, in the tab's order (the
    page's photo, the last uploaded, first)."""
    model = vitviz.load_model(path)
    images = [Image.open(io.BytesIO(PHOTOS[name])).convert("RGB") for name in ("b.png", "a.png")]
    return [explain.patch_features(model, model.transform(image)[None], block, facet)[0] for image in images]


@pytest.mark.parametrize("config", [{}, DINOV3_STYLE], ids=["default", "dinov3-style backbone"])
def test_the_tab_shows_pca_colours_matches_and_parts_fitted_over_both_photos(tmp_path, monkeypatch, config):
    names = ("cat", "dog", "bird") if not config else ()
    path = tiny_checkpoint(tmp_path / "model.pt", names=names, **config)
    at = features_tab(path, monkeypatch)
    assert not at.error and not at.warning
    assert [s.value for s in at.subheader] == ["PCA colours", "Click a patch: its matches", "Parts (k-means)"]
    assert captions(at) == [
        "b.png",
        "a.png",
        "b.png: similarity to its patch (2, 2)",
        "a.png: similarity to b.png's patch (2, 2)",
        "b.png",
        "a.png",
    ]
    # the colours are one PCA over both photos' last-block tokens, as explain.pca_rgb fits it on features made here
    (fitted,) = kept("pca_colours")
    expected = explain.pca_rgb(reference_features(path, -1, "token"))
    torch.testing.assert_close(fitted.explained_variance, expected.explained_variance)
    for ours, theirs in zip(fitted.colours, expected.colours):
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    variance = ", ".join(f"{v:.1%}" for v in expected.explained_variance.tolist())
    assert shown_in(f"Explained variance of the three components: {variance}.", [c.value for c in at.caption])
    (labels,) = kept("feature_parts")
    assert [len(part) for part in labels] == [16, 16] and len(np.unique(np.concatenate(labels))) == 5
    assert [b.proto.label for b in at.get("download_button")] == [
        "PCA colours (PNG)",
        "PCA colours (.npz)",
        "Matches (PNG)",
        "Matches (.npz)",
        "Parts (PNG)",
        "Parts (.npz)",
    ]


def test_a_click_changes_the_similarity_maps(tmp_path, monkeypatch):
    at = features_tab(tiny_checkpoint(tmp_path / "model.pt"), monkeypatch)
    before = pictures(at, "patch (2, 2)")
    pca_before = pictures(at, "a.png")
    at.session_state[str(FEATURES_PATCH)] = (0, 3)  # what a click on patch (0, 3) sets (tests/test_browser.py)
    at.run()
    assert not at.exception and not at.error
    after = pictures(at, "patch (0, 3)")
    assert len(after) == 2 and not set(after) & set(before)  # both photos' maps follow the click
    assert pictures(at, "a.png") == pca_before  # the PCA does not depend on the click
    assert len(kept("pca_colours")) == 1  # and was not fitted again


def test_the_facet_and_block_pickers_change_the_pca(tmp_path, monkeypatch):
    path = tiny_checkpoint(tmp_path / "model.pt")
    at = features_tab(path, monkeypatch)
    shown = [pictures(at, "a.png")]
    next(s for s in at.selectbox if s.label == "Facet").set_value("key").run()
    assert "Block 1, facet **key**: 32 numbers per patch." in [c.value for c in at.caption]
    shown.append(pictures(at, "a.png"))
    next(s for s in at.slider if s.label == "Block").set_value(0).run()
    assert "Block 0, facet **key**: 32 numbers per patch." in [c.value for c in at.caption]
    shown.append(pictures(at, "a.png"))
    assert not at.error and len({tuple(urls) for urls in shown}) == 3
    fitted = {value.explained_variance.numpy().round(6).tobytes(): value for value in kept("pca_colours")}
    assert len(fitted) == 3  # three fits, each of its own features
    expected = explain.pca_rgb(reference_features(path, 0, "key"))
    assert any(torch.allclose(v.explained_variance, expected.explained_variance) for v in fitted.values())


def test_the_background_switch_and_a_threshold_that_keeps_nothing(tmp_path, monkeypatch):
    at = features_tab(tiny_checkpoint(tmp_path / "model.pt"), monkeypatch)
    next(t for t in at.toggle if t.label == "Remove background").set_value(True).run()
    assert any(c.value.endswith("(of the foreground patches' PCA).") for c in at.caption)
    with_background_removed = [v for v in kept("pca_colours") if v.foreground is not None]
    assert len(with_background_removed) == 1
    (fitted,) = with_background_removed
    for colours, foreground in zip(fitted.colours, fitted.foreground):
        assert (colours[~foreground] == 0).all() and foreground.any()
    next(s for s in at.slider if s.label == "Foreground threshold").set_value(1.0).run()
    assert not at.exception  # nothing above the threshold: a warning, and the other views still drawn
    assert any(w.value.startswith("No PCA colours:") for w in at.warning)
    assert [s.value for s in at.subheader] == ["PCA colours", "Click a patch: its matches", "Parts (k-means)"]


def test_one_photo_or_none(tmp_path, monkeypatch):
    at = features_tab(tiny_checkpoint(tmp_path / "model.pt"), monkeypatch)
    photos = next(m for m in at.multiselect if m.label.startswith("Photos"))
    photos.set_value(["a.png"]).run()
    assert not at.error
    # the matches are within the one photo
    assert captions(at)[:3] == [
        "a.png",
        "a.png: similarity to its patch (2, 2)",
        "a.png: similarity to its patch (2, 2)",
    ]
    next(m for m in at.multiselect if m.label.startswith("Photos")).set_value([]).run()
    assert "Choose one or more photos above." in [i.value for i in at.info]
