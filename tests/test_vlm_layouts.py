"""Image-token layouts of every family on the tiny VLM folders: each image token has one (tile, row, col) inside its
tile's grid, and the tiles' boxes say where in the photo each token's pixels came from. The planted test paints one
region of a photo: in every tile that shows it, the image token whose input to the language model changes most is
one whose cell in the photo holds the region."""

import re

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from tiny_vlms import tiny_vlm_folder
from vlm_harness import TESTED

from vitviz.vlm import VLMError, load_vlm
from vitviz.vlm.layouts import family_for
from vitviz.vlm.tiles import Frame, Tile

QUESTION = "what is this ?"


@pytest.fixture(scope="module", params=TESTED)
def vlm(request, tmp_path_factory):
    return load_vlm(tiny_vlm_folder(request.param, tmp_path_factory))


@pytest.fixture(scope="module")
def unmixed(vlm):
    """A second copy of the family's model, without token mixing in its vision tower (``without_token_mixing``)."""
    return without_token_mixing(load_vlm(vlm.spec))


def grey(width: int, height: int, seed: int = 0) -> Image.Image:
    """A calm photo: mid grey with faint noise."""
    noise = np.random.default_rng(seed).integers(-6, 7, (height, width, 3))
    return Image.fromarray((128 + noise).astype(np.uint8))


def image_token_inputs(vlm, image: Image.Image) -> np.ndarray:
    """The language model's input vectors at the image tokens (the vision features placed in the prompt)."""
    prompt = vlm.prompt_inputs(image, QUESTION)
    _, positions = vlm.layout(prompt, image.size)
    seen = {}

    def keep(module, args, kwargs):
        seen["embeds"] = kwargs["inputs_embeds"][0, positions].float().numpy()

    handle = vlm.language_model.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            vlm.model(**prompt, use_cache=False)
    finally:
        handle.remove()
    return seen["embeds"]


def without_token_mixing(vlm):
    """``vlm`` with the vision tower's attention outputs set to zero: each image token's features then come from its
    own pixels only (and the local merges, pixel shuffles and pooling of its family), so a painted region changes the
    tokens that read it, and not the others through random attention."""
    pattern = re.compile(r".*(vision_tower|visual|vision_model)\..*\.(self_attn\.out_proj|attn\.proj)$")
    zeroed = 0
    with torch.no_grad():
        for name, module in vlm.model.named_modules():
            if pattern.fullmatch(name) and isinstance(module, torch.nn.Linear):
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()
                zeroed += 1
    assert zeroed, "no attention output projection found in the vision tower"
    return vlm


def overlap(a, b) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0) * max(height, 0)


@pytest.mark.parametrize("size", [(90, 60), (48, 80)])
def test_every_image_token_has_one_place_in_its_tile(vlm, size):
    answer = vlm.answer(grey(*size), QUESTION, answer="a cat")
    grid = answer.image_token_grid
    assert grid.dtype == np.int64 and grid.shape == (len(answer.image_positions), 3)
    in_grid = grid[grid[:, 1] >= 0]
    assert len({tuple(row) for row in in_grid}) == len(in_grid)  # no cell twice
    for index, tile in enumerate(answer.tiles):
        cells = in_grid[in_grid[:, 0] == index]
        assert len(cells) == tile.count  # every cell of the tile once
        assert cells[:, 1].max() == tile.grid[0] - 1 and cells[:, 2].max() == tile.grid[1] - 1
        left, top, right, bottom = tile.box
        assert right > left and bottom > top
        assert overlap(tile.box, (0, 0, *size)) > 0  # every tile shows part of the photo


@pytest.mark.parametrize(
    ("size", "region"),
    [
        ((160, 60), (52, 20, 62, 34)),
        ((60, 160), (20, 96, 34, 106)),
        ((120, 72), (74, 6, 92, 24)),
        ((120, 72), (74, 0, 84, 4)),  # a strip along an edge: where a padded canvas and a squashed one differ most
        ((72, 120), (0, 80, 4, 90)),
        ((300, 300), (200, 40, 230, 70)),  # OneVision: more crops than anyres_max_9, the grid shrunk as a whole
    ],
)
def test_a_painted_region_changes_the_tokens_whose_cells_hold_it(unmixed, size, region):
    vlm = unmixed
    before = grey(*size)
    after = before.copy()
    ImageDraw.Draw(after).rectangle(region, fill=(250, 20, 20))
    answer = vlm.answer(before, QUESTION, answer="a cat")
    change = np.linalg.norm(image_token_inputs(vlm, after) - image_token_inputs(vlm, before), axis=-1)
    grid = answer.image_token_grid
    box = (region[0], region[1], region[2] + 1, region[3] + 1)
    checked = 0
    for index, tile in enumerate(answer.tiles):
        if overlap(tile.box, box) < 0.5 * (box[2] - box[0]) * (box[3] - box[1]):
            continue  # the region is not (mostly) in this tile
        tokens = np.flatnonzero((grid[:, 0] == index) & (grid[:, 1] >= 0))
        assert change[tokens].max() > 0.2 * change.max(), f"tile {index} ({tile.name}) shows the region, unchanged"
        changed = tokens[change[tokens] > 0.25 * change[tokens].max()]
        near = (box[0] - 1, box[1] - 1, box[2] + 1, box[3] + 1)  # resampling blurs the region's edge
        for token in changed:
            cell = tile.cell(int(grid[token, 1]), int(grid[token, 2]))
            assert overlap(cell, near) > 0, f"tile {index} ({tile.name}): token {grid[token]} at {cell}, region {box}"
        checked += 1
    assert checked >= 1


# ------------------------------------------------------------------------------------------------- geometry
def test_a_frame_follows_resize_crop_and_pad():
    frame = Frame.photo(200, 100).resize(112, 56).center_crop(56, 56)  # LLaVA: shorter side, then a centre crop
    assert frame.box == (50.0, 0.0, 150.0, 100.0)
    square = Frame.photo(200, 100).pad_to_square()  # LLaVA's pad: the photo in the middle of a square
    assert square.box == (0.0, -50.0, 200.0, 150.0)
    tile = Tile((2, 4), (0.0, 0.0, 200.0, 100.0))
    assert tile.cell(1, 3) == (150.0, 50.0, 200.0, 100.0)
    assert tile.token_grid(2)[-1].tolist() == [2, 1, 3]


def test_other_model_types_are_refused_with_the_supported_ones():
    with pytest.raises(VLMError, match="not supported; supported types: .*llava.*qwen2_vl"):
        family_for("blip-2")


def test_llava_with_the_full_feature_strategy_keeps_the_cls_token_first_outside_the_grid(tmp_path):
    from tiny_vlms import make_tiny_vlm

    vlm = load_vlm(make_tiny_vlm("llava", tmp_path / "full", vision_feature_select_strategy="full"))
    answer = vlm.answer(grey(70, 50), QUESTION, answer="a cat")
    (tile,) = answer.tiles
    assert len(answer.image_positions) == tile.count + 1
    assert answer.image_token_grid[0].tolist() == [0, -1, -1]
    assert answer.image_token_grid[1:].tolist() == tile.token_grid(0).tolist()


def test_onevision_shrinks_a_grid_of_more_crops_than_its_maximum_into_one_tile(tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder("llava_onevision", tmp_path_factory))
    small, big = (vlm.answer(grey(*size), QUESTION, answer="a cat") for size in ((70, 50), (300, 300)))
    assert [tile.name for tile in small.tiles] == ["base", "crop 1,1", "crop 1,2"]
    assert [tile.name for tile in big.tiles] == ["base", "any-res (downsampled)"]
    assert big.tiles[1].count < 36 * 16  # fewer tokens than the 6 x 6 crops' 4 x 4 features
