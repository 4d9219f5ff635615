"""The Photo page's tabs through Streamlit's AppTest: what each draws, its captions, its controls."""

import io

import numpy as np
import pytest
from app_harness import (
    EVERY_TAB,
    NAMES,
    captions,
    chart_specs,
    download_labels,
    figures,
    image_urls,
    legends,
    open_tab,
    png_bytes,
    png_of,
    run_faithfulness,
    started_app,
    uploaded_app,
    values,
)
from page_reading import shown_in
from PIL import Image

import vitviz.analysis
import vitviz.loading.specs
from vitviz import explain
from vitviz_dashboard.tabs import class_specific

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def test_app_starts_on_the_default_model_and_explains_what_to_do(default_model):
    at = started_app()
    assert not at.error
    caption = at.sidebar.caption[0].value
    assert "2 layers x 4 heads" in caption and "3 classes" in caption and "input 32x32" in caption
    assert "Upload one or more photos" in at.info[0].value


def test_upload_renders_predictions_and_the_rollout_overlay(default_model):
    at = uploaded_app()
    assert not at.error
    assert [tab.label for tab in at.tabs] == EVERY_TAB  # every tab of the app's TABS, in its order
    assert EVERY_TAB[0] == "Overview"  # the tab a new session opens on
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
    probabilities = vitviz.analysis.analyse_image(
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
                "Attention entropy (.csv)",
                "Mean attention distance (.csv)",
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
    original = explain.method_maps

    def counted(model, pixels, methods, *args, **kwargs):
        if methods != ["lens"]:  # the logit lens, drawn in the same tab, runs through method_maps too
            calls.append(methods)
        return original(model, pixels, methods, *args, **kwargs)

    monkeypatch.setattr(explain, "method_maps", counted)
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
    analysis = vitviz.analysis.analyse_image(model, Image.open(io.BytesIO(png_bytes())).convert("RGB"))
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
