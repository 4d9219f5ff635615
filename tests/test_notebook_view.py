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
    photo_data_url,
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


def test_vit_l_grid_payload_stays_under_two_megabytes():
    """At ViT-L/14's 518-pixel grid (37 x 37 = 1,369 patches): the synced state with the photo and one frame, and a
    frame of every block and head as the offline file would pack them, from synthetic maps of that size."""
    rng = np.random.default_rng(0)
    big = Image.fromarray(rng.integers(0, 256, (518, 700, 3), dtype=np.uint8))  # noise: PNG's worst case
    maps = [rng.random((37, 37), dtype=np.float32) for _ in range(4)]  # four photos side by side
    state = {"photos": [{"src": photo_data_url(big), "box": [0, 0, 1, 1]}] * 4, "frame": pack_maps(maps)}
    assert payload_bytes(state) < PAYLOAD_LIMIT
    assert payload_bytes({"frame": pack_maps(maps)}) < 10_000  # what a click sends back: a few kB
    layers = {f"attention|{block}|{h}": pack_maps(maps[:1]) for block in range(24) for h in range(17)}
    assert payload_bytes(layers) < PAYLOAD_LIMIT  # every block and head of one photo, ViT-L's 24 x (16 + mean)


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
