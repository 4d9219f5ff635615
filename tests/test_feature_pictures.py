"""Pictures of patch features: PCA colours and part labels painted on the photo patch by patch, and pictures set
side by side, checked pixel by pixel against references computed here."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.render import overlays
from vitviz.render.feature_pictures import PART_COLOURS, paint_patches, part_colours, side_by_side


def distinct_colours(rows: int, cols: int) -> np.ndarray:
    """A (rows, cols, 3) uint8 grid in which no two cells share a colour."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    grid = np.stack([20 + 40 * r, 10 + 25 * c, 200 - 3 * (r * cols + c)], axis=-1).astype(np.uint8)
    assert len({tuple(v) for v in grid.reshape(-1, 3)}) == rows * cols
    return grid


def varied_photo(width: int, height: int) -> Image.Image:
    """A photo whose every pixel differs from its neighbours, so a misplaced blend shows."""
    pixels = np.random.default_rng(0).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def cell_centre(box, grid, row, col) -> tuple[int, int]:
    """(x, y) of the pixel at the centre of cell (row, col) of ``grid`` over ``box``."""
    left, top, right, bottom = box
    rows, cols = grid
    return int(left + (col + 0.5) * (right - left) / cols), int(top + (row + 0.5) * (bottom - top) / rows)


BOX = (10, 5, 90, 55)  # 80 x 50 pixels in a 100 x 60 photo: 10-pixel cells for a 5 x 8 grid


@pytest.mark.parametrize("as_float", [False, True], ids=["uint8", "float"])
def test_paint_patches_paints_each_cell_in_its_colour_and_dims_outside_the_box(as_float):
    photo = Image.new("RGB", (100, 60), (128, 128, 128))
    colours = distinct_colours(5, 8)
    given = colours / 255.0 if as_float else colours
    out = paint_patches(photo, given, BOX)
    assert out.size == photo.size and out.mode == "RGB"
    pixels = np.asarray(out)
    for row in range(5):
        for col in range(8):
            x, y = cell_centre(BOX, (5, 8), row, col)
            np.testing.assert_array_equal(pixels[y, x], colours[row, col], err_msg=f"cell {row}, {col}")
    # the whole box: each cell a sharp 10 x 10 square (nearest neighbour, no blending across cells)
    np.testing.assert_array_equal(pixels[5:55, 10:90], colours.repeat(10, axis=0).repeat(10, axis=1))
    # outside the box: exactly outline_patches' dimmed photo (35 % of 128)
    dimmed = np.asarray(overlays.outline_patches(photo, np.zeros((5, 8), dtype=bool), BOX))
    outside = np.ones((60, 100), dtype=bool)
    outside[5:55, 10:90] = False
    np.testing.assert_array_equal(pixels[outside], dimmed[outside])
    assert (pixels[outside] == int(0.35 * 128)).all()
    assert np.asarray(photo).max() == 128  # the photo itself is untouched


def test_paint_patches_with_alpha_blends_photo_and_colour():
    photo = varied_photo(100, 60)
    colours = distinct_colours(5, 8)
    pixels = np.asarray(paint_patches(photo, colours, BOX, alpha=0.5)).astype(int)
    original = np.asarray(photo).astype(float)
    for row in range(5):
        for col in range(8):
            x, y = cell_centre(BOX, (5, 8), row, col)
            expected = 0.5 * original[y, x] + 0.5 * colours[row, col]
            assert np.abs(pixels[y, x] - expected).max() <= 1, (row, col, pixels[y, x], expected)
    # every pixel of the box blends its own photo pixel with its cell's colour
    expected = 0.5 * original[5:55, 10:90] + 0.5 * colours.repeat(10, axis=0).repeat(10, axis=1)
    assert np.abs(pixels[5:55, 10:90] - expected).max() <= 1
    # alpha 0 leaves the box as the photo, still dimmed outside
    untouched = np.asarray(paint_patches(photo, colours, BOX, alpha=0.0))
    np.testing.assert_array_equal(untouched[5:55, 10:90], np.asarray(photo)[5:55, 10:90])
    np.testing.assert_array_equal(untouched, np.asarray(overlays.outline_patches(photo, np.zeros((5, 8), bool), BOX)))


@pytest.mark.parametrize(
    "box, grid, cell, crop",
    [
        ((-10, 0, 110, 60), (3, 6), (20, 20), (slice(0, 60), slice(10, 110))),  # wider than the photo
        ((0, -6, 100, 66), (6, 10), (10, 12), (slice(6, 66), slice(0, 100))),  # taller than the photo
        ((-10, -5, 110, 65), (7, 6), (20, 10), (slice(5, 65), slice(10, 110))),  # past every edge
    ],
    ids=["wide", "tall", "every-edge"],
)
def test_paint_patches_with_a_box_past_the_photo_paints_the_visible_cells(box, grid, cell, crop):
    """A centre crop larger than the photo: the grid covers the box, only its part on the photo is drawn, and
    each visible pixel has the colour of the cell it lies in."""
    photo = Image.new("RGB", (100, 60), (50, 60, 70))
    colours = distinct_colours(*grid)
    out = paint_patches(photo, colours, box)
    assert out.size == (100, 60)
    whole = colours.repeat(cell[1], axis=0).repeat(cell[0], axis=1)  # the painted box, (box height, box width, 3)
    np.testing.assert_array_equal(np.asarray(out), whole[crop])
    # every cell's visible part shows up, the edge cells included
    left, top = box[0], box[1]
    pixels = np.asarray(out)
    for row in range(grid[0]):
        for col in range(grid[1]):
            x = min(99, max(0, left + col * cell[0] + cell[0] // 2))
            y = min(59, max(0, top + row * cell[1] + cell[1] // 2))
            np.testing.assert_array_equal(pixels[y, x], colours[row, col], err_msg=f"cell {row}, {col}")


def test_paint_patches_with_a_box_past_one_edge_dims_the_other_side():
    photo = Image.new("RGB", (100, 60), (200, 100, 0))
    box = (-10, 0, 50, 60)  # 3 x 3 cells of 20 pixels; the photo's right half is outside
    colours = distinct_colours(3, 3)
    pixels = np.asarray(paint_patches(photo, colours, box))
    np.testing.assert_array_equal(pixels[:, :50], colours.repeat(20, axis=0).repeat(20, axis=1)[:, 10:])
    np.testing.assert_array_equal(pixels[:, 50:], np.broadcast_to([70, 35, 0], (60, 50, 3)))


def test_paint_patches_rounds_a_fractional_box_as_outline_patches_does():
    """Preprocessing.crop_box gives fractional boxes: (7.6, 0, 56.4, 48) covers pixels 8 to 55."""
    photo = Image.new("RGB", (64, 48), (100, 100, 100))
    box = (7.6, 0.0, 56.4, 48.0)
    colours = distinct_colours(4, 4)
    pixels = np.asarray(paint_patches(photo, colours, box))
    np.testing.assert_array_equal(pixels[:, 8:56], colours.repeat(12, axis=0).repeat(12, axis=1))
    np.testing.assert_array_equal(pixels[:, :8], np.full((48, 8, 3), 35))
    np.testing.assert_array_equal(pixels[:, 56:], np.full((48, 8, 3), 35))
    dimmed = np.asarray(overlays.outline_patches(photo, np.zeros((4, 4), dtype=bool), box))
    np.testing.assert_array_equal(pixels[:, :8], dimmed[:, :8])


def test_paint_patches_defaults_to_the_whole_photo_and_takes_any_mode():
    photo = Image.new("L", (40, 20), 90)
    colours = distinct_colours(2, 4)
    pixels = np.asarray(paint_patches(photo, colours))
    assert pixels.shape == (20, 40, 3)
    np.testing.assert_array_equal(pixels, colours.repeat(10, axis=0).repeat(10, axis=1))


def test_paint_patches_clips_float_colours_to_the_unit_range():
    photo = Image.new("RGB", (20, 10), (0, 0, 0))
    colours = np.array([[[-0.5, 0.5, 2.0], [1.0, 0.0, 0.25]]])
    pixels = np.asarray(paint_patches(photo, colours))
    np.testing.assert_array_equal(pixels[5, 5], [0, 128, 255])
    np.testing.assert_array_equal(pixels[5, 15], [255, 0, 64])


def test_paint_patches_refuses_bad_inputs():
    photo = Image.new("RGB", (40, 20))
    with pytest.raises(ValueError, match=r"colours must be \(rows, cols, 3\); got shape \(2, 4\)"):
        paint_patches(photo, np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"colours must be \(rows, cols, 3\); got shape \(2, 4, 4\)"):
        paint_patches(photo, np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]; got 1.5"):
        paint_patches(photo, np.zeros((2, 4, 3)), alpha=1.5)
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]; got -0.1"):
        paint_patches(photo, np.zeros((2, 4, 3)), alpha=-0.1)
    with pytest.raises(ValueError, match="does not overlap"):
        paint_patches(photo, np.zeros((2, 4, 3)), (50, 0, 90, 20))
    with pytest.raises(ValueError, match="NaN or infinite"):
        paint_patches(photo, np.full((2, 4, 3), np.nan))
    with pytest.raises(ValueError, match=r"whole-number colours must be in \[0, 255\]"):
        paint_patches(photo, np.full((2, 4, 3), 300))


def test_paint_patches_takes_whole_number_colours_of_any_integer_type():
    photo = Image.new("RGB", (40, 20))
    for dtype in (np.int64, np.int32, np.uint16):
        painted = np.asarray(paint_patches(photo, np.full((2, 4, 3), (200, 100, 50), dtype=dtype)))
        assert (painted == (200, 100, 50)).all()


def test_part_colours_maps_each_label_to_its_colour_cycling_past_twelve():
    assert PART_COLOURS.shape == (12, 3) and PART_COLOURS.dtype == np.uint8
    assert len({tuple(c) for c in PART_COLOURS}) == 12  # twelve distinct colours
    labels = np.arange(30).reshape(5, 6)
    colours = part_colours(labels)
    assert colours.shape == (5, 6, 3) and colours.dtype == np.uint8
    for (row, col), label in np.ndenumerate(labels):
        np.testing.assert_array_equal(colours[row, col], PART_COLOURS[label % 12])
    np.testing.assert_array_equal(part_colours([[12, 0]])[0, 0], part_colours([[12, 0]])[0, 1])
    # feature_clusters' labels come as a long tensor
    np.testing.assert_array_equal(part_colours(torch.tensor([[3, 1]])), PART_COLOURS[[[3, 1]]])
    # and they paint: a part's colour lands on its patches
    painted = np.asarray(paint_patches(Image.new("RGB", (20, 10)), part_colours([[0, 13]])))
    np.testing.assert_array_equal(painted[5, 5], PART_COLOURS[0])
    np.testing.assert_array_equal(painted[5, 15], PART_COLOURS[1])


@pytest.mark.parametrize(
    "labels",
    [np.array([[0, -1]]), np.array([[0.0, 1.0]]), np.arange(4), np.zeros((2, 2, 1), dtype=int)],
    ids=["negative", "float", "1-d", "3-d"],
)
def test_part_colours_refuses_anything_but_a_grid_of_part_numbers(labels):
    with pytest.raises(ValueError, match=r"labels must be a \(rows, cols\) array of part numbers >= 0"):
        part_colours(labels)


def test_side_by_side_scales_to_one_height_and_wraps_into_rows():
    first = varied_photo(40, 20)  # scaled to 120 x 60
    second = Image.new("RGB", (30, 30), (255, 0, 0))  # 60 x 60
    third = Image.new("L", (20, 40), 30)  # 30 x 60
    sheet = side_by_side([first, second, third], height=60, gap=5, columns=2)
    assert sheet.mode == "RGB"
    assert sheet.size == (120 + 5 + 60, 60 + 5 + 60)  # the widest row; two rows and one gap
    pixels = np.asarray(sheet)
    # the first picture at the top left, exactly as scaled on its own
    np.testing.assert_array_equal(pixels[:60, :120], np.asarray(first.resize((120, 60), Image.LANCZOS)))
    np.testing.assert_array_equal(pixels[:60, 125:185], np.full((60, 60, 3), (255, 0, 0)))
    np.testing.assert_array_equal(pixels[65:125, :30], np.full((60, 30, 3), 30))  # wrapped to the second row
    white = np.ones((125, 185), dtype=bool)
    white[:60, :120] = white[:60, 125:185] = white[65:125, :30] = False
    assert (pixels[white] == 255).all()  # the gaps and the rest of the short row
    assert white[:60, 120:125].all() and white[60:65].all()


def test_side_by_side_defaults_and_extreme_shapes():
    pictures = [Image.new("RGB", (10, 10), (i, i, i)) for i in range(9)]
    sheet = side_by_side(pictures, height=20)  # 8 a row, 8 pixels apart
    assert sheet.size == (8 * 20 + 7 * 8, 2 * 20 + 8)
    pixels = np.asarray(sheet)
    for index in range(9):
        x, y = (index % 8) * 28, (index // 8) * 28
        assert (pixels[y : y + 20, x : x + 20] == index).all(), index
    # one row, no gap, a sliver keeps at least a pixel
    sheet = side_by_side([Image.new("RGB", (1, 100), (0, 0, 255)), Image.new("RGB", (10, 10))], height=10, gap=0)
    assert sheet.size == (1 + 10, 10)
    np.testing.assert_array_equal(np.asarray(sheet)[:, 0], np.full((10, 3), (0, 0, 255)))
    assert side_by_side([Image.new("RGB", (64, 48))]).size == (597, 448)  # the default height, 448 * 4 / 3 wide


def test_side_by_side_refuses_no_pictures():
    with pytest.raises(ValueError, match="there are no pictures to put side by side"):
        side_by_side([])
