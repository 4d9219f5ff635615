"""vitviz.show(answer, photo): a tiny VLM's answer in the notebook view. The drawn values are vitviz.vlm's own
(token_attention, image_relevance) for every token, layer, head and kind; a token click from the browser redraws;
the map over the photo is vlm.photo_map's; the offline file holds every token's frame and stays under 2 MB."""

import re

import numpy as np
import pytest
import traitlets
from tiny_vlms import tiny_vlm_folder
from vlm_harness import photo, red_cat

import vitviz
from vitviz.notebook.packing import PAYLOAD_LIMIT, decode_bytes, pack_maps, payload_bytes
from vitviz.vlm import image_relevance, load_vlm, photo_map, tile_maps, token_attention

TOL = dict(rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def answer(tmp_path_factory):
    return red_cat(load_vlm(tiny_vlm_folder("llava", tmp_path_factory)))


def test_the_drawn_values_are_the_vlm_librarys(answer):
    view = vitviz.show(answer, photo())
    assert view.mode == "answer" and view.tokens == answer.tokens and view.token == 0
    n, layers, heads, images = answer.image_attention.shape
    for token in [None, 0, n - 1]:
        for layer in [None, 0, layers - 1]:
            for head in ["mean", heads - 1]:
                view.set_state({"token": token, "layer": layer, "head": head})  # what the comm does with a click
                expected = token_attention(answer, token, layer, None if head == "mean" else head)
                assert len(view.values) == images
                np.testing.assert_allclose(view.values, expected, **TOL)
    view.set_state({"kind": "relevance", "token": 1})
    np.testing.assert_allclose(view.values, image_relevance(answer, 1), rtol=1e-4, atol=1e-7)
    assert view.frame["key"] == "relevance|1"


def test_the_map_over_the_photo_is_photo_map_and_the_frame_decodes_to_it(answer):
    view = vitviz.show(answer, photo(), token=2, layer=1, head=0)
    values = token_attention(answer, 2, 1, 0)
    rows, cols = view.frame["rows"], view.frame["cols"]
    expected = photo_map(answer.tiles, tile_maps(answer, values), answer.photo_size, (cols, rows))
    np.testing.assert_allclose(view.maps[0], expected, equal_nan=True, **TOL)
    assert max(rows, cols) <= 128 and view.frame["key"] == "answer|2|1|0"
    levels = decode_bytes(view.frame["maps"][0], (rows, cols)).astype(float)
    low, high = view.frame["low"], view.frame["high"]
    seen = ~np.isnan(expected)
    np.testing.assert_allclose((low + levels / 255 * (high - low))[seen], expected[seen], atol=(high - low) / 500)


def test_bad_settings_are_one_line_errors(answer):
    view = vitviz.show(answer, photo())
    for name, value, words in [
        ("token", 99, "token must be an answer token's index"),
        ("layer", 5, "not a range of the model's 2 layers"),
        ("head", 9, "head must be one of the 4 heads"),
        ("kind", "lens", "kind must be one of attention, relevance"),
    ]:
        with pytest.raises(traitlets.TraitError, match=re.escape(words)) as caught:
            setattr(view, name, value)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="the answer was given about"):
        vitviz.show(answer, photo().resize((10, 10)))


def test_the_offline_file_holds_every_tokens_frame(answer, tmp_path):
    view = vitviz.show(answer, photo(), layer=1)
    html = view.to_html(tmp_path / "answer.html").read_text()
    assert "http://" not in html and "https://" not in html
    frames = __import__("json").loads(re.search(r'id="vitviz-state">(.*?)</script>', html, re.S).group(1))["offline"]
    assert {f"answer|{t}|1|mean" for t in ["all", *range(len(answer.tokens))]} <= set(frames)
    assert frames["answer|0|1|mean"]["maps"] == view.frame["maps"]


def test_a_long_answer_over_many_image_tokens_sends_little():
    """64 answer tokens over 2,304 image tokens (a 48 x 48 grid): each token's frame is one 128-cell-a-side map."""
    rng = np.random.default_rng(0)
    frames = {f"answer|{t}|all|mean": pack_maps([rng.random((96, 128))]) for t in range(64)}
    assert payload_bytes(frames) < PAYLOAD_LIMIT


def test_bad_settings_given_to_show_are_one_line_value_errors(answer):
    for state, words in [
        (dict(token=99), "token must be an answer token's index"),
        (dict(head=True), "head must be one of the 4 heads"),
        (dict(kind="lens"), "kind must be one of attention, relevance"),
        (dict(colormap="x"), "colormap must be one of"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)) as caught:
            vitviz.show(answer, photo(), **state)
        assert "\n" not in str(caught.value) and not isinstance(caught.value, traitlets.TraitError)
