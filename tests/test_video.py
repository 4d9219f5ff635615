"""vitviz.load_video: videos made here with PyAV and PIL, whose pixels say which frame they are, sampled by
transformers' rule; decoding only what the samples need; and the hostile corpus (tests/hostile_videos.py), each case
in its own process with its time and peak memory asserted."""

import io
import re

import numpy as np
import pytest
from hostile_videos import (
    CORPUS,
    PEAK_MB,
    SECONDS,
    Case,
    code_of,
    coded,
    run_case,
    shows_square,
    square_gif,
    squares,
)
from transformers.video_utils import VideoMetadata, default_sample_indices_fn

import vitviz
from vitviz import video
from vitviz.video import DEFAULT_FRAMES, VideoError, load_video, sample_indices

CLIP = 60  # frames in the moving-square clips: the square's left edge is at x = i in frame i
WIDTH = 16 + CLIP - 1 + 16 + 1  # squares()'s width for CLIP frames, side 16 and step 1
SHOWS = shows_square(16, 1, WIDTH)

FORMATS = {
    "mp4-h264": lambda: squares(CLIP),  # x264's defaults: B-frames, so decoding order is not display order
    "mp4-mpeg4": lambda: squares(CLIP, "mpeg4"),
    "webm-vp9": lambda: squares(CLIP, "libvpx-vp9", "webm", options={"deadline": "realtime", "cpu-used": "8"}),
    "webm-vp8": lambda: squares(CLIP, "libvpx", "webm"),
    "mkv-h264-long-gop": lambda: squares(CLIP, container="matroska", keyframes=250),
    "avi-mpeg4": lambda: squares(CLIP, "mpeg4", "avi"),
}


@pytest.fixture(scope="module", params=list(FORMATS))
def clip(request) -> bytes:
    return FORMATS[request.param]()


@pytest.mark.parametrize(("count", "frames"), [(100, 16), (16, 16), (17, 16), (1000, 7), (300_000, 64), (5, 1)])
def test_the_sampling_rule_is_transformers(count, frames):
    metadata = VideoMetadata(total_num_frames=count, fps=25.0)
    assert sample_indices(count, frames) == default_sample_indices_fn(metadata, num_frames=frames).tolist()


def test_a_clip_shorter_than_the_samples_repeats_frames_by_the_same_rule():
    assert sample_indices(3, 8) == [0, 0, 0, 1, 1, 1, 2, 2]  # transformers refuses this; the rule extends to it


@pytest.mark.parametrize("frames", [1, 5, 16, CLIP, 2 * CLIP + 1])
def test_each_sampled_frame_shows_the_frame_the_rule_names(clip, frames):
    video = load_video(clip, frames=frames)
    assert video.dtype == np.uint8 and video.shape == (frames, 32, WIDTH, 3)
    assert [SHOWS(frame) for frame in video] == sample_indices(CLIP, frames)


def test_the_default_is_sixteen_frames_at_the_video_size(clip):
    video = load_video(clip)
    assert DEFAULT_FRAMES == 16 and video.shape == (16, 32, WIDTH, 3)


def test_a_path_a_str_and_bytes_give_the_same_frames(tmp_path):
    data = squares(CLIP)
    (tmp_path / "clip.mp4").write_bytes(data)
    from_bytes = load_video(data, frames=4)
    assert np.array_equal(load_video(tmp_path / "clip.mp4", frames=4), from_bytes)
    assert np.array_equal(load_video(str(tmp_path / "clip.mp4"), frames=4), from_bytes)
    assert np.array_equal(load_video(bytearray(data), frames=4), from_bytes)


def test_a_gif_is_sampled_too():
    video = load_video(square_gif(40), frames=8)
    assert video.shape == (8, 32, 16 + 2 * 39 + 16, 3)
    assert [shows_square(16, 2, video.shape[2])(frame) for frame in video] == sample_indices(40, 8)


def test_size_scales_the_shorter_side():
    video = load_video(squares(CLIP), frames=3, size=64)
    assert video.shape == (3, 64, 2 * WIDTH, 3)
    assert [shows_square(16, 1, WIDTH)(frame) for frame in video] == sample_indices(CLIP, 3)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"frames": 0}, ValueError),
        ({"frames": 5000}, ValueError),
        ({"frames": 2.5}, TypeError),
        ({"frames": True}, TypeError),
        ({"size": 8}, ValueError),
        ({"size": 4096}, ValueError),
    ],
)
def test_arguments_out_of_range_are_refused(arguments, error):
    with pytest.raises(error):
        load_video(squares(10), **arguments)


def test_a_source_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="bytes or a path"):
        load_video(io.BytesIO(b"data"))


def test_output_larger_than_the_limit_is_refused_before_it_is_allocated():
    with pytest.raises(VideoError, match="above the limit of 200 MB: ask for fewer frames or a smaller size"):
        load_video(squares(10), frames=1024, size=1024)


def decoded_frames(data: bytes, frames: int) -> tuple[np.ndarray, int]:
    """(the frames load_video returns, how many frames it decoded to get them)."""
    reader = video._Reader(lambda: io.BytesIO(data), frames, None, float("inf"))
    return reader.read(), reader.decoded


def test_only_the_frames_near_each_sample_are_decoded():
    data = coded(3000, keyframes=50)  # 60 keyframes
    frames, decoded = decoded_frames(data, 8)
    assert [code_of(frame) for frame in frames] == sample_indices(3000, 8)
    assert decoded <= 8 * 50  # from the keyframe before each sample to it, never the 3,000


def test_samples_closer_than_the_keyframes_are_decoded_in_one_pass():
    data = coded(200, keyframes=1000)  # one keyframe: every seek would go back to frame 0
    frames, decoded = decoded_frames(data, 16)
    assert [code_of(frame) for frame in frames] == sample_indices(200, 16)
    # straight through once (and at most one sample's spacing again while the keyframe interval is still unknown),
    # not 16 times from the start (about 1,500)
    assert decoded <= 200 + 200 // 16


def test_a_live_mkv_whose_segment_size_is_unknown_is_not_called_truncated():
    assert video._ebml_number(b"\x81", 0) == (1, 1)
    assert video._ebml_number(b"\x42\x86", 0) == (0x286, 2)
    assert video._ebml_number(b"\x01" + b"\xff" * 7, 0) == (None, 8)  # "unknown": a live stream's Segment
    live = bytearray(squares(10, "libvpx", "webm"))
    at = live.index(b"\x18\x53\x80\x67") + 4  # the Segment's size, rewritten as "unknown" in the same length
    length = 9 - live[at].bit_length()
    live[at : at + length] = bytes([(2 << (8 - length)) - 1]) + b"\xff" * (length - 1)
    assert load_video(bytes(live), frames=2).shape == (2, 32, 42, 3)


def test_a_read_that_runs_out_of_time_is_refused(monkeypatch):
    monkeypatch.setattr(video, "MAX_SECONDS", 0.0)
    with pytest.raises(VideoError, match=r"took more than 0 s \(\d+ frames decoded\)"):
        load_video(squares(CLIP), frames=4)


def test_video_error_is_a_value_error_and_the_package_exports_the_reader():
    assert issubclass(VideoError, ValueError)
    assert vitviz.load_video is load_video and vitviz.VideoError is VideoError


# --- the hostile corpus, each case in its own process ---------------------------------------------------------


def test_the_corpus_is_broad():
    names = [case.name for case in CORPUS]
    assert len(set(names)) == len(names) >= 20
    assert sum(case.good for case in CORPUS) >= 5 and sum(not case.good for case in CORPUS) >= 15


@pytest.mark.parametrize("case", CORPUS, ids=lambda case: case.name)
def test_hostile_video_is_read_or_refused_in_one_line_within_time_and_memory(case: Case, tmp_path):
    report, seconds, done, frames = run_case(case, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]  # no traceback, no FFmpeg log lines
    assert seconds < SECONDS, f"{case.name} took {seconds:.1f} s"
    assert report["peak_mb"] < PEAK_MB, f"{case.name} peaked at {report['peak_mb']:.0f} MB"
    if case.good:
        assert "error" not in report, report
        assert frames.shape == case.shape and frames.dtype == np.uint8
        if case.shows is not None:
            assert [case.shows(frame) for frame in frames] == case.expected
    else:
        assert "error" in report, f"{case.name} was read: {report}"
        message = report["error"]
        assert re.search(case.error, message) and "\n" not in message, message
