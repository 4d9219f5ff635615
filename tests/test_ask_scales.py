"""Maps with their scales (issue 44, item 8): every picture of a map, on the Ask page, in its downloads and from
`vitviz ask`, comes with its colours and the values of their two ends, drawn by one function (scale_strip); captions
name a token by its text and index, and the tile where the model splits the photo; the page's attention.npz says which
map its ``shown_map`` is."""

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image
from test_app_ask import QUESTION_TEXT, ask_app, captions, checked, photo, press_ask
from tiny_vlms import tiny_vlm_folder

from vitviz.commands.ask import main, token_file
from vitviz.render.answers import map_over_photo, map_picture, map_range, map_raster, tile_name, token_name
from vitviz.render.overlays import SCALE_MIN_WIDTH, colour_bar, scale_strip, with_scale
from vitviz.vlm import Tile, image_relevance, load_vlm, token_attention
from vitviz.vlm.lens import logit_lens
from vitviz_dashboard.ask import page
from vitviz_dashboard.ask.downloads import attention_npz
from vitviz_dashboard.ask.maps import MapChoice, map_caption
from vitviz_dashboard.ask.tokens import TOKEN

pytestmark = pytest.mark.usefixtures("fresh_caches", "default_model")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


def pixels(picture: Image.Image) -> np.ndarray:
    return np.asarray(picture.convert("RGB"), dtype=np.int16)


# --- the scale: one function -------------------------------------------------------------------------------------


def bar_box(strip: Image.Image) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the colour bar in a strip without a label: the first thing drawn."""
    rows = pixels(strip)
    top = next(y for y in range(strip.height) if (rows[y] != 255).any())
    left = int(np.flatnonzero((rows[top] != 255).any(axis=1))[0])
    height = next(h for h in range(1, strip.height - top) if (rows[top + h] != rows[top]).any())
    return top, left, height, strip.width - 2 * left


def test_the_scale_strip_holds_the_colour_bar_and_writes_both_ends():
    strip = scale_strip("viridis", 0.0102, 0.0511, 300)
    assert strip.width == 300
    top, left, height, width = bar_box(strip)
    rows = pixels(strip)
    np.testing.assert_array_equal(
        rows[top : top + height, left : left + width], pixels(colour_bar("viridis", width, height))
    )
    under = rows[top + height :]
    dark = (under.sum(axis=2) < 300).any(axis=0)  # columns holding text under the bar
    assert dark[:40].any() and dark[-40:].any() and not dark[120:180].any()  # the two values at the ends, not between
    # the values are drawn: another high end writes other pixels at the right, the same at the left
    other = pixels(scale_strip("viridis", 0.0102, 0.9, 300))
    assert (other[top + height :, -60:] != under[:, -60:]).any()
    np.testing.assert_array_equal(other[top + height :, :60], under[:, :60])


def test_a_label_goes_above_the_bar_wrapped_and_a_narrow_scale_keeps_a_readable_width():
    plain = scale_strip("inferno", 0, 1, 300)
    label = "Attention of token 1 'red' on the image, layers 0 to 1, the heads' mean"
    labelled = scale_strip("inferno", 0, 1, 300, label)
    top, *_ = bar_box(plain)
    assert labelled.height >= plain.height + 2 * 14  # two lines of text over the same bar and values
    below = plain.height - top  # the bar and the values
    np.testing.assert_array_equal(pixels(labelled)[-below:], pixels(plain)[-below:])
    assert scale_strip("inferno", 0, 1, 40).width == SCALE_MIN_WIDTH


def test_with_scale_keeps_the_picture_and_adds_the_strip_below():
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (50, 200, 3), dtype=np.uint8))
    whole = with_scale(picture, "magma", -1.0, 2.5, "a map")
    np.testing.assert_array_equal(pixels(whole)[:50], pixels(picture))
    np.testing.assert_array_equal(pixels(whole)[50:], pixels(scale_strip("magma", -1.0, 2.5, 200, "a map")))
    small = with_scale(picture.crop((0, 0, 80, 50)), "magma", 0, 1)  # narrower than a readable scale: widened
    assert small.size == (SCALE_MIN_WIDTH, 50 + scale_strip("magma", 0, 1, 80).height)


# --- names: the token's text and index, the tile ---------------------------------------------------------------


class Words:
    def decode(self, ids):
        return {0: " cat", 1: "\n", 2: ""}[ids[0]]


def stub_answer(tiles: int):
    grid = [Tile((2, 2), (0, 0, 10, 10), "global image")] + [
        Tile((2, 2), (0, 0, 5, 5), f"tile 1,{i + 1}") for i in range(tiles - 1)
    ]
    return SimpleNamespace(
        model=SimpleNamespace(tokenizer=Words()),
        token_ids=[0, 1, 2],
        tokens=["▁cat", "\n", "<id 7>"],
        tiles=grid,
        image_attention=np.zeros((3, 4, 2, 4 * tiles)),
    )


def test_captions_name_the_token_by_its_text_and_index_and_the_tile():
    answer = stub_answer(3)
    assert [token_name(answer, i) for i in (0, 1, 2, None)] == [
        "token 0 'cat'",
        "token 1 '↵'",
        "token 2 '<id 7>'",
        "the whole answer",
    ]
    assert tile_name(answer, None) == "all tiles" and tile_name(answer, 2) == "tile 2 (tile 1,2)"
    assert tile_name(stub_answer(1), None) == ""  # one tile: nothing to say
    choice = MapChoice("attention", (1, 3), 0, 2)
    assert (
        map_caption(answer, 0, choice)
        == "Attention of token 0 'cat' on the image, layers 1 to 3, head 0, tile 2 (tile 1,2)"
    )
    relevance = MapChoice("relevance", (0, 3), None, None)
    assert map_caption(answer, 1, relevance) == "Relevance of token 1 '↵' (Chefer et al. 2021b, every layer), all tiles"
    whole = MapChoice("attention", (1, 3), None, None)
    assert (
        map_caption(stub_answer(1), None, whole)
        == "Attention of the whole answer on the image, layers 1 to 3, the heads' mean"
    )


# --- the command's PNGs ----------------------------------------------------------------------------------------


def test_every_png_of_vitviz_ask_holds_its_map_and_its_scale(folder, tmp_path):
    source = tmp_path / "wide.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 180, 3), dtype=np.uint8)).save(source)
    argv = [str(source), "--model", str(folder), "--question", QUESTION_TEXT, "--answer", "a red cat"]
    assert main([*argv, "--relevance", "--colormap", "viridis", "--alpha", "0.6", "--out", str(tmp_path / "out")]) == 0
    shown = Image.open(source).convert("RGB")
    answer = load_vlm(folder).answer(shown, QUESTION_TEXT, answer="a red cat")
    every = "every layer, the heads' mean"
    expected = {"all_tokens.png": (token_attention(answer), f"Attention of the whole answer, {every}")}
    for index, token in enumerate(answer.tokens):
        name = token_name(answer, index)
        expected[token_file("token", index, token)] = (token_attention(answer, index), f"Attention of {name}, {every}")
        expected[token_file("relevance", index, token)] = (
            image_relevance(answer, index),
            f"Relevance of {name} (Chefer et al.)",
        )
    assert token_name(answer, 1) == "token 1 'red'"
    for file, (values, label) in expected.items():
        written = Image.open(tmp_path / "out" / "wide" / file)
        raster = map_raster(answer, values)
        low, high = map_range(raster)
        assert low < high
        drawn = pixels(map_over_photo(shown, raster, "viridis", 0.6))
        np.testing.assert_array_equal(pixels(written)[:48, :180], drawn, err_msg=file)
        # relevance is recomputed here: its scale's values may differ in the last digit, so compare its layout only
        strip = scale_strip("viridis", low, high, 180, label)
        assert written.size == (180, 48 + strip.height), file
        if file.startswith(("token", "all")):
            np.testing.assert_array_equal(pixels(written)[48:], pixels(strip), err_msg=file)


# --- the page: captions, the lens's scale, the downloads --------------------------------------------------------


def test_the_page_names_its_maps_and_draws_every_scale(folder, monkeypatch):
    handed = {}

    def keep(answer, spec, image, shown, picture):
        handed.update(answer=answer, shown=shown, picture=picture)

    monkeypatch.setattr(page, "draw_downloads", keep)
    at = press_ask(ask_app(folder, monkeypatch, given="a red cat"))
    at.session_state[TOKEN] = 1
    checked(at.run())
    expected = load_vlm(folder).answer(photo(), QUESTION_TEXT, answer="a red cat")
    caption = "Attention of token 1 'red' on the image, layers 0 to 1, the heads' mean"
    shown = captions(at)
    assert shown[0] == caption
    raster = map_raster(expected, token_attention(expected, 1))
    low, high = map_range(raster)
    assert shown[1].startswith(f"Colour scale: {low:.3g} to {high:.3g}")
    # the logit lens's map: named by the token's text and index, with its own scale
    layers = expected.image_attention.shape[1]
    lens = next(i for i, text in enumerate(shown) if text.startswith("Probability of token 1 'red' among"))
    lens_map = logit_lens(expected, layers, 5)
    hits = np.array([[w.strip() == "red" for w in row] for row in lens_map.words])
    lens_low, lens_high = map_range(map_raster(expected, np.where(hits, lens_map.probabilities, 0.0).sum(axis=1)))
    assert shown[lens + 1] == f"Colour scale: {lens_low:.3g} to {lens_high:.3g}"
    # the downloads: the map's PNG with its scale and name; attention.npz says which map shown_map is
    picture = handed["picture"]()
    assert picture.width == 300 and picture.height > 200
    np.testing.assert_array_equal(pixels(picture), pixels(map_picture(photo(), raster, "inferno", 0.55, caption)))
    arrays = np.load(io.BytesIO(attention_npz(handed["answer"], handed["shown"])))
    np.testing.assert_allclose(arrays["shown_map"], token_attention(expected, 1), atol=1e-6)
    assert str(arrays["shown_map_name"]) == caption
    assert str(arrays["shown_map_kind"]) == "attention" and int(arrays["shown_map_token"]) == 1
    assert arrays["shown_map_layers"].tolist() == [0, 1]
    assert int(arrays["shown_map_head"]) == -1 and int(arrays["shown_map_tile"]) == -1
    # relevance: named so, over every layer
    at.radio(key="ask|kind").set_value("relevance")
    checked(at.run())
    arrays = np.load(io.BytesIO(attention_npz(handed["answer"], handed["shown"])))
    assert str(arrays["shown_map_name"]) == "Relevance of token 1 'red' (Chefer et al. 2021b, every layer)"
    assert str(arrays["shown_map_kind"]) == "relevance" and arrays["shown_map_layers"].tolist() == [0, layers - 1]
