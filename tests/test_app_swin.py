"""The Photo page with a Swin (a tiny transformers save_pretrained folder typed as a path): every tab draws without
an exception, the tabs that apply show their maps, the others say in one line why they do not apply; the per-head
tab's stage and block pickers, the clicked patch's window, and the pictures it draws."""

import numpy as np
import pytest
from app_harness import captions, figures, open_tab, png_bytes, render_every_tab, started_app, values
from PIL import Image
from tiny_swins import swin_folder

import vitviz
from vitviz.analysis import analyse_windowed
from vitviz.explain import window_attention_map
from vitviz_dashboard.cache import results
from vitviz_dashboard.tabs import windowed

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")

NOT_APPLICABLE = ["Click a patch", "Features", "Model anatomy", "Tokens", "Faithfulness", "SAE features"]


def swin_app(tmp_path, monkeypatch, family: str = "swin"):
    """The page with a tiny Swin folder typed into the sidebar's path box, and a photo uploaded."""
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))  # the page opens typed paths only in allowed folders
    folder = swin_folder(tmp_path / family, family)
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    at.sidebar.text_input[0].set_value(str(folder)).run()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    assert not at.exception, at.exception
    return at


def test_every_tab_draws_a_swin_or_says_in_one_line_why_not(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "Swin, 3 stages" in caption and "window 4x4" in caption and "no [CLS]" in caption
    seen = render_every_tab(at)  # no exception and no error on any tab
    for tab in NOT_APPLICABLE:
        assert seen[tab]["info"] == [windowed.NOT_FOR_WINDOWS[tab]], tab
        assert "\n" not in windowed.NOT_FOR_WINDOWS[tab]
    assert "Attention rollout across windows and stages" in seen["Overview"]["subheaders"]
    assert any(c.startswith("photo.png") for c in seen["Overview"]["captions"])
    assert "Predictions" in seen["Overview"]["subheaders"]


def test_overview_and_class_specific_maps_for_swin(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    bars = next(f["data"][0] for f in figures(at) if f["data"][0]["type"] == "bar")  # the predictions
    assert len(values(bars["y"])) == 5
    open_tab(at, "Class-specific")
    shown = captions(at)
    assert any(c.startswith("relevance for") for c in shown) and any(c.startswith("gradcam for") for c in shown)
    methods = next(m for m in at.multiselect if m.label == "Methods")
    assert "grad-rollout" in methods.options and "legrad" not in methods.options
    refusals = [c.value for c in at.caption if c.value.startswith("Not for this model")]
    assert len(refusals) == 1 and "'legrad'" in refusals[0] and "'lens'" in refusals[0]
    methods.set_value(["grad-rollout"]).run()
    assert not at.exception and any(c.startswith("grad-rollout for") for c in captions(at))


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_per_head_tab_picks_stages_and_blocks_and_shows_a_patch_window(tmp_path, monkeypatch, family):
    at = swin_app(tmp_path, monkeypatch, family)
    open_tab(at, "Heads & layers")
    stage = next(r for r in at.radio if r.label == "Stage")
    assert stage.options == [  # as shown
        "stage 1: 16x16 tokens, windows 4x4, 2 blocks",
        "stage 2: 8x8 tokens, windows 4x4, 2 blocks",
        "stage 3: 4x4 tokens, windows 4x4, 2 blocks",
    ]
    block = next(r for r in at.radio if r.label == "Block")
    assert block.options == ["block 1 (not shifted)", "block 2 (shifted by 2x2)"]
    block.set_value(1).run()  # the shifted block of stage 1 (its index among every block)
    next(n for n in at.number_input if n.label == "Row").set_value(0).run()
    next(n for n in at.number_input if n.label == "Column").set_value(0).run()
    assert not at.exception, at.exception
    heads = [c for c in captions(at) if c.startswith("head ")]
    assert heads == ["head 0", "head 1"]
    assert any("patch (0, 0) of stage 1, block 2 (shifted by 2x2)" in c for c in captions(at))
    assert any(c.value.startswith("16 tokens in this window (a shifted window can wrap") for c in at.caption)
    next(r for r in at.radio if r.label == "Stage").set_value(
        2
    ).run()  # the last stage: 4 heads, the patch kept where it was on the photo
    assert not at.exception, at.exception
    assert [c for c in captions(at) if c.startswith("head ")] == [f"head {h}" for h in range(4)]
    assert any("patch (0, 0) of stage 3" in c for c in captions(at))


def test_window_maps_are_the_clicked_patch_row_over_its_own_window(tmp_path):
    model = vitviz.load_model(str(swin_folder(tmp_path / "swin")))
    analysis = analyse_windowed(model, Image.new("RGB", (40, 32), (90, 140, 30)))
    block, (row, col) = 1, (0, 0)  # the shifted block of stage 1: the corner's window wraps round the grid
    per_head, fused, window = results.window_maps.__wrapped__(None, "photo", block, row, col, _analysis=analysis)
    assert per_head.shape == (2, 16, 16) and window.sum() == 16
    cells = set(zip(*np.nonzero(window)))
    assert cells == {(r, c) for r in (14, 15, 0, 1) for c in (14, 15, 0, 1)}  # rolled by 2 x 2
    for head in range(2):
        values = window_attention_map(analysis.attentions, analysis.layouts, block, (row, col), head).values[0]
        np.testing.assert_allclose(per_head[head].reshape(-1), values.numpy(), equal_nan=True)
        assert np.nansum(per_head[head]) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(fused, per_head.mean(axis=0), equal_nan=True)


def test_window_picture_dims_outside_the_window_and_outlines_it():
    image = Image.new("RGB", (80, 80), (200, 200, 200))
    window = np.zeros((8, 8), dtype=bool)
    window[2:4, 2:4] = True
    values = np.where(window, 0.25, np.nan)

    class Settings:
        colormap, alpha = "inferno", 1.0

    jpeg = windowed.window_picture(image, values, window, (2, 2), (0, 0, 80, 80), Settings, (0.0, 1.0))
    import io

    picture = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)
    assert abs(picture[70, 70] - 40).max() <= 6  # outside the window: a fifth of the grey
    inside = picture[30, 30]  # the middle of a window cell, coloured by the map at 0.25
    assert abs(inside - np.array([200, 200, 200])).max() > 50 and inside.sum() > 3 * 40
    assert picture[20, 35].min() >= 200  # the window's top edge, outlined in white


def test_a_swin_backbone_draws_every_tab_without_predictions(tmp_path, monkeypatch):
    """A SwinModel folder (no classifier): the Overview says there are no predictions and what the maps read."""
    import transformers as hf
    from tiny_swins import TINY, perturbed

    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(tmp_path))
    perturbed(hf.SwinModel(hf.SwinConfig(**TINY))).save_pretrained(tmp_path / "backbone")
    at = started_app()
    at.sidebar.selectbox[0].set_value("path or upload...").run()
    at.sidebar.text_input[0].set_value(str(tmp_path / "backbone")).run()
    at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
    assert not at.exception, at.exception
    seen = render_every_tab(at)
    assert any("no predictions" in line and "the mean of the patch tokens" in line for line in seen["Overview"]["info"])
