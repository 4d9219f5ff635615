"""Rendering: exact upsampling, overlays on the photo's own pixels, masks, figures."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.preprocessing import Preprocessing
from vitviz.render.figures import (
    attention_distance_figure,
    grid_figure,
    heatmap_figure,
    layer_head_figure,
    predictions_figure,
    prefix_attention_by_layer_figure,
    prefix_attention_figure,
    token_norms_figure,
    votes_figure,
)
from vitviz.render.overlays import (
    colorize,
    colormap_table,
    grid_picture,
    mark_patch,
    outline_patches,
    overlay,
    patch_at,
    top_mass_mask,
    upsample,
)


def test_upsample_is_bilinear_with_half_pixel_centres():
    out = upsample(np.array([[0.0, 1.0]]), 1, 4)
    np.testing.assert_allclose(out, [[0.0, 0.25, 0.75, 1.0]])
    assert upsample(np.full((3, 5), 2.0), 30, 50).shape == (30, 50)


def test_colormaps_and_their_validation():
    table = colormap_table("inferno")
    assert table.shape == (256, 3) and tuple(table[0]) == (0, 0, 4) and tuple(table[-1]) == (252, 255, 164)
    with pytest.raises(ValueError, match="colormap must be one of inferno, viridis"):
        colormap_table("rainbow")


def test_overlay_keeps_the_photo_resolution_and_blends_exactly():
    photo = Image.new("RGB", (93, 62), (100, 150, 200))  # 31-pixel patches: one pixel sits at each centre
    patch_map = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert overlay(photo, patch_map).size == (93, 62)
    untouched = np.asarray(overlay(photo, patch_map, alpha=0.0))
    np.testing.assert_array_equal(untouched, np.asarray(photo))
    full = np.asarray(overlay(photo, patch_map, colormap="greys", alpha=1.0))
    top = colormap_table("greys")[255]
    np.testing.assert_array_equal(full[15, 46], top)  # centre of the hot patch (row 0, col 1)
    with pytest.raises(ValueError, match="alpha must be in"):
        overlay(photo, patch_map, alpha=2)


def reference_overlay(image, patch_map, colormap, alpha, box):
    """The overlay's formula in numpy, with the torch ``upsample`` (the fast path uses PIL's C loops)."""
    photo = np.asarray(image, dtype=np.float32)
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    patch_map = (patch_map - patch_map.min()) / (patch_map.max() - patch_map.min())
    values = upsample(patch_map, y1 - y0, x1 - x0)
    colours = colormap_table(colormap)[np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)].astype(np.float32)
    out = photo * 0.35
    out[y0:y1, x0:x1] = (1 - alpha) * photo[y0:y1, x0:x1] + alpha * colours
    return np.clip(out, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("seed", range(6))
def test_overlay_matches_the_numpy_formula(seed):
    rng = np.random.default_rng(seed)
    width, height = rng.integers(40, 700, size=2)
    rows, cols = rng.integers(1, 10, size=2)  # the box is at least 10 pixels: upsampling
    photo = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    patch_map = rng.random((rows, cols)).astype(np.float32)
    left, top = rng.uniform(0, width / 3), rng.uniform(0, height / 3)
    box = (left, top, rng.uniform(left + 10, width), rng.uniform(top + 10, height))
    colormap, alpha = ["inferno", "viridis", "jet", "greys", "turbo", "hot"][seed], float(rng.uniform())
    fast = np.asarray(overlay(photo, patch_map, colormap, alpha, box)).astype(int)
    difference = np.abs(fast - reference_overlay(photo, patch_map, colormap, alpha, box))
    # float32 interpolation in PIL and torch may round a value at a half step either way, which picks
    # the neighbouring table entry: at most one step of the colormap, for a few pixels; otherwise at
    # most 1 of 255 (the final float-to-byte rounding)
    step = np.abs(np.diff(colormap_table(colormap).astype(int), axis=0)).max()
    assert difference.max() <= 1 + np.ceil(alpha * step)
    assert (difference > 1).mean() < 1e-4 and difference.mean() < 0.05


def test_a_box_reaching_past_the_photo_keeps_the_map_in_place():
    # a centre crop larger than the resized photo pads it: the box reaches 20 pixels past the left edge.
    # Drawn on the photo padded by those 20 pixels, the same map must land on the same pixels.
    rng = np.random.default_rng(3)
    photo = Image.fromarray(rng.integers(0, 256, (50, 100, 3), dtype=np.uint8))
    padded = Image.new("RGB", (120, 50))
    padded.paste(photo, (20, 0))
    patch_map = rng.random((2, 5)).astype(np.float32)
    out = np.asarray(overlay(photo, patch_map, "viridis", 0.6, box=(-20, 0, 80, 50)))
    expected = np.asarray(overlay(padded, patch_map, "viridis", 0.6, box=(0, 0, 100, 50)))[:, 20:]
    np.testing.assert_array_equal(out, expected)


def test_colorize_rounds_to_the_nearest_table_entry():
    table = colormap_table("viridis")
    values = np.array([[0.0, 1.0, 100.4 / 255, 100.6 / 255, 0.5]], dtype=np.float32)
    np.testing.assert_array_equal(colorize(values, "viridis")[0], table[[0, 255, 100, 101, 128]])


def test_overlay_dims_what_the_model_did_not_see():
    photo = Image.new("RGB", (100, 50), (200, 200, 200))
    out = np.asarray(overlay(photo, np.ones((2, 2)), alpha=0.0, box=(25, 0, 75, 50)))
    np.testing.assert_array_equal(out[10, 50], [200, 200, 200])
    assert out[10, 5].max() < 100 and out[10, 95].max() < 100


def test_crop_box_matches_torchvision_resize_and_centre_crop():
    # encode each pixel's x and y in the red and green channels, push it through the preset,
    # and read back which original pixels the output's corners came from
    width, height = 400, 300
    x = np.linspace(0, 255, width)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height)[:, None].repeat(width, 1)
    image = Image.fromarray(np.stack([x, y, np.zeros_like(x)], -1).round().astype(np.uint8))
    prep = Preprocessing(resize=256, crop=224, mean=(0, 0, 0), std=(1, 1, 1))
    pixels = prep(image) * 255  # (3, 224, 224) back in 0..255
    left, top, right, bottom = prep.crop_box(width, height)
    to_x, to_y = 255 / (width - 1), 255 / (height - 1)
    assert abs(float(pixels[0, :, 0].mean()) - left * to_x) < 2.0
    assert abs(float(pixels[0, :, -1].mean()) - (right - 1) * to_x) < 2.0
    assert abs(float(pixels[1, 0, :].mean()) - top * to_y) < 2.0
    assert abs(float(pixels[1, -1, :].mean()) - (bottom - 1) * to_y) < 2.0
    assert Preprocessing(resize=(32, 48), crop=None).crop_box(100, 70) == (0, 0, 100, 70)


def test_top_mass_mask_known_answer():
    patch_map = np.array([[0.1, 0.5], [0.3, 0.1]])
    np.testing.assert_array_equal(top_mass_mask(patch_map, 0.6), [[False, True], [True, False]])
    np.testing.assert_array_equal(top_mass_mask(patch_map, 0.5), [[False, True], [False, False]])
    assert top_mass_mask(patch_map, 1.0).all()
    with pytest.raises(ValueError, match="mass must be in"):
        top_mass_mask(patch_map, 0)


def test_a_layer_head_table_labels_every_layer_and_head():
    values = np.arange(12 * 6, dtype=float).reshape(12, 6)
    figure = layer_head_figure(values, "", "nats")
    np.testing.assert_array_equal(np.asarray(figure.data[0].z), values)
    for axis in (figure.layout.xaxis, figure.layout.yaxis):  # Plotly's automatic ticks would label every other head
        assert (axis.tickmode, axis.dtick) == ("linear", 1)
    distance = attention_distance_figure(values)  # every head a dot against depth: every layer named on the x axis
    assert (distance.layout.xaxis.tickmode, distance.layout.xaxis.dtick) == ("linear", 1)
    assert attention_distance_figure(np.zeros((24, 16))).layout.xaxis.dtick == 2  # ViT-L: every other layer
    big = layer_head_figure(np.zeros((24, 16)), "", "nats").layout
    assert (big.yaxis.dtick, big.xaxis.dtick) == (2, 1)


def test_figures_carry_the_exact_values():
    values = torch.arange(6.0).reshape(2, 3)
    heat = heatmap_figure(values, "title")
    np.testing.assert_array_equal(np.asarray(heat.data[0].z), values.numpy())
    maps = torch.rand(4, 2, 3)
    grid = grid_figure(maps, [f"head {i}" for i in range(4)], columns=2)
    assert len(grid.data) == 1  # one tiled heatmap, fast for 144 heads
    raw = np.asarray(grid.data[0].customdata, dtype=np.float32)
    assert raw.shape == (2 * 3 - 1, 2 * 4 - 1)  # two tile rows of 2, two tile columns of 3, one-cell gaps
    np.testing.assert_allclose(raw[3:5, 4:7], maps[3].numpy(), rtol=1e-6)  # map 3: second row, second column
    assert np.isnan(raw[2]).all() and np.isnan(raw[:, 3]).all()
    assert np.asarray(grid.data[0].text)[4, 6] == "head 3, row 1, col 2"
    assert [a.text for a in grid.layout.annotations] == [f"head {i}" for i in range(4)]
    bars = predictions_figure(np.array([0.1, 0.6, 0.3]), ["a", "b", "c"], top_k=2)
    assert list(bars.data[0].y) == ["c", "b"]  # highest drawn last, i.e. on top
    with pytest.raises(ValueError, match="3 titles for 4 maps"):
        grid_figure(maps, ["a", "b", "c"], columns=2)


def test_heatmaps_use_the_overlay_colours_without_hex_codes():
    # Streamlit rewrites hex colours #000001..#0000xx (theme placeholders); inferno starts at #000004
    scale = heatmap_figure(np.ones((2, 2)), colormap="inferno").data[0].colorscale
    assert scale[0][1] == "rgb(0, 0, 4)" and scale[-1][1] == "rgb(252, 255, 164)"
    assert not any(color.startswith("#") for _, color in scale)


def test_patch_at_maps_a_click_on_the_shown_picture_to_its_patch_row_major():
    # a 3 x 5 grid (not square) over the box (10, 20)-(110, 80) of a 120 x 100 image: 20 x 20 pixel cells
    grid, box, size = (3, 5), (10, 20, 110, 80), (120, 100)
    assert patch_at(10, 20, size, size, grid, box) == (0, 0)
    assert patch_at(10 + 3.5 * 20, 20 + 1.5 * 20, size, size, grid, box) == (1, 3)
    assert patch_at(109, 79, size, size, grid, box) == (2, 4)  # the last pixel of the box
    # the same points on the picture shown at half size (a browser scales it to its column)
    assert patch_at(5, 10, (60, 50), size, grid, box) == (0, 0)
    assert patch_at((10 + 3.5 * 20) / 2, (20 + 1.5 * 20) / 2, (60, 50), size, grid, box) == (1, 3)
    # outside the box (the part of the photo the model never saw), and on its far edges: no patch
    assert patch_at(5, 50, size, size, grid, box) is None
    assert patch_at(110, 50, size, size, grid, box) is None and patch_at(50, 80, size, size, grid, box) is None
    # no box: the grid covers the whole picture; a click reported on the picture's far edge is its last pixel
    assert patch_at(119, 0, size, size, (2, 2)) == (0, 1)
    assert patch_at(60, 50, (60, 50), size, (2, 2)) == (1, 1)
    with pytest.raises(ValueError, match="positive"):
        patch_at(0, 0, (0, 50), size, grid, box)


def test_prefix_attention_figure_stacks_each_heads_shares_in_the_models_token_order():
    shares = np.array([[0.5, 0.1, 0.4], [0.0, 0.7, 0.3]])  # 2 heads: [CLS], register 1, patches
    figure = prefix_attention_figure(shares, ["[CLS]", "register 1", "patches"], "layer 3")
    assert figure.layout.barmode == "stack" and figure.layout.title.text == "layer 3"
    assert [trace.name for trace in figure.data] == ["[CLS]", "register 1", "patches"]
    np.testing.assert_allclose(figure.data[1].y, [0.1, 0.7])  # register 1, head by head
    assert list(figure.data[0].x) == [0, 1] and figure.layout.xaxis.title.text == "head"
    assert figure.data[2].marker.color == "rgb(200, 208, 220)"  # the patches in grey, the tokens in colour
    with pytest.raises(ValueError, match="2 names for 3 shares"):
        prefix_attention_figure(shares, ["[CLS]", "patches"])


def test_prefix_attention_by_layer_figure_averages_over_heads_and_marks_the_layer():
    shares = np.array([[[0.2, 0.8], [0.4, 0.6]], [[0.9, 0.1], [0.7, 0.3]]])  # 2 layers x 2 heads x ([CLS], patches)
    figure = prefix_attention_by_layer_figure(shares, ["[CLS]", "patches"], layer=1)
    np.testing.assert_allclose(figure.data[0].y, [0.3, 0.8])
    np.testing.assert_allclose(figure.data[1].y, [0.7, 0.2])
    assert (figure.layout.shapes[0].x0, figure.layout.shapes[0].x1) == (1, 1)
    assert prefix_attention_by_layer_figure(shares, ["[CLS]", "patches"]).layout.shapes == ()


def test_token_norms_figure_shows_median_and_max_patch_norms_and_each_prefix_token():
    norms = np.array([[5.0, 1.0, 2.0, 3.0, 10.0], [6.0, 1.0, 1.0, 1.0, 1.0]])  # 2 layers: [CLS], 4 patches
    figure = token_norms_figure(norms, ["[CLS]"], layer=0)
    assert [trace.name for trace in figure.data] == ["median patch", "max patch", "[CLS]"]
    np.testing.assert_allclose(figure.data[0].y, [2.5, 1.0])
    np.testing.assert_allclose(figure.data[1].y, [10.0, 1.0])
    np.testing.assert_allclose(figure.data[2].y, [5.0, 6.0])
    assert [trace.name for trace in token_norms_figure(norms[:, 1:], []).data] == ["median patch", "max patch"]
    with pytest.raises(ValueError, match="no patch tokens"):
        token_norms_figure(norms[:, :2], ["a", "b"])


def test_outline_patches_draws_a_rectangle_on_each_flagged_cell_only():
    # a 2 x 3 grid in the box (10, 20)-(70, 60) of an 80 x 70 photo: 20 x 20 pixel cells; (0, 2) and (1, 0) flagged
    photo = Image.new("RGB", (80, 70), (100, 100, 100))
    mask = np.array([[False, False, True], [True, False, False]])
    out = np.asarray(outline_patches(photo, mask, (10, 20, 70, 60)))
    cyan = [0, 255, 255]
    for x, y in [(50, 20), (69, 39), (50, 30), (10, 40), (29, 59), (20, 40)]:  # corners and edges of both cells
        assert out[y, x].tolist() == cyan, (x, y)
    assert out[30, 60].tolist() == [100, 100, 100]  # inside a flagged cell: the photo
    assert out[30, 20].tolist() == [100, 100, 100] and out[50, 60].tolist() == [100, 100, 100]  # cells not flagged
    assert out[5, 5].tolist() == [35, 35, 35]  # outside the box: dimmed, as in overlay
    assert np.array_equal(np.asarray(outline_patches(photo, ~mask & False)), np.asarray(photo))  # nothing flagged
    with pytest.raises(ValueError, match="mask must be"):
        outline_patches(photo, np.ones(3, dtype=bool))


def test_overlay_with_a_value_range_keeps_absolute_colours():
    photo = Image.new("RGB", (40, 20), (0, 0, 0))  # two 20-pixel patches
    table = colormap_table("greys")
    low_map = np.array([[0.2, 0.4]])  # min-max scaling would draw 0.2 black and 0.4 white
    fixed = np.asarray(overlay(photo, low_map, "greys", 1.0, value_range=(0.0, 1.0)))
    np.testing.assert_array_equal(fixed[10, 0], table[round(0.2 * 255)])  # the outer pixels keep their patch's value
    np.testing.assert_array_equal(fixed[10, 39], table[round(0.4 * 255)])
    clipped = np.asarray(overlay(photo, np.array([[-1.0, 2.0]]), "greys", 1.0, value_range=(0.0, 1.0)))
    np.testing.assert_array_equal(clipped[10, 0], table[0])
    np.testing.assert_array_equal(clipped[10, 39], table[255])
    with pytest.raises(ValueError, match="value_range must be"):
        overlay(photo, low_map, value_range=(1.0, 1.0))


def test_votes_figure_names_each_patchs_class_and_keeps_the_target_first():
    names = [f"class{i}" for i in range(12)]
    votes = np.array([[3, 3, 5], [7, 3, 9]])
    figure = votes_figure(votes, names, target=9, most=3)
    heatmap = figure.data[0]
    assert heatmap.colorbar.ticktext == ("class9", "class3", "class5", "other")  # target, then by votes (ties: lower)
    np.testing.assert_array_equal(heatmap.z, [[1, 1, 2], [3, 1, 0]])  # class7 is "other"
    assert heatmap.text.tolist() == [["class3", "class3", "class5"], ["class7", "class3", "class9"]]
    assert (heatmap.zmin, heatmap.zmax) == (-0.5, 3.5)  # one colour band per code


def test_mark_patch_outlines_one_cell_of_the_grid_in_the_box_and_nothing_else():
    picture = Image.new("RGB", (100, 60), (0, 0, 0))
    marked = np.asarray(mark_patch(picture, (1, 2), (2, 4), box=(20, 0, 100, 60)))  # cells of 20 x 30 in the box
    cyan = np.all(marked == (0, 255, 255), axis=-1)
    rows, cols = np.nonzero(cyan)
    assert (cols.min(), cols.max(), rows.min(), rows.max()) == (60, 79, 30, 59)  # column 2, row 1 of the box's grid
    assert cyan[30, 60:80].all() and not cyan[45, 65:75].any()  # an outline, not a filled cell
    assert np.asarray(picture).max() == 0  # the input is left alone


def test_grid_figure_leaves_room_for_titles_marks_patches_and_shows_a_shared_scale():
    maps = np.random.default_rng(0).random((3, 8, 8))
    grid = grid_figure(maps, ["(0,0)", "(0,4)", "(4,0)"], columns=2, rescale_each=False, marks=[(0, 0), (0, 4), (4, 0)])
    raw = np.asarray(grid.data[0].customdata, dtype=np.float32)
    assert raw.shape == (8 + 3 + 8, 8 + 1 + 8)  # three empty rows between tile rows: the titles fit there
    np.testing.assert_allclose(raw[11:19, 0:8], maps[2], rtol=1e-6)
    assert grid.data[0].showscale  # one shared scale: a colorbar says what the colours mean
    assert list(grid.data[1].x) == [0, 9 + 4, 0] and list(grid.data[1].y) == [0, 0, 11 + 4]  # each map's own patch
    assert not grid_figure(maps, ["a", "b", "c"], columns=2).data[0].showscale  # each map its own range: no bar
    with pytest.raises(ValueError, match="2 marks for 3 maps"):
        grid_figure(maps, ["a", "b", "c"], columns=2, marks=[(0, 0), (1, 1)])


def test_grid_picture_draws_the_patch_grid_over_the_box_and_outlines_the_chosen_cell():
    photo = Image.new("RGB", (120, 60), (0, 0, 0))
    picture = np.asarray(grid_picture(photo, (3, 4), box=(10, 0, 110, 60), selected=(2, 1))).astype(int)
    assert picture.shape == (60, 120, 3)
    # grid lines on every column boundary of the box (x = 10, 35, 60, 85, 110 - 1), light grey over black
    row = picture[10]  # a row inside the top cell row, away from the chosen cell
    lit = {x for x in range(120) if row[x].sum() > 0}
    assert {10, 60, 85} <= lit and not lit & {20, 50, 70, 100}
    assert (row[60] == row[60][0]).all() and 60 < row[60][0] < 200  # translucent white, not cyan
    # the chosen cell, row 2 column 1 (x 35..60, y 40..60), outlined in cyan
    assert tuple(picture[50, 36]) == (0, 255, 255) and tuple(picture[50, 59]) == (0, 255, 255)
    assert tuple(picture[50, 47]) == (0, 0, 0)  # inside the cell, the photo
    # the grid's last lines sit on the picture's last pixels when the box ends at its edge
    edge = np.asarray(grid_picture(photo, (2, 2), selected=None)).astype(int)
    assert edge[20, 119].sum() > 0 and edge[59, 30].sum() > 0 and edge[20, 100].sum() == 0
    # a grid finer than max_lines patches a side draws no lines, only the chosen cell
    fine = np.asarray(grid_picture(photo, (60, 120), selected=(0, 0), max_lines=40)).astype(int)
    assert fine[30:, 10:].sum() == 0


def test_patches_under_a_pixel_wide_are_still_outlined_without_an_error():
    # a 1024 x 14 photo and a 14 x 14 grid: each patch is 73 pixels wide and 1 pixel high
    thin = Image.new("RGB", (1024, 14))
    for cell in [(0, 0), (5, 7), (13, 13)]:
        marked = np.asarray(mark_patch(thin, cell, (14, 14))).astype(int)
        assert marked[cell[0]].sum() > 0  # its row is drawn
    picture = np.asarray(grid_picture(Image.new("RGB", (1024, 10)), (14, 14), selected=(13, 13))).astype(int)
    assert picture.shape == (10, 1024, 3) and picture.sum() > 0
