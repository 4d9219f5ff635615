"""TokenLayout (vitviz.layout): each token's kind, pixels and frames, from the config and the input's shape.

Checked against the model itself (a planted test: the tokens a painted region changes are those whose boxes hold
it), against the (num_prefix_tokens, grid_size) pair it replaces, and ``paint`` against a direct per-pixel loop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tiny_models import TINY_FAMILIES, build_tiny_vit
from vitviz.layout import TokenLayout, grid_layout

EXPECTED_PREFIX = {
    "cls": ("cls",),
    "registers": ("cls", "register", "register"),
    "mean-pooled": (),
    "map-pooled": ("register", "register"),
    "non-square": ("cls",),
    "rotary": ("cls",),
}


@pytest.mark.parametrize("family", sorted(TINY_FAMILIES))
def test_a_vits_layout_agrees_with_its_prefix_and_grid(family):
    model = build_tiny_vit(family)
    height, width = (
        (model.config.image_size,) * 2 if isinstance(model.config.image_size, int) else model.config.image_size
    )
    with torch.no_grad():
        out = model(torch.randn(1, 3, height, width), output_attentions=True)
    layout = out.layout
    T = out.attentions[0].shape[-1]
    assert len(layout) == T and layout.num_prefix_tokens == out.num_prefix_tokens
    assert layout.kinds[: out.num_prefix_tokens] == EXPECTED_PREFIX[family]
    assert set(layout.kinds[out.num_prefix_tokens :]) == {"patch"}
    assert layout.grid == (1, *out.grid_size) and layout.image_size == (height, width)
    assert np.isnan(layout.boxes[: out.num_prefix_tokens]).all()
    assert (layout.frames == 0).all() and layout.windows is None
    assert len(out.layouts) == model.config.num_layers and all(each is layout for each in out.layouts)


def test_a_deit_layout_names_the_distillation_token():
    model = build_tiny_vit("cls", distillation_token=True)
    with torch.no_grad():
        out = model(torch.randn(1, 3, 32, 32))
    assert out.layout.kinds[:2] == ("cls", "distillation") and out.layout.num_prefix_tokens == 2


def test_the_boxes_hold_the_pixels_each_patch_token_reads():
    """Planted: paint one region of the photo; the patch tokens whose embedding changes are exactly those whose boxes
    overlap the region (a 24 x 16 input, a 2 x 3 grid of 8-pixel patches)."""
    model = build_tiny_vit("non-square")
    image = torch.zeros(1, 3, 16, 24)
    painted = image.clone()
    painted[..., 9:13, 3:12] = 1.0  # rows 9-12, columns 3-11: patches (1, 0) and (1, 1)
    with torch.no_grad():
        changed = (model.patch_embed(painted) - model.patch_embed(image)).abs().amax(-1)[0] > 1e-6
    out_layout = model.token_layout((2, 3))
    boxes = out_layout.boxes[out_layout.patch_indices]
    overlaps = (boxes[:, 0] < 12) & (boxes[:, 2] > 3) & (boxes[:, 1] < 13) & (boxes[:, 3] > 9)
    np.testing.assert_array_equal(changed.numpy(), overlaps)
    assert overlaps.sum() == 2


def direct_paint(layout: TokenLayout, values: np.ndarray, frame: int) -> np.ndarray:
    """Each pixel's mean over the tokens whose box and frames hold it, one pixel at a time."""
    height, width = layout.image_size
    result = np.full((height, width), np.nan)
    for y in range(height):
        for x in range(width):
            held = [
                value
                for (x0, y0, x1, y1), (f0, f1), value in zip(layout.boxes, layout.frames, values, strict=True)
                if not np.isnan(x0) and x0 <= x < x1 and y0 <= y < y1 and f0 <= frame <= f1
            ]
            if held:
                result[y, x] = np.mean(held)
    return result


def test_paint_averages_overlapping_boxes_and_leaves_unseen_pixels_blank():
    kinds = ("cls", "patch", "patch", "patch", "patch")
    boxes = np.array(
        [[np.nan] * 4, [0, 0, 4, 4], [2, 1, 6, 5], [5, 5, 7, 7], [0, 0, 3, 2]], dtype=np.float32
    )  # overlapping and uneven boxes; pixels right of x = 7 and below y = 7 are seen by none
    frames = np.array([[0, 0], [0, 1], [0, 0], [1, 1], [0, 1]])
    layout = TokenLayout(kinds=kinds, boxes=boxes, frames=frames, image_size=(9, 10), num_frames=2)
    values = np.array([100.0, 1.0, 2.0, 4.0, 8.0])
    for frame in (0, 1):
        np.testing.assert_allclose(layout.paint(values, frame), direct_paint(layout, values, frame), rtol=1e-6)
    np.testing.assert_allclose(layout.paint(values[1:], 0), layout.paint(values, 0))  # per-patch values alike
    assert np.isnan(layout.paint(values, 0)[8, 9])


def test_a_grids_paint_is_its_grid_view_upsampled():
    layout = grid_layout(("cls", "register"), (3, 5), (4, 2))
    values = np.random.default_rng(0).normal(size=len(layout))
    view = layout.grid_view(values)
    assert view.shape == (1, 3, 5)
    np.testing.assert_allclose(layout.paint(values), np.kron(view[0], np.ones((4, 2))), rtol=1e-6)
    np.testing.assert_array_equal(layout.grid_view(values[None, 2:]), view[None])  # per-patch, with a batch axis


def test_frames_tile_the_grid_frame_by_frame():
    layout = grid_layout(("cls",), (2, 2), 8, num_frames=3)
    assert len(layout) == 13 and layout.grid == (3, 2, 2)
    np.testing.assert_array_equal(layout.frames[1:, 0], np.repeat([0, 1, 2], 4))
    values = np.arange(13.0)
    np.testing.assert_array_equal(layout.grid_view(values)[2], [[9, 10], [11, 12]])
    assert layout.paint(values, frame=1)[15, 0] == 7.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda layout: layout.paint(np.zeros(3)), "one entry per token"),
        (lambda layout: layout.paint(np.zeros((2, 5))), "1-D array"),
        (lambda layout: layout.paint(np.zeros(5), frame=1), "frame must be from 0 to 0"),
        (lambda layout: layout.grid_view(np.zeros(7)), "one entry per token"),
        (lambda layout: grid_layout(("cls", "mask"), (2, 2), 8), "prefix tokens are"),
        (lambda layout: grid_layout((), (0, 2), 8), "positive sizes"),
    ],
)
def test_bad_values_are_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(grid_layout(("cls",), (2, 2), 8))


def test_layouts_are_cached_and_read_only():
    assert grid_layout(("cls",), (4, 4), 16) is grid_layout(("cls",), (4, 4), 16)
    with pytest.raises(ValueError):
        grid_layout(("cls",), (4, 4), 16).boxes[1, 0] = 5


def test_paint_at_another_size_takes_each_pixels_centre():
    """Fractional boxes drawn at another size: a pixel takes the tokens whose boxes hold its centre in the input."""
    kinds = ("patch",) * 3
    boxes = np.array([[0.0, 0.0, 5.5, 3.25], [2.5, 1.0, 9.0, 6.0], [-2.0, 4.0, 3.0, 9.0]], dtype=np.float32)
    layout = TokenLayout(kinds=kinds, boxes=boxes, frames=np.zeros((3, 2), np.int64), image_size=(6, 9))
    values = np.array([1.0, 10.0, np.nan])  # a NaN value is drawn as no value
    height, width = 13, 7  # no pixel centre on a box edge
    got = layout.paint(values, shape=(height, width))
    expected = np.full((height, width), np.nan)
    for y in range(height):
        for x in range(width):
            cx, cy = (x + 0.5) * 9 / width, (y + 0.5) * 6 / height
            held = [v for (x0, y0, x1, y1), v in zip(boxes, values) if x0 <= cx < x1 and y0 <= cy < y1 and v == v]
            if held:
                expected[y, x] = np.mean(held)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="1 to 16384 pixels"):
        layout.paint(values, shape=(0, 4))
