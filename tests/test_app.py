"""The page through Streamlit's AppTest: model loading, uploads, every tab, controls, errors."""

import base64
import io
import json
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
import torch
from hostile_images import CORPUS
from PIL import Image
from streamlit.testing.v1 import AppTest
from test_app_reading import same_text, shown_in
from tiny_models import tiny_checkpoint

import vitviz.loading.specs
import vitviz_dashboard.analysis
from vitviz import Preprocessing, ViT, ViTConfig, explain, save_checkpoint
from vitviz_dashboard.cache import budget
from vitviz_dashboard.tabs import class_specific

APP = str(Path(__file__).resolve().parent.parent / "app.py")
NAMES = ["cat", "dog", "bird"]


# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def png_bytes(size=(64, 48)) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, (200, 30, 30))
    image.paste((20, 20, 220), (0, 0, size[0] // 2, size[1] // 2))
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def started_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    return at


def uploaded_app(name="photo.png", content=None) -> AppTest:
    at = started_app()
    at.file_uploader[0].set_value((name, content if content is not None else png_bytes(), "image/png")).run()
    assert not at.exception, at.exception
    return at


def chart_specs(at) -> str:
    return " ".join(chart.proto.spec for chart in at.get("plotly_chart"))


def test_app_starts_on_the_default_model_and_explains_what_to_do(default_model):
    at = started_app()
    assert not at.error
    caption = at.sidebar.caption[0].value
    assert "2 layers x 4 heads" in caption and "3 classes" in caption and "input 32x32" in caption
    assert "Upload one or more photos" in at.info[0].value


def open_tab(at, name: str) -> AppTest:
    """Click a tab: the tabs are bound to session state under the key "tab", and only the open one runs."""
    at.session_state["tab"] = name
    at.run()
    assert not at.exception, at.exception
    return at


def download_labels(at) -> list[str]:
    return [b.proto.label for b in at.get("download_button")]


def test_upload_renders_predictions_and_the_rollout_overlay(default_model):
    at = uploaded_app()
    assert not at.error
    assert [tab.label for tab in at.tabs] == [
        "Overview",
        "Heads & layers",
        "Click a patch",
        "Features",
        "Class-specific",
        "Model anatomy",
        "Tokens",
        "Faithfulness",
    ]
    specs = chart_specs(at)
    for name in NAMES:
        assert name in specs  # the prediction bars
    assert captions(at) == ["photo.png, 64x48 (full resolution in the PNG download)"]
    assert legends(at)[0].startswith("Colours: the rollout, from ")  # the overlay's colour scale, as a strip
    assert download_labels(at) == ["Overlay (PNG, full size)", "This tab's maps (.npz)"]
    assert "nats" not in specs  # only the open tab is drawn


def test_every_tab_draws_its_maps(default_model):
    at = uploaded_app()
    drawn = {}
    probabilities = vitviz_dashboard.analysis.analyse_image(
        vitviz.load_model(str(vitviz.loading.specs.DEFAULT_CHECKPOINT)),
        Image.open(io.BytesIO(png_bytes())).convert("RGB"),
    ).probabilities
    top = int(np.argmax(probabilities))
    for tab in ["Heads & layers", "Click a patch", "Class-specific", "Model anatomy", "Faithfulness"]:
        open_tab(at, tab)
        assert not at.error
        assert "What the model saw: 32x32" in [img.proto.imgs[0].caption for img in at.get("image")]
        # the prediction, and what the model saw, whichever tab is open
        assert shown_in(
            f"**Prediction: {NAMES[top]} ({probabilities[top]:.1%})**; the model saw the photo as a 32x32 "
            "input (4x4 patches of 8 px).",
            [m.value for m in at.markdown],
        )
        drawn[tab] = captions(at)
        if tab == "Model anatomy":
            specs = chart_specs(at)
            assert "mean attention distance" in specs and "nats" in specs
            pictures = [img for img in at.get("image") if not (img.proto.imgs[0].caption or "").startswith("What the")]
            assert len(pictures) == 1 and len(pictures[0].proto.imgs) == 16  # filter components
            # each chart's numbers under it: the layer x head tables as CSV, the others as .npz
            assert sorted(download_labels(at)) == [
                "Entropies (.csv)",
                "Mean distances (.csv)",
                "Patch-embedding components (.npz)",
                "Position-embedding similarity (.npz)",
            ]
    assert drawn["Heads & layers"] == [f"head {h}" for h in range(4)] + [
        "photo.png: layer 1, head mean",
        "photo.png: layer 0, head mean",
    ]
    assert drawn["Click a patch"] == [
        "patch (2, 2), layer 1, mean over heads (the patch outlined)",
        *(f"head {h}" for h in range(4)),
    ]
    target = drawn["Class-specific"][0].split(" for ")[1]
    assert drawn["Class-specific"] == [
        f"relevance for {target}",
        f"legrad for {target}",  # the lens, last block first
        f"block 1: P({target}) read from each patch",
        "block 1: the class each patch votes for",
    ]
    assert drawn["Faithfulness"] == []  # run on request only


def test_the_anatomy_tables_download_as_csv_with_named_rows_and_columns():
    from vitviz_dashboard.downloads import csv_table

    table = csv_table(np.array([[1.5, 2.0, 3.25], [4.0, 5.0, 0.000123456789]]), "layer", "head")
    assert table.splitlines() == ["layer \\ head,head 0,head 1,head 2", "layer 0,1.5,2,3.25", "layer 1,4,5,0.000123457"]
    with pytest.raises(ValueError, match="2-D"):
        csv_table(np.zeros((2, 2, 2)), "layer", "head")


def test_small_photos_are_enlarged_by_whole_pixels_for_the_page_and_big_ones_reduced():
    from vitviz.preprocessing import ImageFile
    from vitviz_dashboard.cache.pictures import MAX_DISPLAY_SIDE, display_photo

    small = Image.new("RGB", (32, 24), (10, 20, 30))
    small.putpixel((0, 0), (255, 0, 0))
    shown = display_photo(ImageFile.of(png_of(small)))
    assert shown.size == (256, 192)  # 8x: each pixel an 8x8 square, so a patch outline stays thin
    assert shown.getpixel((7, 7)) == (255, 0, 0) and shown.getpixel((8, 8)) == (10, 20, 30)
    big = display_photo(ImageFile.of(png_of(Image.new("RGB", (3000, 1500)))))
    assert big.size == (MAX_DISPLAY_SIDE, MAX_DISPLAY_SIDE // 2)


def test_each_method_and_statistic_is_explained_where_it_is_shown(default_model):
    at = uploaded_app()
    explained = {
        "Overview": ["Abnar & Zuidema 2020", "same for every class"],
        "Click a patch": ["sums to 1 over all tokens"],
        "Class-specific": ["(Chefer et al. 2021)", "Bousselham et al. 2025", "read on its own"],
        "Model anatomy": ["distance in pixels", "in nats", "Cosine similarity", "principal components"],
        "Faithfulness": ["positive and negative tests"],
    }
    for tab, phrases in explained.items():
        open_tab(at, tab)
        text = " ".join(c.value for c in at.caption)
        for phrase in phrases:
            assert phrase in text, (tab, phrase)


def test_class_maps_are_computed_when_their_tab_is_opened_once_per_method(default_model, monkeypatch):
    calls = []
    original = vitviz_dashboard.analysis.class_maps
    monkeypatch.setattr(
        vitviz_dashboard.analysis, "class_maps", lambda *a, **k: calls.append(k["methods"]) or original(*a, **k)
    )
    at = uploaded_app()
    assert calls == []  # a backward pass, only for the tab that shows it
    open_tab(at, "Class-specific")
    assert calls == [["relevance"], ["legrad"]]
    open_tab(at, "Overview")
    open_tab(at, "Class-specific")
    assert len(calls) == 2  # cached
    next(m for m in at.multiselect if m.label == "Methods").select("gradcam").run()
    assert calls[2:] == [["gradcam"]]  # only the new one is computed
    assert [c.split(" for ")[0] for c in captions(at)[:3]] == ["relevance", "legrad", "gradcam"]


def test_every_class_specific_method_matches_the_library(default_model):
    at = open_tab(uploaded_app(), "Class-specific")
    methods = next(m for m in at.multiselect if m.label == "Methods")
    # the picker offers the registry's class-specific maps, the lens aside (it has its own section)
    offered = [name for name, method in explain.METHODS.items() if method.class_specific and name != "lens"]
    assert list(methods.options) == [class_specific.method_label(name) for name in offered]
    methods.set_value(["relevance", "grad-rollout", "legrad", "tam", "gradcam"]).run()
    assert not at.exception and not at.error
    model = vitviz.load_model(str(vitviz.loading.specs.DEFAULT_CHECKPOINT))
    pixels = model.transform(Image.open(io.BytesIO(png_bytes())).convert("RGB"))[None]
    target = next(s for s in at.selectbox if s.label == "Explain the class").value
    expected = explain.method_maps(model, pixels, methods.value, target).maps
    grids = [values(f["data"][0]["z"]) for f in figures(at) if f["data"][0]["type"] == "heatmap"][: len(expected)]
    for grid, (name, patch_map) in zip(grids, expected.items()):
        np.testing.assert_allclose(grid, patch_map.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_logit_lens_follows_the_block_slider(default_model):
    at = open_tab(uploaded_app(), "Class-specific")
    model = vitviz.load_model(str(vitviz.loading.specs.DEFAULT_CHECKPOINT))
    pixels = model.transform(Image.open(io.BytesIO(png_bytes())).convert("RGB"))[None]
    target = next(s for s in at.selectbox if s.label == "Explain the class").value
    lens = explain.method_maps(model, pixels, ["lens"], target).lens

    def drawn() -> tuple[str, np.ndarray, np.ndarray]:
        votes = next(f for f in figures(at) if f["data"][0].get("hovertemplate", "").endswith("%{text}<extra></extra>"))
        depth = next(f for f in figures(at) if f["data"][0].get("name") == "head reading the block")
        names = np.asarray(values(votes["data"][0]["text"]), dtype=object)
        return next(c for c in captions(at) if c.startswith("block")), names, values(depth["data"][0]["y"])

    caption, names, readout = drawn()
    assert caption.startswith("block 1: ")
    # the votes painted over the photo, as big as the probability map beside it, and every class in the legend
    assert "block 1: the class each patch votes for" in captions(at)
    legend = next(h.proto.body for h in at.get("html") if "Patches voting for each" in h.proto.body)
    counts = {name: int((lens.votes[1, 0] == k).sum()) for k, name in enumerate(NAMES)}
    assert all(f"{name} ({count})" in legend for name, count in counts.items()), legend
    assert (
        "Colours: the class's probability, one fixed scale for every block, from 0 (left of the strip) to 1 (right)."
        in legends(at)
    )
    assert any(c.startswith("Colours: relevance on the top class's scale, from 0 ") for c in legends(at))
    np.testing.assert_allclose(readout, lens.readout_probability[:, 0].numpy(), rtol=1e-5)
    assert names.tolist() == [[NAMES[v] for v in row] for row in lens.votes[1, 0].tolist()]
    url = next(i.proto.imgs[0].url for i in at.get("image") if i.proto.imgs[0].caption.startswith("block"))
    next(s for s in at.slider if s.label == "Block").set_value(0).run()
    caption, names, _ = drawn()
    assert caption.startswith("block 0: ")
    assert names.tolist() == [[NAMES[v] for v in row] for row in lens.votes[0, 0].tolist()]
    assert next(i.proto.imgs[0].url for i in at.get("image") if i.proto.imgs[0].caption.startswith("block")) != url


def test_every_head_is_drawn_over_the_photo_on_one_colour_scale_unless_asked(default_model):
    at = open_tab(uploaded_app(), "Heads & layers")
    model = vitviz.load_model(str(vitviz.loading.specs.DEFAULT_CHECKPOINT))
    analysis = vitviz_dashboard.analysis.analyse_image(model, Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    top = float(analysis.readout_attention[-1].max())
    notes = [c.value for c in at.caption]
    assert shown_in(f"Colour scale: 0 to {top:.3g}, shared by every head (the strip below).", notes)
    assert shown_in(
        f"Colours: attention weight, every head, from 0 (left of the strip) to {top:.3g} (right).", legends(at)
    )
    heads = [img.proto.imgs[0].url for img in at.get("image") if img.proto.imgs[0].caption.startswith("head ")]
    assert len(heads) == 4
    next(t for t in at.toggle if t.label == "One colour scale for every head").set_value(False).run()
    assert "Colour scale: each head from its own smallest to its largest weight (the strip below)." in [
        c.value for c in at.caption
    ]
    rescaled = [img.proto.imgs[0].url for img in at.get("image") if img.proto.imgs[0].caption.startswith("head ")]
    assert all(a != b for a, b in zip(heads, rescaled))  # every head's colours changed


def test_tab_controls_keep_their_values_while_another_tab_is_open(default_model):
    at = started_app()
    at.file_uploader[0].set_value(
        [("a.png", png_bytes(), "image/png"), ("b.png", png_bytes((30, 60)), "image/png")]
    ).run()
    next(s for s in at.slider if s.label == "Discard ratio").set_value(0.5).run()
    next(s for s in at.slider if s.label == "Top-k").set_value(2).run()
    open_tab(at, "Heads & layers")
    next(s for s in at.selectbox if s.label == "B: image").set_value("a.png").run()
    next(s for s in at.selectbox if s.label == "A: head").set_value(3).run()
    open_tab(at, "Overview")
    assert {s.label: s.value for s in at.slider}["Discard ratio"] == 0.5
    assert {s.label: s.value for s in at.slider}["Top-k"] == 2
    open_tab(at, "Heads & layers")
    values = {s.label: s.value for s in at.selectbox}
    assert values["B: image"] == "a.png" and values["A: head"] == 3
    # a new main image: the compare sides follow it, choices that fit any image stay
    next(s for s in at.selectbox if s.label == "Image").set_value("a.png").run()
    values = {s.label: s.value for s in at.selectbox}
    assert values["A: image"] == values["B: image"] == "a.png" and values["A: head"] == 3


def jpeg_bytes(size=(64, 48), colour=(30, 160, 90)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG")
    return buffer.getvalue()


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


def image_urls(at) -> list:
    """The tabs' pictures (the model's input, above every tab, left out)."""
    return [
        img.proto.imgs[0].url
        for img in at.get("image")
        if not (img.proto.imgs[0].caption or "").startswith("What the model saw")
    ]


def test_controls_change_what_is_drawn(default_model):
    at = uploaded_app()
    before = image_urls(at)
    at.sidebar.selectbox[1].set_value("viridis").run()  # colormap
    after_colormap = image_urls(at)
    assert after_colormap[0] != before[0]
    at.sidebar.slider[0].set_value(0.9).run()  # opacity
    assert image_urls(at)[0] != after_colormap[0]
    rollout_before = image_urls(at)[0]
    discard = next(s for s in at.slider if s.label == "Discard ratio")
    discard.set_value(0.5).run()
    assert image_urls(at)[0] != rollout_before
    assert not at.exception


def test_query_patch_follows_row_and_column(default_model):
    at = open_tab(uploaded_app(), "Click a patch")
    assert any("patch (2, 2), layer 1" in (img.proto.imgs[0].caption or "") for img in at.get("image"))
    next(n for n in at.number_input if n.label == "Row").set_value(0).run()
    next(n for n in at.number_input if n.label == "Column").set_value(3).run()
    assert any("patch (0, 3), layer 1" in (img.proto.imgs[0].caption or "") for img in at.get("image"))


def test_class_picker_changes_the_class_specific_map(default_model):
    at = open_tab(uploaded_app(), "Class-specific")
    picker = next(s for s in at.selectbox if s.label == "Explain the class")
    first = [img.proto.imgs[0] for img in at.get("image") if "relevance for" in (img.proto.imgs[0].caption or "")][0]
    assert len(picker.options) == 3  # the picker offers every class
    picker.select_index(2).run()
    second = [img.proto.imgs[0] for img in at.get("image") if "relevance for" in (img.proto.imgs[0].caption or "")][0]
    assert first.caption != second.caption and first.url != second.url


def test_class_maps_share_the_top_class_scale_unless_asked(default_model):
    at = open_tab(uploaded_app(), "Class-specific")
    model = vitviz.load_model(str(vitviz.loading.specs.DEFAULT_CHECKPOINT))
    pixels = model.transform(Image.open(io.BytesIO(png_bytes())).convert("RGB"))[None]
    top_map = explain.method_maps(model, pixels, ["relevance"]).maps["relevance"]
    next(s for s in at.selectbox if s.label == "Explain the class").select_index(2).run()  # the least likely class
    target = next(s for s in at.selectbox if s.label == "Explain the class").value
    weak_map = explain.method_maps(model, pixels, ["relevance"], target).maps["relevance"]
    assert shown_in(
        f"Colours: relevance on the top class's scale, from 0 (left of the strip) to "
        f"{float(top_map.max()):.3g} (right).",
        legends(at),
    )
    next(t for t in at.toggle if t.label.startswith("Compare classes")).set_value(False).run()
    assert shown_in(
        f"Colours: relevance, this map's range, from {float(weak_map.min()):.3g} (left of the strip) to "
        f"{float(weak_map.max()):.3g} (right).",
        legends(at),
    )


def run_faithfulness(at) -> None:
    next(t for t in at.toggle if t.label.startswith("Run the perturbation test")).set_value(True).run()


def test_faithfulness_tab_runs_on_request_and_says_so(default_model):
    at = open_tab(uploaded_app(), "Faithfulness")
    assert "most relevant first" not in chart_specs(at)
    assert [i.value for i in at.info] == [
        "Nothing is drawn until you switch on 'Run the perturbation test' above: "
        "it re-runs the model on the photo with patches replaced, so it runs only "
        "when asked. Once on, it stays on for every photo and class you choose."
    ]
    run_faithfulness(at)
    assert not at.exception and not at.info
    table = at.table[0].value
    assert len(table) == 3
    lines = figures(at)[0]["data"]
    assert [line["name"] for line in lines[:2]] == ["rollout, most relevant first", "rollout, least relevant first"]
    # one colour per map, solid for most relevant first, dashed for least relevant first
    assert [line["line"]["dash"] for line in lines] == ["solid", "dash"] * 3
    colours = [line["line"]["color"] for line in lines]
    assert colours[0::2] == colours[1::2] and len(set(colours)) == 3


def test_faithfulness_tests_the_class_chosen_in_the_class_specific_tab_and_stays_on(default_model):
    at = open_tab(uploaded_app(), "Class-specific")
    picker = next(s for s in at.selectbox if s.label == "Explain the class")
    picker.select_index(2).run()
    chosen = next(s for s in at.selectbox if s.label == "Explain the class").value  # a class index, not the top one
    open_tab(at, "Faithfulness")
    assert next(s for s in at.selectbox if s.label == "Explain the class").value == chosen  # one choice, two tabs
    assert f"probability of '{NAMES[chosen]}' is recorded" in at.caption[0].value
    run_faithfulness(at)
    at.file_uploader[0].set_value(
        [("photo.png", png_bytes(), "image/png"), ("other.png", png_bytes((40, 40)), "image/png")]
    ).run()
    assert not at.exception
    assert next(t for t in at.toggle if t.label.startswith("Run the perturbation test")).value  # still on
    assert at.table and len(at.table[0].value) == 3  # and run for the new image


@pytest.mark.parametrize("case", [c for c in CORPUS if not c.good], ids=lambda c: c.name)
def test_bad_upload_shows_an_error_not_an_exception(default_model, case):
    # every refused kind of the hostile corpus, through the upload widget
    at = uploaded_app("upload.png", case.make())
    assert at.error and "Could not read upload.png" in at.error[0].value
    assert re.search(case.error, at.error[0].value), at.error[0].value
    assert not at.get("plotly_chart")  # nothing drawn from a refused file


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

    from test_load import CreatesAFile

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


def test_one_layer_model_without_cls_token_renders_every_tab(tmp_path, monkeypatch):
    # mean pooling, registers instead of [CLS], one block, two classes: every slider has one choice or two
    odd = dict(num_layers=1, class_token=False, pooling="mean", num_register_tokens=2)
    tiny_checkpoint(tmp_path / "odd.pt", names=("yes", "no"), **odd)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", tmp_path / "odd.pt")
    at = uploaded_app()
    assert not at.error
    for tab in ["Heads & layers", "Click a patch", "Class-specific", "Model anatomy", "Tokens"]:
        open_tab(at, tab)
        assert not at.error
        if tab == "Heads & layers":  # no [CLS]: what the mean patch token (what the head reads) attends to
            assert at.subheader[0].value == "Every head in layer 0: mean of the patch rows"
            assert not at.info
        if tab == "Class-specific":
            assert any("relevance for" in (img.proto.imgs[0].caption or "") for img in at.get("image"))
    open_tab(at, "Faithfulness")
    run_faithfulness(at)
    assert not at.exception
    assert at.table[0].value["map"].tolist() == [
        "rollout",
        "mean of the patch rows (last layer)",
        "relevance (Chefer et al.)",
    ]


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
    assert not at.exception and at.session_state["tab"] == "Heads & layers"
    assert next(s for s in at.selectbox if s.label == "Image").value == "a.png"
    assert [f.name for f in at.file_uploader[0].value] == ["a.png", "b.png"]


# --- the models people use: backbones, registers, attention pooling, the model picker ---------------

EVERY_TAB = [
    "Overview",
    "Heads & layers",
    "Click a patch",
    "Features",
    "Class-specific",
    "Model anatomy",
    "Tokens",
    "Faithfulness",
]


def figures(at) -> list[dict]:
    """Every plotly figure on the page, as plotly's JSON."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def values(field) -> np.ndarray:
    """A trace's data array from plotly's JSON: a list, or a typed array ({"dtype", "bdata"} in base64)."""
    if isinstance(field, dict) and "bdata" in field:
        shape = field.get("shape", -1)  # a 2-D array's shape comes as a string, "4, 4"
        shape = tuple(int(n) for n in shape.split(",")) if isinstance(shape, str) else shape
        return np.frombuffer(base64.b64decode(field["bdata"]), dtype=field["dtype"]).reshape(shape)
    return np.asarray(field)


def captions(at) -> list[str]:
    """The captions of the tabs' pictures: the colour-scale strips (legends) and the model's input, shown above every
    tab, left out."""
    return [
        c
        for c in (img.proto.imgs[0].caption or "" for img in at.get("image"))
        if not c.startswith(("Colours: ", "What the model saw"))
    ]


def legends(at) -> list[str]:
    """The captions of the colour-scale strips under the overlays."""
    return [c for c in (img.proto.imgs[0].caption or "" for img in at.get("image")) if c.startswith("Colours: ")]


def model_app(path, monkeypatch) -> AppTest:
    """The page with the checkpoint at ``path`` as its default model, and a photo uploaded."""
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    return uploaded_app()


def render_every_tab(at) -> dict[str, dict]:
    """Open every tab in turn; none may show an exception or an error. Returns what each tab showed:
    its info notes, subheaders, image captions and chart specs."""
    seen = {}
    for tab in EVERY_TAB:
        open_tab(at, tab)
        assert not at.error, (tab, [e.value for e in at.error])
        seen[tab] = {
            "info": [i.value for i in at.info],
            "subheaders": [s.value for s in at.subheader],
            "captions": captions(at),
            "specs": chart_specs(at),
        }
    return seen


@pytest.mark.parametrize("config", [dict(), dict(class_token=False, pooling="mean")], ids=["cls", "mean"])
def test_a_backbone_shows_every_map_and_says_it_has_no_predictions(tmp_path, monkeypatch, config):
    at = model_app(tiny_checkpoint(tmp_path / "backbone.pt", names=(), **config), monkeypatch)
    assert "no classifier (a backbone)" in at.sidebar.caption[0].value
    seen = render_every_tab(at)
    overview = seen["Overview"]
    assert any("this model has no classifier (a backbone): no predictions" in i.lower() for i in overview["info"])
    assert overview["captions"] == ["photo.png, 64x48 (full resolution in the PNG download)"]  # the rollout
    for tab in ("Class-specific", "Faithfulness"):
        (info,) = seen[tab]["info"]
        assert info.startswith("This model has no classifier (a backbone)")
        assert info.endswith(("so they need classes. Every other tab works.", "so it needs classes."))
        assert seen[tab]["captions"] == []
    readout = "[CLS] attention" if config == {} else "mean of the patch rows"
    assert seen["Heads & layers"]["subheaders"][0] == f"Every head in layer 1: {readout}"
    assert len(seen["Heads & layers"]["captions"]) == 4 + 2  # every head over the photo, and the compare sides
    assert "patch (2, 2), layer 1, mean over heads (the patch outlined)" in seen["Click a patch"]["captions"]
    assert any(c.startswith("norm of each patch token after block 1") for c in seen["Tokens"]["captions"])


def test_the_overview_of_a_backbone_draws_no_prediction_chart(tmp_path, monkeypatch):
    at = model_app(tiny_checkpoint(tmp_path / "backbone.pt", names=()), monkeypatch)
    assert [f["data"][0]["type"] for f in figures(at)] == ["heatmap"]  # the rollout's grid, no bars
    assert not any(s.label == "Top-k" for s in at.slider)


REGISTERS = dict(class_token=True, num_register_tokens=2, layer_scale=True, pos_embed_prefix=False)


def test_a_model_with_registers_renders_every_tab_and_names_its_registers(tmp_path, monkeypatch):
    at = model_app(tiny_checkpoint(tmp_path / "registers.pt", **REGISTERS), monkeypatch)
    assert "Tokens: [CLS] + 2 registers, then the patches; pooling: the [CLS] token" in at.sidebar.caption[0].value
    render_every_tab(at)
    open_tab(at, "Tokens")
    bars = next(f for f in figures(at) if f["layout"].get("barmode") == "stack")
    assert [trace["name"] for trace in bars["data"]] == ["[CLS]", "register 1", "register 2", "patches"]
    norms = next(f for f in figures(at) if f["layout"]["yaxis"].get("title", {}).get("text") == "token norm (L2)")
    assert [trace["name"] for trace in norms["data"]] == [
        "median patch",
        "max patch",
        "[CLS]",
        "register 1",
        "register 2",
    ]
    assert any("no attention-pooling head: its head reads the [CLS] token" in c.value for c in at.caption)


def test_the_prefix_token_view_draws_the_models_own_shares_and_follows_the_layer_slider(tmp_path, monkeypatch):
    from vitviz_dashboard.analysis import analyse_image

    path = tiny_checkpoint(tmp_path / "registers.pt", **REGISTERS)
    at = open_tab(model_app(path, monkeypatch), "Tokens")
    analysis = analyse_image(vitviz.load_model(path), Image.open(io.BytesIO(png_bytes())).convert("RGB"))
    expected = explain.attention_to_prefix_tokens(analysis.attentions, 3)[0].numpy()  # (layers, heads, 3 + 1)

    def drawn() -> np.ndarray:  # the stacked bars: (heads, tokens)
        bars = next(f for f in figures(at) if f["layout"].get("barmode") == "stack")
        return np.stack([values(trace["y"]) for trace in bars["data"]], axis=1)

    np.testing.assert_allclose(drawn(), expected[1], rtol=1e-5)  # the last layer first
    next(s for s in at.slider if s.label == "Layer (prefix tokens)").set_value(0).run()
    np.testing.assert_allclose(drawn(), expected[0], rtol=1e-5)
    assert not np.allclose(expected[0], expected[1])


@pytest.mark.parametrize(
    "config, reads, tokens",
    [
        (
            dict(distillation_token=True, distillation_head=True),
            "[CLS] and distillation rows, half each",
            "[CLS] + distillation",
        ),
        (
            dict(pooling="cls+mean", num_register_tokens=1),
            "[CLS] row and mean patch row, half each",
            "[CLS] + 1 register",
        ),
    ],
    ids=["deit", "cls+mean"],
)
def test_every_readout_gets_every_tab_titled_by_what_it_reads(tmp_path, monkeypatch, config, reads, tokens):
    at = model_app(tiny_checkpoint(tmp_path / "model.pt", **config), monkeypatch)
    assert f"Tokens: {tokens}, then the patches" in at.sidebar.caption[0].value
    seen = render_every_tab(at)
    assert seen["Heads & layers"]["subheaders"][0] == f"Every head in layer 1: {reads}"
    assert len(seen["Class-specific"]["captions"]) == 4  # two methods and the logit lens (probability and votes)
    open_tab(at, "Faithfulness")
    run_faithfulness(at)
    assert at.table[0].value["map"].tolist() == ["rollout", f"{reads} (last layer)", "relevance (Chefer et al.)"]


def one_bright_patch_png() -> bytes:
    """A grey 32 x 32 photo with one white patch, (1, 2) of the tiny models' 4 x 4 grid: its token's norm
    stands about ten times above the others' (the grey patches embed to almost nothing)."""
    image = Image.new("RGB", (32, 32), (128, 128, 128))
    image.paste((255, 255, 255), (16, 8, 24, 16))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_token_norms_follow_the_layer_slider_and_flag_the_outlier(tmp_path, monkeypatch):
    from vitviz_dashboard.analysis import analyse_image

    path = tiny_checkpoint(tmp_path / "registers.pt", **REGISTERS)
    monkeypatch.setattr(vitviz.loading.specs, "DEFAULT_CHECKPOINT", path)
    at = started_app()
    at.file_uploader[0].set_value(("bright.png", one_bright_patch_png(), "image/png")).run()
    open_tab(at, "Tokens")
    analysis = analyse_image(vitviz.load_model(path), Image.open(io.BytesIO(one_bright_patch_png())).convert("RGB"))
    norms = analysis.token_norms.numpy()[:, 3:]  # (layers, 16 patches)
    assert norms.argmax(axis=1).tolist() == [6, 6]  # patch (1, 2) in both layers

    def norm_view() -> tuple[str, str, str]:
        caption = next(c for c in captions(at) if c.startswith("norm of each patch token"))
        url = next(img.proto.imgs[0].url for img in at.get("image") if img.proto.imgs[0].caption == caption)
        count = next(m.value for m in at.markdown if "patch tokens in layer" in m.value)
        return caption, url, count

    def flagged(layer, factor) -> int:
        return int((norms[layer] > factor * np.median(norms[layer])).sum())

    last = norm_view()
    assert same_text(last[0], f"norm of each patch token after block 1 ({norms[1].min():.2f} to {norms[1].max():.2f})")
    assert same_text(
        last[2],
        f"**1 of 16** patch tokens in layer 1 have a norm above 2x the median patch norm "
        f"({np.median(norms[1]):.2f}); the largest is {norms[1].max():.2f} "
        f"({norms[1].max() / np.median(norms[1]):.1f}x the median).",
    )
    assert "outlined: 1 patch above 2x the median norm" in captions(at)
    factor = next(s for s in at.slider if s.label.startswith("Flag patches above"))
    factor.set_value(10.0).run()
    assert flagged(1, 10) == 0 and flagged(0, 10) == 1  # the outlier stands out less after block 1
    assert "outlined: 0 patches above 10x the median norm" in captions(at)
    next(s for s in at.slider if s.label == "Layer (token norms)").set_value(0).run()
    first = norm_view()
    assert same_text(first[0], f"norm of each patch token after block 0 ({norms[0].min():.2f} to {norms[0].max():.2f})")
    assert first[1] != last[1] and first[2].startswith("**1 of 16** patch tokens in layer 0")
    assert "outlined: 1 patch above 10x the median norm" in captions(at)
    # the per-layer chart: the median and the largest patch norm of every layer
    chart = next(f for f in figures(at) if f["layout"]["yaxis"].get("title", {}).get("text") == "token norm (L2)")
    np.testing.assert_allclose(values(chart["data"][0]["y"]), np.median(norms, axis=1), rtol=1e-5)
    np.testing.assert_allclose(values(chart["data"][1]["y"]), norms.max(axis=1), rtol=1e-5)


def test_a_model_with_attention_pooling_renders_every_tab_and_shows_the_pooling_map(tmp_path, monkeypatch):
    at = model_app(tiny_checkpoint(tmp_path / "siglip.pt", class_token=False, pooling="map"), monkeypatch)
    assert "no prefix tokens" in at.sidebar.caption[0].value and "attention-pooling head" in at.sidebar.caption[0].value
    seen = render_every_tab(at)
    assert seen["Heads & layers"]["subheaders"][0] == "Every head in layer 1: rows weighted by the pooling head"
    tokens = seen["Tokens"]
    assert "the pooling head's attention, mean over its 4 heads" in tokens["captions"]
    open_tab(at, "Tokens")
    assert any("no prefix tokens" in c.value for c in at.caption)
    fused = next(
        img.proto.imgs[0].url for img in at.get("image") if "pooling head's attention" in img.proto.imgs[0].caption
    )
    next(s for s in at.selectbox if s.label.startswith("Fuse the pooling head")).set_value("max").run()
    assert "the pooling head's attention, max over its 4 heads" in captions(at)
    assert (
        next(
            img.proto.imgs[0].url for img in at.get("image") if "pooling head's attention" in img.proto.imgs[0].caption
        )
        != fused
    )


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

    from vitviz_dashboard.sidebar.model_picker import CURATED_MODELS, hub_spec

    pretrained = set(timm.list_pretrained())
    for spec in CURATED_MODELS.values():
        assert not spec.startswith("timm:") or spec.removeprefix("timm:") in pretrained, spec
        # offline, each gets as far as the download: vitviz's ViT can reproduce it (a timm model that it could
        # not is refused before any download, by name of the feature it lacks)
        with pytest.raises(vitviz.ModelLoadError, match="offline"):
            vitviz.load_model(spec)
    assert hub_spec(" timm:vit_small_patch8_224.dino ") == "timm:vit_small_patch8_224.dino"
    assert hub_spec("google/vit-base-patch16-224") == "hf:google/vit-base-patch16-224"
    assert hub_spec("vit_small_patch8_224.dino") == "timm:vit_small_patch8_224.dino"
    assert hub_spec("") == ""
    assert hub_spec("open_clip:ViT-B-16/openai") == "open_clip:ViT-B-16/openai"


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


DINOV3_STYLE = dict(
    num_register_tokens=4,
    layer_scale=True,
    absolute_positions=False,
    rotary="dinov3",
    layer_norm_eps=1e-5,
    pooling="mean",
)


def test_a_dinov3_style_model_renders_every_tab_with_its_storage_tokens_and_rotary_anatomy(tmp_path, monkeypatch):
    at = model_app(tiny_checkpoint(tmp_path / "dinov3.pt", **DINOV3_STYLE), monkeypatch)
    assert "Tokens: [CLS] + 4 registers, then the patches" in at.sidebar.caption[0].value
    seen = render_every_tab(at)
    assert "Rotary embedding: how alike two patches' rotations are" in seen["Model anatomy"]["subheaders"]
    assert "Position-embedding similarity" not in seen["Model anatomy"]["subheaders"]
    open_tab(at, "Tokens")
    bars = next(f for f in figures(at) if f["layout"].get("barmode") == "stack")
    assert [trace["name"] for trace in bars["data"]] == ["[CLS]", *(f"register {i}" for i in range(1, 5)), "patches"]
    model = vitviz.load_model(tmp_path / "dinov3.pt")
    rope = model.rotary_embeddings(model.config.grid_size)[0]
    similarity = explain.rotary_similarity(rope.sin, rope.cos, model.config.grid_size)
    assert similarity[1, 2, 1, 2] == pytest.approx(1.0) and similarity[0, 0, 3, 3] < similarity[0, 0, 0, 1]


@pytest.mark.parametrize(
    "config",
    [
        dict(
            pooling="map",
            pool_prefix=True,
            pool_heads=2,
            norm_pre=True,
            rotary="eva",
            rotary_offset=1.0,
            rotary_column_first=True,
            rotary_reference_grid=(4, 4),
            rotary_temperature=10000.0,
        ),  # PE-Core
        dict(
            norm="rmsnorm", patch_norm=True, gated_mlp=True, class_token=False, pooling="mean", qkv_bias=False
        ),  # AIMv2
        dict(
            rotary="eva",
            rotary_reference_grid=(4, 4),
            gated_mlp=True,
            mlp_norm=True,
            attention_norm=True,
            qk_norm=True,
            fc_norm=True,
            pooling="mean",
            final_norm=True,
        ),  # EVA-02 and its CLIP tower's norms
    ],
    ids=["pe-core", "aimv2", "eva02"],
)
def test_the_2025_families_render_every_tab(tmp_path, monkeypatch, config):
    at = model_app(tiny_checkpoint(tmp_path / "model.pt", **config), monkeypatch)
    seen = render_every_tab(at)
    rotary = config.get("rotary", "none") != "none"
    assert ("Rotary embedding: how alike two patches' rotations are" in seen["Model anatomy"]["subheaders"]) == rotary


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
