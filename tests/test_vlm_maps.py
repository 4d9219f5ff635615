"""Maps and statistics on an Answer (vitviz/vlm/maps.py): one token's map per tile and over the photo, and the image
share per answer token and layer, each against a direct numpy computation on the tiny folders."""

import numpy as np
import pytest
from tiny_vlms import tiny_vlm_folder
from vlm_harness import red_cat

from vitviz.vlm import Tile, VLMError, load_vlm
from vitviz.vlm.maps import answer_photo_map, image_shares, photo_map, tile_maps, token_attention, token_map

# one tile cropped from the photo (LLaVA-1.5), one resized (Qwen2-VL), a base image with any-res tiles (LLaVA-NeXT)
MAP_FAMILIES = ["llava", "qwen2_vl", "llava_next"]


@pytest.fixture(scope="module", params=MAP_FAMILIES)
def answer(request, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(request.param, tmp_path_factory))
    return red_cat(vlm)


def direct_map(answer, token, first, last, head) -> list[np.ndarray]:
    weights = answer.image_attention
    tokens = range(len(answer.token_ids)) if token is None else [token]
    heads = range(weights.shape[2]) if head is None else [head]
    maps = [np.full(tile.grid, np.nan) for tile in answer.tiles]
    for j, (tile, row, col) in enumerate(answer.image_token_grid):
        if row >= 0:
            maps[tile][row, col] = np.mean(
                [weights[i, lay, h, j] for i in tokens for lay in range(first, last + 1) for h in heads]
            )
    return maps


@pytest.mark.parametrize(
    "token, layers, head, first, last",
    [(0, None, None, 0, 1), (None, None, None, 0, 1), (2, 1, 3, 1, 1), (1, (0, -1), 0, 0, 1), (None, -1, None, 1, 1)],
)
def test_token_map_equals_direct_computation(answer, token, layers, head, first, last):
    maps = token_map(answer, token, layers, head)
    expected = direct_map(answer, token, first, last, head)
    assert [m.shape for m in maps] == [tile.grid for tile in answer.tiles]
    for got, want in zip(maps, expected, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert sum(np.nansum(m) for m in maps) > 0 and np.nanstd(np.concatenate([m.ravel() for m in maps])) > 0


def direct_photo_map(tiles, maps, width, height, scale_x=1.0, scale_y=1.0, only=None) -> np.ndarray:
    """Pixel by pixel: the cells (Tile.cell's boxes, half-open) holding the pixel's centre, averaged over tiles."""
    out = np.full((height, width), np.nan)
    for y in range(height):
        for x in range(width):
            cx, cy = (x + 0.5) / scale_x, (y + 0.5) / scale_y
            found = []
            for index, tile in enumerate(tiles):
                if only is not None and index != only:
                    continue
                for row in range(tile.grid[0]):
                    for col in range(tile.grid[1]):
                        left, top, right, bottom = tile.cell(row, col)
                        if left <= cx < right and top <= cy < bottom:
                            found.append(maps[index][row, col])
            if found:
                out[y, x] = np.mean(found)
    return out


def test_photo_map_equals_pixel_by_pixel_drawing(answer):
    maps = token_map(answer, 0)
    width, height = answer.photo_size
    drawn = answer_photo_map(answer, 0)
    assert drawn.shape == (height, width) and drawn.dtype == np.float32
    np.testing.assert_allclose(drawn, direct_photo_map(answer.tiles, maps, width, height), atol=1e-6)
    small = answer_photo_map(answer, 0, size=(34, 24))  # no pixel centre on a cell edge
    np.testing.assert_allclose(small, direct_photo_map(answer.tiles, maps, 34, 24, 34 / width, 24 / height), atol=1e-6)
    if len(answer.tiles) > 1:  # one tile alone
        one = answer_photo_map(answer, 0, tile=1)
        np.testing.assert_allclose(one, direct_photo_map(answer.tiles, maps, width, height, only=1), atol=1e-6)


def test_overlapping_tiles_are_averaged_and_uncovered_pixels_are_nan():
    tiles = [Tile((2, 2), (0.0, 0.0, 8.0, 8.0)), Tile((1, 2), (4.0, 4.0, 12.0, 8.0), "tile")]
    maps = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[10.0, 20.0]])]
    drawn = photo_map(tiles, maps, (12, 10))
    assert drawn[0, 0] == 1.0 and drawn[0, 7] == 2.0 and drawn[7, 0] == 3.0  # tile 0 alone
    assert drawn[5, 5] == pytest.approx((4.0 + 10.0) / 2)  # both: their mean
    assert drawn[5, 9] == 20.0  # tile 1 alone
    assert np.isnan(drawn[9]).all() and np.isnan(drawn[0, 10])  # neither
    np.testing.assert_allclose(drawn, direct_photo_map(tiles, maps, 12, 10), atol=1e-6)
    only = photo_map(tiles, maps, (12, 10), tile=1)
    assert np.isnan(only[0, 0]) and only[5, 5] == 10.0


def test_image_shares_are_the_recorded_ones(answer):
    shares = image_shares(answer)
    n, layers = len(answer.token_ids), answer.image_attention.shape[1]
    assert shares.image.shape == shares.text.shape == shares.first.shape == (n, layers)
    np.testing.assert_allclose(shares.image, answer.image_attention.sum(-1).mean(-1), atol=1e-5)
    np.testing.assert_allclose(shares.first, answer.first_share.mean(-1), atol=1e-6)
    np.testing.assert_allclose(shares.image + shares.text + shares.first, 1.0, atol=1e-5)
    one = image_shares(answer, head=2)
    np.testing.assert_allclose(one.image, answer.image_attention[:, :, 2].sum(-1), atol=1e-5)


def test_tile_maps_take_any_values(answer):
    words = np.array([f"w{j}" for j in range(len(answer.image_token_grid))], dtype=object)
    grids = tile_maps(answer, words, fill="")
    tile, row, col = answer.image_token_grid[-1]
    assert grids[tile][row, col] == f"w{len(words) - 1}"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda a: token_map(a, 3), "answer token's index"),
        (lambda a: token_map(a, -1), "answer token's index"),
        (lambda a: token_map(a, True), "answer token's index"),
        (lambda a: token_map(a, 0, layers=2), "not a range"),
        (lambda a: token_map(a, 0, layers=(1, 0)), "not a range"),
        (lambda a: token_map(a, 0, layers=(0, 1, 2)), "first, last"),
        (lambda a: token_map(a, 0, layers="all"), "first, last"),
        (lambda a: token_map(a, 0, head=4), "heads"),
        (lambda a: image_shares(a, head=-1), "heads"),
        (lambda a: answer_photo_map(a, 0, size=(0, 10)), "size"),
        (lambda a: answer_photo_map(a, 0, tile=9), "tiles"),
        (lambda a: tile_maps(a, np.zeros(3)), "one entry per image token"),
        (lambda a: photo_map(a.tiles, [], a.photo_size), "maps"),
    ],
)
def test_bad_selections_get_one_line(answer, call, match):
    with pytest.raises(VLMError, match=match) as error:
        call(answer)
    assert "\n" not in str(error.value)


def test_token_attention_is_the_mean_over_tokens_layers_and_heads(answer):
    expected = answer.image_attention.mean(axis=(0, 1, 2))
    np.testing.assert_allclose(token_attention(answer), expected, atol=1e-6)
