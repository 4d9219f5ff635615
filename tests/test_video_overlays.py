"""vitviz.render.video_overlays: maps painted on every frame from a token layout, blended on one colour scale for the
clip, the token under a point, and the GIF and MP4 writers (read back with PIL and with load_video)."""

import io

import numpy as np
import pytest
from PIL import Image

import vitviz
from vitviz.layout import grid_layout
from vitviz.render.overlays import colormap_table
from vitviz.render.video_overlays import (
    clip_range,
    display_shape,
    gif_bytes,
    mp4_bytes,
    outline_token,
    overlay_frames,
    paint_frames,
    token_at,
)

LAYOUT = grid_layout(("cls",), (2, 3), 8, 4, tubelet=2)  # [CLS], then 2 tubelets of 2 x 3 patches of 8 px


def test_each_tubelet_is_painted_on_the_frames_it_spans():
    values = np.arange(12, dtype=np.float32)  # one per patch token
    painted = paint_frames(LAYOUT, values)
    assert painted.shape == (4, 16, 24)
    by_hand = np.kron(values.reshape(2, 1, 2, 3), np.ones((2, 8, 8))).reshape(4, 16, 24)
    np.testing.assert_array_equal(painted, by_hand)
    assert paint_frames(LAYOUT, values, (32, 48)).shape == (4, 32, 48)


def test_one_colour_scale_for_the_whole_clip():
    frames = np.full((2, 4, 4, 3), 100, np.uint8)
    maps = np.stack([np.zeros((4, 4)), np.ones((4, 4))])
    maps[0, 0, 0] = np.nan  # no token: the frame's own colour
    out = overlay_frames(frames, maps, "viridis", 0.25)
    table = colormap_table("viridis").astype(np.float64)
    np.testing.assert_array_equal(out[0, 0, 0], [100, 100, 100])
    np.testing.assert_allclose(out[0, 1, 1], 0.75 * 100 + 0.25 * table[0], atol=0.5)
    np.testing.assert_allclose(out[1, 1, 1], 0.75 * 100 + 0.25 * table[255], atol=0.5)
    assert clip_range(maps) == (0.0, 1.0)
    with pytest.raises(ValueError, match="maps must be"):
        overlay_frames(frames, maps[:1])


def test_the_token_under_a_point_and_its_outline():
    assert token_at(LAYOUT, 0, 20.0, 9.0) == 1 + 5  # frame 0: first tubelet, row 1, column 2
    assert token_at(LAYOUT, 3, 0.0, 0.0) == 1 + 6  # frame 3: second tubelet, row 0, column 0
    assert token_at(LAYOUT, 0, 24.0, 0.0) is None  # past the right edge
    picture = outline_token(np.zeros((16, 24, 3), np.uint8), LAYOUT, 1 + 5)
    assert picture[9, 16:24].max() == 255 and picture[:8].max() == 0  # drawn inside the token's box only


def test_display_shape_scales_by_a_whole_factor():
    assert display_shape((32, 32)) == (320, 320)
    assert display_shape((224, 224)) == (448, 448)
    assert display_shape((400, 300)) == (400, 300)


def test_gif_and_mp4_hold_the_frames():
    frames = np.zeros((5, 17, 23, 3), np.uint8)  # odd sides; black above, white below, the same in every frame
    frames[:, 8:] = 255
    gif = Image.open(io.BytesIO(gif_bytes(frames, fps=5)))
    assert gif.n_frames == 1 and gif.info["duration"] == 1000  # identical frames are one, their times added
    data = mp4_bytes(frames, fps=2.5)
    read = vitviz.load_video(data, frames=5)
    assert read.shape == (5, 18, 24, 3)  # 4:2:0: the last row and column repeated
    assert np.abs(read[:, :17, :23].astype(int) - frames).mean() < 3
    with pytest.raises(ValueError, match="fps must be in"):
        gif_bytes(frames, fps=0)
    with pytest.raises(ValueError, match="frames must be uint8"):
        mp4_bytes(frames.astype(np.float32))
