"""The Photo page on the models people use, through Streamlit's AppTest: backbones, registers, readouts,
attention pooling, DINOv3-style and the 2025 families; every tab renders and names their tokens."""

import io

import numpy as np
import pytest
from app_harness import (
    DINOV3_STYLE,
    REGISTERS,
    captions,
    figures,
    model_app,
    one_bright_patch_png,
    open_tab,
    png_bytes,
    render_every_tab,
    run_faithfulness,
    started_app,
    uploaded_app,
    values,
)
from page_reading import same_text
from PIL import Image
from tiny_models import tiny_checkpoint

import vitviz.loading.specs
from vitviz import explain

# fresh caches, no local sample images, precision "auto" fixed at fp32 (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_caches")


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
    from vitviz.analysis import analyse_image

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


def test_the_token_norms_follow_the_layer_slider_and_flag_the_outlier(tmp_path, monkeypatch):
    from vitviz.analysis import analyse_image

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
