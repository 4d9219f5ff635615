"""The Photo page with a Swin (a tiny transformers save_pretrained folder typed as a path): every tab draws without
an exception, the tabs that apply show their maps, the others say in one line why they do not apply; the per-head
tab's stage and block pickers, the clicked patch's window, and the pictures it draws."""

import io

import numpy as np
import pytest
import torch
from app_harness import (
    captions,
    figures,
    open_tab,
    png_bytes,
    render_every_tab,
    run_faithfulness,
    started_app,
    values,
)
from PIL import Image
from tiny_swins import swin_folder

import vitviz
from vitviz import explain
from vitviz.analysis import analyse_windowed, windowed_block_tokens
from vitviz.explain import method_maps, window_attention_map
from vitviz_dashboard.cache import results
from vitviz_dashboard.tabs import windowed

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")

NOT_APPLICABLE = ["Click a patch", "Tokens", "SAE features"]


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
    assert len(refusals) == 1 and "'legrad'" in refusals[0] and "'lens'" not in refusals[0]
    assert any(c.value.startswith("Swin: blocks 4 to 5, its last stage") for c in at.caption)  # the logit lens
    assert any(c.startswith("block 5: P(") for c in captions(at))
    lens = next(s for s in at.slider if s.label == "Block")  # the blocks' own numbers, as the caption names them
    assert (lens.min, lens.max, lens.value) == (4, 5, 5)
    methods.set_value(["grad-rollout"]).run()
    assert not at.exception and any(c.startswith("grad-rollout for") for c in captions(at))


@pytest.mark.parametrize("family", ["swin", "swinv2"])
def test_per_head_tab_picks_stages_and_blocks_and_shows_a_patch_window(tmp_path, monkeypatch, family):
    at = swin_app(tmp_path, monkeypatch, family)
    open_tab(at, "Heads & layers")
    stage = next(r for r in at.radio if r.label == "Stage")
    assert stage.options == [  # as shown
        "stage 1: 16x16 tokens, windows 4x4, blocks 0 to 1",
        "stage 2: 8x8 tokens, windows 4x4, blocks 2 to 3",
        "stage 3: 4x4 tokens, windows 4x4, blocks 4 to 5",
    ]
    block = next(r for r in at.radio if r.label == "Block")  # numbered from 0 over every stage, as on every tab
    assert block.options == ["block 0 (not shifted)", "block 1 (shifted by 2x2)"]
    block.set_value(1).run()  # the shifted block of stage 1 (its index among every block)
    next(n for n in at.number_input if n.label == "Row").set_value(0).run()
    next(n for n in at.number_input if n.label == "Column").set_value(0).run()
    assert not at.exception, at.exception
    heads = [c for c in captions(at) if c.startswith("head ")]
    assert heads == ["head 0", "head 1"]
    assert any("patch (0, 0) of stage 1, block 1 (shifted by 2x2)" in c for c in captions(at))
    assert any(c.value.startswith("16 tokens in this window (a shifted window can wrap") for c in at.caption)
    next(r for r in at.radio if r.label == "Stage").set_value(
        2
    ).run()  # the last stage: 4 heads, the patch kept where it was on the photo
    assert not at.exception, at.exception
    assert [c for c in captions(at) if c.startswith("head ")] == [f"head {h}" for h in range(4)]
    assert any("patch (0, 0) of stage 3" in c for c in captions(at))


def test_model_anatomy_draws_the_head_statistics_inside_windows(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    open_tab(at, "Model anatomy")
    assert not at.exception, at.exception
    shown = figures(at)
    entropy = next(f["data"][0] for f in shown if f["data"][0]["type"] == "heatmap")  # (layers, heads)
    table = values(entropy["z"])
    assert table.shape == (6, 4)  # six blocks; 2, 2 and 4 heads by stage: the first stages' last columns blank
    assert np.isnan(table[:4, 2:]).all() and np.isfinite(table[:4, :2]).all() and np.isfinite(table[4:]).all()
    distance = [f for f in shown if f["data"][0]["type"] == "scatter"][0]["data"]  # one trace per head
    assert len(distance) == 4
    model = vitviz.load_model(str(tmp_path / "swin"))
    analysis = analyse_windowed(model, Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    np.testing.assert_allclose(table, analysis.statistics["entropy"].numpy(), rtol=1e-4, equal_nan=True)
    np.testing.assert_allclose(values(distance[3]["y"])[4:], analysis.statistics["distance_px"][4:, 3], rtol=1e-4)


def test_faithfulness_compares_the_maps_that_read_windows(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    open_tab(at, "Faithfulness")
    run_faithfulness(at)
    assert not at.exception, at.exception
    table = at.table[0].value
    assert list(table["map"]) == ["rollout", "relevance (Chefer et al.)", "grad-rollout", "Grad-CAM"]
    model = vitviz.load_model(str(tmp_path / "swin"))
    analysis = analyse_windowed(model, Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    target = int(analysis.probabilities.argmax())
    maps = method_maps(model, analysis.pixel_values, ["relevance", "gradcam"], target).maps
    for row, method in ((1, "relevance"), (3, "gradcam")):  # against the curves computed here from the maps
        areas = explain.faithfulness(model, analysis.pixel_values, maps[method], target)
        assert float(table.iloc[row, 1]) == pytest.approx(areas["auc_most_first"], abs=1.5e-3)
        assert float(table.iloc[row, 2]) == pytest.approx(areas["auc_least_first"], abs=1.5e-3)


def test_features_tab_paints_any_blocks_tokens_on_its_stage_grid(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    open_tab(at, "Features")
    assert not at.exception, at.exception
    slider = next(s for s in at.select_slider if s.label == "Block")
    assert slider.value == 5
    shown = captions(at)
    assert any(c.startswith("block 5: stage 3, 4x4 tokens of 64: the first three principal components") for c in shown)
    slider.set_value(1).run()  # the shifted block of the first stage
    assert not at.exception, at.exception
    assert any(c.startswith("Cosine similarity of token (8, 8) of block 1") for c in captions(at))


def test_a_blocks_tokens_are_transformers_blocks_output(tmp_path):
    """Against transformers' own block: its output (hooked) is the tokens the Features tab reads."""
    import transformers as hf
    from tiny_swins import TINY

    folder = swin_folder(tmp_path / "swin")
    model = vitviz.load_model(str(folder))
    reference = hf.SwinForImageClassification.from_pretrained(folder, attn_implementation="eager").eval()
    analysis = analyse_windowed(model, Image.new("RGB", (40, 32), (90, 140, 30)))
    seen = {}
    block = reference.swin.encoder.layers[1].blocks[1]  # stage 2's shifted block: vitviz's block 3
    handle = block.register_forward_hook(lambda module, args, output: seen.update(out=output[0]))  # returns None
    with torch.no_grad():
        reference(analysis.pixel_values)
    handle.remove()
    tokens = results.block_tokens.__wrapped__(None, "photo", 3, _analysis=analysis, _model=model)
    assert tokens.shape == (64, TINY["embed_dim"] * 2)
    np.testing.assert_allclose(tokens, seen["out"][0].numpy(), rtol=1e-4, atol=1e-5)
    library = windowed_block_tokens(model, analysis.pixel_values, -3)  # the same block, counted from the end
    assert library.dtype == torch.float32 and library.shape == (1, 64, TINY["embed_dim"] * 2)
    np.testing.assert_array_equal(library[0].numpy(), tokens)
    with pytest.raises(ValueError, match=r"block must be in \[-6, 5\]; got 6"):
        windowed_block_tokens(model, analysis.pixel_values, 6)


def test_heads_tab_knocks_out_each_head_inside_its_windows(tmp_path, monkeypatch):
    at = swin_app(tmp_path, monkeypatch)
    open_tab(at, "Heads & layers")
    next(t for t in at.toggle if t.label.startswith("Knock out each head in turn (16 forward passes)")).set_value(
        True
    ).run()
    assert not at.exception, at.exception
    heatmap = next(f["data"][0] for f in figures(at) if f["data"][0]["type"] == "heatmap")
    drop = values(heatmap["z"])
    assert drop.shape == (6, 4) and np.isnan(drop[:4, 2:]).all()
    model = vitviz.load_model(str(tmp_path / "swin"))
    analysis = analyse_windowed(model, Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    target = int(analysis.probabilities.argmax())
    expected = -explain.head_importance(model, analysis.pixel_values, target).logit_change[0].numpy()
    np.testing.assert_allclose(drop, expected, rtol=1e-4, atol=1e-5, equal_nan=True)


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

    picture = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)
    assert abs(picture[70, 70] - 40).max() <= 6  # outside the window: a fifth of the grey
    inside = picture[30, 30]  # the middle of a window cell, coloured by the map at 0.25
    assert abs(inside - np.array([200, 200, 200])).max() > 50 and inside.sum() > 3 * 40
    assert picture[20, 35].min() >= 200  # the window's top edge, outlined in white


def test_padded_slots_are_drawn_hatched_past_the_grids_edge():
    """transformers' order on a padded input: the stage-1 grid of 17 x 13 tokens pads to 20 x 16, and the shifted
    block's top-left window holds padded slots that wrapped round. The picture grows a margin for them."""
    from types import SimpleNamespace

    from tiny_swins import PADDED_SIZE, tiny_swin

    from vitviz.model.windows import window_cells
    from vitviz.preprocessing import Preprocessing

    model = tiny_swin("huggingface", "swin")
    model.transform = Preprocessing(resize=PADDED_SIZE["huggingface"])  # (34, 26): 17 x 13 patches of 2 px
    analysis = analyse_windowed(model, Image.new("RGB", (26, 34), (90, 140, 30)))
    page = SimpleNamespace(analysis=analysis, model=model)
    cells, padding = windowed.padded_slots(page, 1, (0, 0))  # the shifted block of stage 1, the top-left token
    view = window_attention_map(analysis.attentions, analysis.layouts, 1, (0, 0), 1)
    expected = window_cells((17, 13), (4, 4), (2, 2), "huggingface")[view.window][view.padded_slots].numpy()
    np.testing.assert_array_equal(cells, expected)
    assert len(cells) and ((cells[:, 0] >= 17) | (cells[:, 1] >= 13)).all()
    np.testing.assert_allclose(padding[1], view.padding[0].numpy())
    assert padding.shape == (2, len(cells)) and (padding > 0).all()  # transformers' padding takes attention

    class Settings:
        colormap, alpha = "inferno", 1.0

    image = Image.new("RGB", (130, 170), (200, 200, 200))  # 10 px a token: the grid fills the photo
    window = np.zeros((17, 13), dtype=bool)
    window[0, 0] = True
    values = np.where(window, 0.5, np.nan)
    jpeg = windowed.window_picture(
        image, values, window, (0, 0), (0, 0, 130, 170), Settings, (0.0, 1.0), (np.array([[17, 0], [18, 1]]), [1, 0])
    )
    picture = Image.open(io.BytesIO(jpeg)).convert("RGB")
    assert picture.size == (130, 190)  # two rows of padding below the photo
    grid = np.asarray(picture).astype(int)
    bright = np.array(overlays_colour(1.0))
    assert abs(grid[175, 2:8].mean(axis=0) - bright).max() < 60  # the padded cell of weight 1, in its colour
    assert abs(grid[175, 40] - 70).max() <= 8  # the grey margin beside it


def overlays_colour(value: float) -> np.ndarray:
    from vitviz.render import overlays

    return overlays.colorize(np.array([[value]]), "inferno")[0, 0]


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
