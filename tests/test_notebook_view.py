"""vitviz.show's photo view (vitviz/notebook): every setting's drawn values equal the library's own numbers, a click
from the browser redraws without running the model, the offline HTML file loads nothing from the network, and what
the view sends the browser stays under 2 MB at ViT-L's grid."""

import base64
import io
import re

import numpy as np
import pytest
import torch
import traitlets
from PIL import Image
from tiny_models import build_tiny_vit

import vitviz
from vitviz import Preprocessing, explain
from vitviz.explain.registry import method_maps
from vitviz.notebook import export
from vitviz.notebook.packing import (
    PAYLOAD_LIMIT,
    decode_bytes,
    pack_maps,
    payload_bytes,
)

TOL = dict(rtol=1e-4, atol=1e-6)  # two computations of the same float32 numbers


def model_for(family: str = "cls", **config) -> vitviz.ViT:
    model = build_tiny_vit(family, **config)
    size = model.config.image_size
    model.transform = Preprocessing(resize=size if isinstance(size, tuple) else (size, size), crop=None)
    return model


def photo(seed: int = 0, size=(50, 40)) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8))


def reference(model, image):
    """The library's forward pass of one photo: its attentions, readout and layout."""
    pixels = model.transform(image)[None]
    with torch.no_grad():
        out = model(pixels, output_attentions=True)
    return pixels, out


@pytest.mark.parametrize("family", ["cls", "registers", "map-pooled", "non-square"])
def test_drawn_values_are_the_librarys_for_every_setting(family):
    model, image = model_for(family), photo()
    view = vitviz.show(model, image)
    pixels, out = reference(model, image)
    p, grid = out.num_prefix_tokens, out.grid_size
    rows, cols = grid
    readout = explain.readout_attention_all(out.attentions, p, grid, readout=out.readout.float())[0]
    assert len(view.values) == rows * cols and view.layer == model.config.num_layers - 1
    for layer in range(model.config.num_layers):
        for head in ["mean", 0, 3]:
            view.set_state_checked(layer=layer, head=head)
            expected = readout[layer].mean(0) if head == "mean" else readout[layer, head]
            np.testing.assert_allclose(view.values, expected.reshape(-1).numpy(), **TOL)
    query = (rows - 1, cols - 1)
    row = out.attentions[1][0, :, p + query[0] * cols + query[1], p:]  # (heads, N): that patch's row in block 1
    view.set_state_checked(layer=1, head=2, patch=query)
    np.testing.assert_allclose(view.values, row[2].numpy(), **TOL)
    view.head = "mean"
    np.testing.assert_allclose(view.values, row.mean(0).numpy(), **TOL)
    view.set_state_checked(patch=None, method="relevance", target=3)
    expected = method_maps(model, pixels, ["relevance"], target=3).maps["relevance"]
    np.testing.assert_allclose(view.values, expected.reshape(-1).numpy(), **TOL)


def test_a_click_from_the_browser_redraws_without_running_the_model():
    model, image = model_for(), photo()
    view = vitviz.show(model, [image, photo(1)], method="rollout")
    _, out = reference(model, photo(1))
    passes = []
    model.register_forward_hook(lambda *args: passes.append(1))
    view.set_state({"patch": [2, 1], "image": 1})  # what the comm does with a click on the second photo
    row = out.attentions[-1][0, :, 1 + 2 * 4 + 1, 1:].mean(0)
    assert view.patch == (2, 1) and view.frame["key"] == "patch|2|mean|2,1"
    np.testing.assert_allclose(view.values, row.numpy(), **TOL)
    view.set_state({"head": 1, "layer": 0})
    view.set_state({"patch": None, "method": "rollout"})
    assert passes == [], "a head, layer or patch change, or a method seen before, must not run the model"
    view.method = "relevance"
    assert passes, "a new method's map is computed when asked for"


def test_several_images_share_one_colour_scale_and_the_frame_decodes_to_the_values():
    model = model_for()
    view = vitviz.show(model, [photo(0), photo(1), photo(2)], layer=0, head=1)
    assert len(view.frame["maps"]) == 3
    low, high = view.frame["low"], view.frame["high"]
    assert low == pytest.approx(view.maps.min()) and high == pytest.approx(view.maps.max())
    for i in range(3):
        levels = decode_bytes(view.frame["maps"][i], (4, 4)).astype(np.float64)
        np.testing.assert_allclose(low + levels / 255 * (high - low), view.maps[i], atol=(high - low) / 510 + 1e-9)
    view.image = 2
    np.testing.assert_allclose(view.values, view.maps[2].reshape(-1))


def test_prompts_become_targets_by_name():
    model = model_for()
    model.class_names = ["cat", "dog", "bird", "fish", "tree"]
    view = vitviz.show(model, photo(), method="gradcam", target="dog")
    pixels, _ = reference(model, photo())
    expected = method_maps(model, pixels, ["gradcam"], target=1).maps["gradcam"]
    np.testing.assert_allclose(view.values, expected.reshape(-1).numpy(), **TOL)
    assert "'dog'" in view.frame["label"]


def test_bad_settings_are_one_line_errors_and_change_nothing():
    model = model_for()
    view = vitviz.show(model, photo())
    before = list(view.values)
    for name, value, words in [
        ("layer", 7, "layer must be in [0, 2]"),
        ("head", "max", "head must be 'mean'"),
        ("patch", (4, 0), "inside the 4x4 grid"),
        ("method", "nope", "unknown method"),
        ("target", "zebra", "none of the classes"),
    ]:
        with pytest.raises(traitlets.TraitError, match=re.escape(words)) as caught:
            setattr(view, name, value)
        assert "\n" not in str(caught.value)
    assert view.values == before
    with pytest.raises(ValueError, match="PIL image"):
        vitviz.show(model, "photo.jpg")
    with pytest.raises(ValueError, match="got colour"):
        vitviz.show(model, photo(), colour="red")
    backbone = model_for(num_classes=0)
    view = vitviz.show(backbone, photo(), method="relevance")
    assert "backbone" in view.error


def test_the_static_fallback_is_a_png_of_the_maps_with_their_scale():
    view = vitviz.show(model_for(), [photo(0), photo(1)])
    data, _ = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    picture = Image.open(io.BytesIO(base64.b64decode(data["image/png"])))
    # both photos at their own size (40 wide, 50 high) side by side, the scale strip under them
    assert picture.width >= 2 * 40 and picture.height > 50
    assert picture.size == view.picture().size


def test_to_html_is_self_contained_and_holds_every_attention_frame(tmp_path):
    model = model_for()
    view = vitviz.show(model, photo(), layer=1, patch=(0, 0))
    html = view.to_html(tmp_path / "view.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "http://" not in html and "https://" not in html and "@import" not in html
    state = __import__("json").loads(re.search(r'id="vitviz-state">(.*?)</script>', html, re.S).group(1))
    frames = state["offline"]
    assert frames["patch|1|mean|0,0"]["maps"] == view.frame["maps"]
    assert len([k for k in frames if k.startswith("attention|")]) == 3 * 5  # blocks x (mean + 4 heads)
    assert len([k for k in frames if k.startswith("patch|1|")]) == 5 * 16  # every patch, every head choice
    view.set_state_checked(head=3, patch=(2, 3))
    assert frames["patch|1|3|2,3"]["maps"] == view.frame["maps"]


def test_a_real_view_of_several_big_photos_stays_under_two_megabytes():
    """Six 400 x 400 noise photos (JPEG's worst case) at ViT-L's 37 x 37 grid: the view's whole synced state, as the
    kernel sends it, under 2 MB; a click's frame a few kB; and 40 photos are shrunk alike to fit, not refused."""
    model = model_for(image_size=74, patch_size=2, num_layers=2, num_heads=2)
    rng = np.random.default_rng(0)
    photos = [Image.fromarray(rng.integers(0, 256, (400, 400, 3), dtype=np.uint8)) for _ in range(6)]
    view = vitviz.show(model, photos)
    assert view.analyses.grid == (37, 37)
    assert all(p["src"].startswith("data:image/jpeg;base64,") for p in view.photos)
    assert payload_bytes(export.synced_state(view)) < PAYLOAD_LIMIT
    view.patch = (5, 5)
    assert payload_bytes({"frame": view.frame}) < 20_000  # what a click sends back
    many = vitviz.show(model_for(), [photos[i % 6].resize((300, 300)) for i in range(40)])
    assert payload_bytes(export.synced_state(many)) < PAYLOAD_LIMIT
    sent = Image.open(io.BytesIO(base64.b64decode(many.photos[0]["src"].split(",")[1])))
    assert max(sent.size) < 300  # shrunk to fit, every photo alike


def test_a_view_over_the_bound_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr("vitviz.notebook.base.PAYLOAD_LIMIT", 1_000)
    with pytest.raises(ValueError, match="bound even with its photos shrunk: show fewer photos") as caught:
        vitviz.show(model_for(), [photo(0), photo(1)])
    assert "\n" not in str(caught.value)


def test_the_offline_packing_of_vit_l_sized_frames_fits():
    """Every block and head of one photo at ViT-L's grid, 24 x (16 + mean) frames, as the offline file packs them."""
    maps = [np.random.default_rng(0).random((37, 37), dtype=np.float32)]
    layers = {f"attention|{block}|{h}": pack_maps(maps) for block in range(24) for h in range(17)}
    assert payload_bytes(layers) < PAYLOAD_LIMIT


def test_to_html_of_a_37_by_37_grid_stays_under_the_limit(tmp_path):
    model = model_for(image_size=74, patch_size=2, num_layers=2, num_heads=2)
    view = vitviz.show(model, photo(size=(80, 80)), patch=(5, 5))
    assert view.analyses.grid == (37, 37)
    path = view.to_html(tmp_path / "big.html")
    shipped = sum(len((export.HERE / name).read_bytes()) for name in ("view.js", "view.css"))
    assert path.stat().st_size < PAYLOAD_LIMIT + shipped + 2_000


def test_importing_vitviz_loads_no_widget_library():
    import subprocess
    import sys

    code = "import sys, vitviz; print(sorted(m for m in ('anywidget', 'ipywidgets', 'ipykernel') if m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"


def state_of(html: str) -> dict:
    return __import__("json").loads(re.search(r'id="vitviz-state">(.*?)</script>', html, re.S).group(1))


def test_text_that_would_end_the_script_is_escaped_in_the_file(tmp_path):
    """A class name (or prompt, answer token) such as ``<!--<script>`` must not end or comment out the inlined state:
    the file holds no ``<``, ``>`` or ``&`` of the view's text, and the state reads back to the same names."""
    model = model_for()
    hostile = ["<!--<script>", "</script><b>&amp;", "a & b"]
    model.class_names = hostile + [f"c{i}" for i in range(len(hostile), len(model.class_names))]
    html = vitviz.show(model, photo(), layer=1).to_html(tmp_path / "view.html").read_text()
    inlined = re.search(r'id="vitviz-state">(.*?)</script>', html, re.S).group(1)
    assert not set("<>&") & set(inlined)
    assert state_of(html)["classes"][:3] == hostile


def test_a_class_specific_frame_is_named_by_its_class(tmp_path):
    """Another class is another frame: the key holds the target, so the offline file says a class it lacks is not in
    it rather than drawing the first class's map under its name."""
    model = model_for()
    view = vitviz.show(model, photo(), method="relevance", target=0)
    assert view.frame["key"] == "relevance|0"
    first = view.frame["maps"]
    html = view.to_html(tmp_path / "view.html").read_text()
    view.target = 3
    assert view.frame["key"] == "relevance|3" and view.frame["maps"] != first
    frames = state_of(html)["offline"]
    assert frames["relevance|0"]["maps"] == first and "relevance|3" not in frames
    view.target = None
    assert view.frame["key"] == "relevance|top"
    view.set_state_checked(method="rollout", target=2)  # rollout explains no class: one frame for every target
    assert view.frame["key"] == "rollout"


NODE = __import__("shutil").which("node")


def run_view_js(tail: str) -> object:
    """Run view.js (its functions, not render) in node with ``tail`` after it; ``tail`` prints one JSON value."""
    import json
    import subprocess

    source = (export.HERE / "view.js").read_text() + "\n" + tail
    found = subprocess.run(
        [NODE, "--input-type=module", "-"], input=source, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(found.stdout)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_scripts_frame_keys_are_pythons():
    """view.js's frameKey builds, from the synced state, the key Python gives each setting's frame."""
    model = model_for()
    model.class_names = ["cat", "dog", "bird", "fish", "tree"]
    view = vitviz.show(model, photo())
    settings = [
        dict(method="attention", layer=1, head="mean", patch=None),
        dict(method="attention", layer=2, head=3, patch=(1, 2)),
        dict(method="relevance", target=None),
        dict(method="relevance", target=3),
        dict(method="gradcam", target="dog"),  # a class by name, as code sets it
        dict(method="rollout", target=4),
    ]
    states, keys = [], []
    for setting in settings:
        view.set_state_checked(**({"patch": None} | setting))
        states.append(export.synced_state(view) | {"frame": {}})
        keys.append(view.frame["key"])
    tail = f"console.log(JSON.stringify({__import__('json').dumps(states)}.map(frameKey)));"
    assert run_view_js(tail) == keys


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_legend_numbers_keep_their_zeros():
    numbers = [100, 150, 0.15, 2.5, 0.000123, -2e-7, 0, 123456]
    found = run_view_js(f"console.log(JSON.stringify({numbers}.map(valueText)));")
    assert found == ["100", "150", "0.15", "2.5", "0.000123", "-2e-7", "0", "123000"]


def test_bad_settings_given_to_show_are_one_line_value_errors():
    model = model_for()
    for state, words in [
        (dict(head=True), "head must be 'mean'"),
        (dict(layer=True), "layer must be in [0, 2]"),
        (dict(target=True), "target is a class index"),
        (dict(colormap="x"), "colormap must be one of"),
        (dict(patch="ab"), "patch must be (row, col)"),
        (dict(image=1), "image must be in [0, 0]"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)) as caught:
            vitviz.show(model, photo(), **state)
        assert "\n" not in str(caught.value) and not isinstance(caught.value, traitlets.TraitError)
    view = vitviz.show(model, photo())
    with pytest.raises(traitlets.TraitError, match="head must be 'mean'"):
        view.head = True
    with pytest.raises(ValueError, match="colormap must be one of"):
        view.set_state_checked(layer=0, colormap="x")
    assert view.layer == 2  # nothing was set


def test_a_video_model_is_pointed_to_the_video_maps():
    video = build_tiny_vit("cls", num_frames=4, tubelet_size=2)
    for given in (photo(), "clip.mp4"):  # a clip's path too: told where clips go, not that show takes PIL images
        with pytest.raises(ValueError, match="video model: its maps over a clip are the dashboard's Video") as caught:
            vitviz.show(video, given)
        assert "\n" not in str(caught.value) and "model.transform" not in str(caught.value)


def test_a_swin_is_told_where_its_maps_are_not_that_load_model_gives_a_vit():
    from tiny_swins import tiny_swin

    with pytest.raises(ValueError, match="a Swin's maps across windows and stages are on the dashboard") as caught:
        vitviz.show(tiny_swin("huggingface", "swin"), photo())
    assert "vitviz.load_model gives one" not in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="draws a vitviz ViT .* got Linear"):
        vitviz.show(torch.nn.Linear(2, 2), photo())


def test_a_setting_that_draws_nothing_clears_the_maps_and_says_why():
    backbone = model_for(num_classes=0)
    view = vitviz.show(backbone, photo())
    assert view.values and view.frame
    view.method = "relevance"
    assert "backbone" in view.error
    assert view.values == [] and view.frame == {} and list(view.maps) == []
    assert view.picture().size[0] > 0  # the still picture draws the photo alone
    view.method = "rollout"
    assert view.error == "" and len(view.values) == 16


def test_the_patch_cache_stays_bounded(monkeypatch):
    """Every patch of every block asked for: the kept rows stay under the bound, and a row asked for again after it
    was dropped is the library's own still."""
    model = model_for()
    view = vitviz.show(model, [photo(0), photo(1)])
    photos = view.analyses
    one = photos._patch(0, 0, (0, 0)).nbytes
    monkeypatch.setattr("vitviz.notebook.photos.PATCH_CACHE_BYTES", 5 * one)
    for layer in range(3):
        for r in range(4):
            for c in range(4):
                photos.maps("attention", layer, "mean", (r, c), None)
                assert photos.patch_cache_bytes <= 5 * one
    assert len(photos._patch_cache) == 5
    _, out = reference(model, photo(0))
    p = out.num_prefix_tokens
    expected = out.attentions[0][0, 2, p + 0 * 4 + 1, p:].reshape(4, 4).numpy()
    np.testing.assert_allclose(photos.maps("attention", 0, 2, (0, 1), None)[0], expected, **TOL)
