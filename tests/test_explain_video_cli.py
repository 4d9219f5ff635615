"""`vitviz explain` on videos, with a tiny random VideoMAE folder (transformers' classes, save_pretrained) and clips of
a moving square made with PyAV: the rollout in the .npz equals a dense rollout of transformers' own eager attentions
on the frames sampled and cropped here by hand, the overlays are GIFs or MP4s of those frames with that map, and
every file that cannot be explained (a corrupt video, a video given to an image model, an image given to a video
model that reads clips only) is skipped with one line."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from test_import_video import hf_model
from tiny_models import tiny_checkpoint
from tiny_videos import CLASSES, moving_clip, tiny_video_folder

import vitviz
from vitviz.commands.cli import main
from vitviz.render.overlays import colormap_table

ATOL = 1e-5  # fp32 maps computed two ways (a streamed rollout against a dense product)
MEAN = STD = 0.5  # transformers' VideoMAEVideoProcessor's (the folder has no processor file)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_video_folder(tmp_path_factory.mktemp("videomae"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A folder with an MP4, a WebM, a PNG and a file that is no video at all."""
    place = tmp_path_factory.mktemp("clips")
    (place / "walk.mp4").write_bytes(moving_clip(12))
    (place / "run.webm").write_bytes(moving_clip(10, container="webm"))
    (place / "broken.mp4").write_bytes(b"not a video " * 20)
    Image.new("RGB", (40, 30), (200, 30, 30)).save(place / "still.png")
    return place


def by_hand(path) -> np.ndarray:
    """The 4 frames VideoMAE reads: load_video's samples with the shorter side at 32, the centre 32 x 32."""
    frames = vitviz.load_video(path, frames=4, size=32)
    left = (frames.shape[2] - 32) // 2
    return frames[:, :32, left : left + 32]


def dense_rollout(path) -> np.ndarray:
    """The mean token's rollout, (0.5 mean_h A + 0.5 I) per block, from transformers' eager attentions: (N,)."""
    frames = by_hand(path)
    clip = torch.tensor(((frames / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2), dtype=torch.float32)[None]
    with torch.no_grad():
        attentions = hf_model("videomae")(clip, output_attentions=True).attentions
    T = attentions[0].shape[-1]
    product = torch.eye(T)
    for attention in attentions:
        product = (0.5 * attention[0].mean(dim=0) + 0.5 * torch.eye(T)) @ product
    return product.mean(dim=0).numpy()  # VideoMAE's head reads the mean of the tokens; no prefix tokens


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main(["explain", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def test_every_video_gets_overlays_an_npz_and_a_prediction(folder, inputs, tmp_path, capsys):
    status, out, err = run(capsys, inputs, "--model", folder, "--out", tmp_path, "--methods", "rollout", "relevance")
    assert status == 1  # broken.mp4 and still.png are skipped
    assert "explained 2 of 4 files" in out
    skipped = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 2 and "Traceback" not in err
    assert any("broken.mp4: not a video file FFmpeg can read" in line for line in skipped)
    assert any("still.png: " in line for line in skipped)  # a VideoMAE reads clips of 4 frames, never one image
    for name in ("walk", "run"):
        for method in ("rollout", "relevance"):
            gif = Image.open(tmp_path / f"{name}_{method}.gif")
            assert gif.n_frames == 4 and gif.size == (320, 320)  # 32-pixel frames drawn 10 times larger
        with np.load(tmp_path / f"{name}.npz") as arrays:
            assert arrays["rollout"].shape == (32,) and arrays["rollout_frames"].shape == (4, 32, 32)
            assert arrays["frames"].shape == (4, 32, 32, 3) and arrays["token_frames"].shape == (32, 2)
            np.testing.assert_allclose(arrays["probabilities"].sum(), 1.0, atol=1e-5)
    rows = (tmp_path / "predictions.csv").read_text().splitlines()
    assert rows[0].startswith("video,class1,probability1") and len(rows) == 3
    assert rows[1].split(",")[1] in CLASSES


def test_the_rollout_equals_a_dense_rollout_of_transformers_attentions(folder, inputs, tmp_path, capsys):
    status, _, _ = run(capsys, inputs / "walk.mp4", "--model", folder, "--out", tmp_path, "--methods", "rollout")
    assert status == 0
    with np.load(tmp_path / "walk.npz") as arrays:
        np.testing.assert_array_equal(arrays["frames"], by_hand(inputs / "walk.mp4"))
        np.testing.assert_allclose(arrays["rollout"], dense_rollout(inputs / "walk.mp4"), atol=ATOL, rtol=0)
        # token (t, r, c) covers frames 2t and 2t + 1, pixels [8c, 8c + 8) x [8r, 8r + 8): painted by hand
        painted = np.kron(arrays["rollout"].reshape(2, 1, 4, 4), np.ones((2, 8, 8)))
        np.testing.assert_allclose(arrays["rollout_frames"], painted.reshape(4, 32, 32), atol=1e-6)


def test_an_mp4_overlay_shows_the_frames_with_their_map(folder, inputs, tmp_path, capsys):
    argv = (inputs / "walk.mp4", "--model", folder, "--out", tmp_path, "--methods", "rollout")
    status, _, _ = run(capsys, *argv, "--video-format", "mp4", "--alpha", "0.6", "--colormap", "viridis")
    assert status == 0
    shown = vitviz.load_video(tmp_path / "walk_rollout.mp4", frames=4)
    assert shown.shape == (4, 320, 320, 3)
    with np.load(tmp_path / "walk.npz") as arrays:
        values, frames = arrays["rollout_frames"], arrays["frames"].astype(np.float64)
    scaled = (values - values.min()) / (values.max() - values.min())
    colours = colormap_table("viridis")[np.rint(scaled * 255).astype(int)]
    expected = np.kron(0.4 * frames + 0.6 * colours, np.ones((1, 10, 10, 1)))  # each pixel drawn 10 x 10
    # H.264 at crf 18 in 4:2:0: a few levels off on average, more at the colour edges
    assert np.abs(shown.astype(np.float64) - expected).mean() < 4


def test_an_image_model_skips_videos_in_one_line_and_explains_the_images(inputs, tmp_path, capsys):
    model = tiny_checkpoint(tmp_path / "model.pt")
    status, out, err = run(capsys, inputs, "--model", model, "--out", tmp_path / "out", "--methods", "rollout")
    assert status == 1 and "explained 1 of 4 images" in out  # still.png
    lines = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert sum("a video, and this is an image model" in line for line in lines) == 3
    assert (tmp_path / "out" / "still_rollout.png").is_file() and "Traceback" not in err


def test_video_options_are_checked_before_anything_runs(folder, inputs, tmp_path, capsys):
    with pytest.raises(SystemExit, match="none of the --methods can explain a video model"):
        run(capsys, inputs / "walk.mp4", "--model", folder, "--out", tmp_path, "--methods", "cls", "lens")
    with pytest.raises(SystemExit, match="--fps must be in"):
        run(capsys, inputs / "walk.mp4", "--model", folder, "--out", tmp_path, "--fps", "0")


def gif_timeline(data: bytes) -> list[np.ndarray]:
    """The GIF's picture at each clip frame: a frame shown for k frame durations (PIL writes identical consecutive
    frames once, their durations added) counts k times."""
    gif, shown = Image.open(io.BytesIO(data)), []
    for index in range(gif.n_frames):
        gif.seek(index)
        shown += [np.asarray(gif.convert("RGB"), np.float64)] * round(gif.info["duration"] / 250)  # 4 fps
    return shown


def test_gif_frames_are_the_overlays(folder, inputs, tmp_path, capsys):
    """The GIF's frames, decoded, are the map's colours (opacity 1) up to its 256-colour palette, frame by frame."""
    run(capsys, inputs / "walk.mp4", "--model", folder, "--out", tmp_path, "--methods", "rollout", "--alpha", "1")
    with np.load(tmp_path / "walk.npz") as arrays:
        values = arrays["rollout_frames"]
    scaled = (values - values.min()) / (values.max() - values.min())
    expected = np.kron(colormap_table("inferno")[np.rint(scaled * 255).astype(int)], np.ones((1, 10, 10, 1)))
    shown = gif_timeline((tmp_path / "walk_rollout.gif").read_bytes())
    assert len(shown) == 4
    for picture, wanted in zip(shown, expected, strict=True):
        assert np.abs(picture - wanted).max() <= 8
