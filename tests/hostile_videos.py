"""Videos made in code with PyAV and PIL (no binary fixtures), and a corpus of hostile ones.

Every video shows where it is in time: a white square that moves a fixed step per frame (``moving_square``), or, for
the long ones, the frame's number written in 8 x 8 black and white blocks (``coded``). So a test can read, from the
pixels alone, which frame load_video returned in each slot.

Each corpus case is a name, a function that writes the file into a folder and returns what to pass to load_video
(its path), and what load_video must do: return frames that show the expected frame numbers, or raise a VideoError
whose message matches. tests/test_video.py runs every case in its own process, with its time and memory measured.

    python tests/hostile_videos.py      # print each case and what load_video did with it, its time and memory
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 10  # a case's whole process (start, imports, load_video) must end within this
PEAK_MB = 500  # and its peak resident memory stay below this
BITS = 24  # frame numbers up to 2^24 in a coded frame: 4 rows of 6 blocks of 8 x 8 pixels


# --- making videos ---------------------------------------------------------------------------------------------


def square_frame(index: int, width: int, height: int, side: int, step: int) -> np.ndarray:
    """(H, W, 3) black with a white side x side square whose left edge is at index * step."""
    image = np.zeros((height, width, 3), np.uint8)
    x, y = index * step, (height - side) // 2
    image[y : y + side, x : x + side] = 255
    return image


def code_plane(number: int, width: int, height: int) -> np.ndarray:
    """(H, W) luma with ``number`` in binary: bit b is the b-th 8 x 8 block (row-major in a 4 x 6 grid)."""
    bits = (number >> np.arange(BITS)) & 1
    blocks = (bits.reshape(4, 6) * 200 + 16).astype(np.uint8)
    plane = np.full((height, width), 16, np.uint8)
    plane[:32, :48] = np.repeat(np.repeat(blocks, 8, axis=0), 8, axis=1)
    return plane


def code_of(frame: np.ndarray) -> int:
    """The number a coded frame shows (frame at its made size, RGB)."""
    blocks = frame[:32, :48].astype(np.float64).mean(axis=2).reshape(4, 8, 6, 8).mean(axis=(1, 3)) > 108
    return int((blocks.reshape(-1).astype(np.int64) << np.arange(BITS)).sum())


def encode(
    frames: int,
    draw: Callable[[int], np.ndarray],
    size: tuple[int, int],
    codec: str = "libx264",
    container: str = "mp4",
    rate: int = 25,
    keyframes: int = 12,
    options: dict | None = None,
    container_options: dict | None = None,
) -> bytes:
    """A video of ``frames`` RGB frames ``draw(i)`` of ``size`` (width, height), encoded by PyAV."""
    with tempfile.TemporaryDirectory() as folder:  # a file, not a buffer: MP4's faststart rewrites it at the end
        path = Path(folder) / f"video.{container}"
        with av.open(str(path), "w", format=container, options=container_options or {}) as output:
            stream = output.add_stream(codec, rate=rate)
            stream.width, stream.height = size
            stream.pix_fmt = "yuv420p"
            stream.codec_context.gop_size = keyframes
            if codec == "mpeg4":
                stream.codec_context.bit_rate = 8_000_000  # the default rate smears a moving square
            stream.options = options or ({"crf": "12"} if codec == "libx264" else {})
            for index in range(frames):
                for packet in stream.encode(av.VideoFrame.from_ndarray(draw(index), format="rgb24")):
                    output.mux(packet)
            for packet in stream.encode():
                output.mux(packet)
        return path.read_bytes()


def squares(frames: int, codec="libx264", container="mp4", side=16, step=1, height=32, **kwargs) -> bytes:
    width = side + step * (frames - 1) + 16
    width += width % 2  # 4:2:0 needs even sides
    return encode(
        frames, lambda i: square_frame(i, width, height, side, step), (width, height), codec, container, **kwargs
    )


def coded(frames: int, every: int = 1, keyframes: int = 250) -> bytes:
    """A 48 x 32 H.264 MP4 whose frame i shows the number i // every (a new picture every ``every`` frames)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 48, 32, "yuv420p"
        stream.codec_context.gop_size = keyframes
        stream.options = {"preset": "ultrafast", "crf": "12", "bframes": "0"}
        frame = av.VideoFrame(48, 32, "yuv420p")  # one frame, its luma rewritten: no conversion per frame
        assert frame.planes[0].line_size == 48
        for plane in frame.planes[1:]:
            plane.update(bytes([128]) * plane.buffer_size)
        for index in range(frames):
            if index % every == 0:
                frame.planes[0].update(code_plane(index // every, 48, 32).tobytes())
            frame.pts = index
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode():
            output.mux(packet)
    return buffer.getvalue()


def coded_gif(frames: int) -> bytes:
    """A 48 x 32 animated GIF whose frame i shows the number i (written by FFmpeg's GIF encoder)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="gif") as output:
        stream = output.add_stream("gif", rate=25)
        stream.width, stream.height, stream.pix_fmt = 48, 32, "rgb8"
        for index in range(frames):
            grey = np.repeat(code_plane(index, 48, 32)[:, :, None], 3, axis=2)
            for packet in stream.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode():
            output.mux(packet)
    return buffer.getvalue()


def square_gif(frames: int, side: int = 16, step: int = 2) -> bytes:
    """An animated GIF of a moving square, written by PIL."""
    width = side + step * (frames - 1) + 16
    pictures = [Image.fromarray(square_frame(i, width, 32, side, step)) for i in range(frames)]
    buffer = io.BytesIO()
    pictures[0].save(buffer, "GIF", save_all=True, append_images=pictures[1:], duration=40, loop=0)
    return buffer.getvalue()


def audio_only() -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("aac", rate=16000)
        samples = np.zeros((1, 1024 * 20), np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        frame.sample_rate = 16000
        for packet in [*stream.encode(frame), *stream.encode()]:
            output.mux(packet)
    return buffer.getvalue()


def no_frames() -> bytes:
    """An AVI with a video stream and not one frame in it."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="avi") as output:
        stream = output.add_stream("mpeg4", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        output.start_encoding()
    return buffer.getvalue()


def tiny(width: int, height: int) -> bytes:
    """A video of a few width x height frames (FFV1 in Matroska takes any size, 1 x 1 included)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="matroska") as output:
        stream = output.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv444p"
        for index in range(5):
            picture = np.full((height, width, 3), index * 40, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                output.mux(packet)
        for packet in stream.encode():
            output.mux(packet)
    return buffer.getvalue()


def with_duration(data: bytes, factor: float) -> bytes:
    """A WebM/MKV whose Segment Duration (an 8-byte float after the element id 0x4489) is ``factor`` times the truth."""
    at = data.index(b"\x44\x89\x88") + 3
    (duration,) = struct.unpack(">d", data[at : at + 8])
    return data[:at] + struct.pack(">d", duration * factor) + data[at + 8 :]


def damaged(data: bytes, marker: bytes, length: int, skip: int = 0) -> bytes:
    """``data`` with ``length`` bytes of noise from ``skip`` bytes after the first ``marker`` (a box's type)."""
    at = data.index(marker) + len(marker) + skip
    return data[:at] + np.random.default_rng(0).bytes(length) + data[at + length :]


def cut_in_half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def zip_of(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("clip.mp4", data)
    return buffer.getvalue()


def png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(square_frame(0, 64, 32, 16, 1)).save(buffer, "PNG")
    return buffer.getvalue()


# --- the corpus ------------------------------------------------------------------------------------------------

EIGHT_K = (7680, 4320)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]  # writes the case into a folder, returns the path to give load_video
    frames: int | None = None  # load_video's frames=
    shape: tuple[int, int, int, int] | None = None  # a good case: the returned shape
    shows: Callable[[np.ndarray], int] | None = None  # a good case: the frame number a frame shows (None: any)
    expected: list[int] | None = None  # a good case: the numbers the frames must show, in order
    error: str | None = None  # a bad case: a regular expression the VideoError message must match

    @property
    def good(self) -> bool:
        return self.error is None


def written(name: str, make: Callable[[], bytes]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(make())
        return path

    return write


def folder_case(folder: Path) -> Path:
    (folder / "clips.mp4").mkdir()
    return folder / "clips.mp4"


def even(numbers: int, frames: int) -> list[int]:
    return [k * numbers // frames for k in range(frames)]


def eight_k() -> bytes:
    """Three 8K frames (a 480-pixel square moving 960 pixels a frame), every one a keyframe: quick to make."""
    width, height = EIGHT_K
    draw = lambda i: square_frame(i, width, height, 480, 960)  # noqa: E731
    options = {"preset": "ultrafast", "crf": "30"}
    return encode(3, draw, EIGHT_K, keyframes=1, options=options)


def shows_square(side: int, step: int, made_width: int) -> Callable[[np.ndarray], int]:
    """The frame number of a square_frame after load_video scaled it from ``made_width`` pixels wide."""

    def shows(frame: np.ndarray) -> int:
        columns = frame.astype(np.float64).mean(axis=(0, 2))
        centre = (np.arange(frame.shape[1]) + 0.5) @ columns / columns.sum() * made_width / frame.shape[1]
        return round((centre - side / 2) / step)

    return shows


CORPUS: list[Case] = [
    # -- read: the sampled frames, at the expected size --
    Case(
        "100k-frames",
        written("long.mp4", lambda: coded(100_000, every=10)),
        16,
        (16, 32, 48, 3),
        lambda f: code_of(f) * 10,
        even(100_000, 16),
    ),
    Case("8k", written("8k.mp4", eight_k), 3, (3, 576, 1024, 3), shows_square(480, 960, 7680), [0, 1, 2]),
    Case(
        "gif-10k-frames", written("long.gif", lambda: coded_gif(10_000)), 16, (16, 32, 48, 3), code_of, even(10_000, 16)
    ),
    Case(
        "webm-duration-10x-too-long",
        written("long.webm", lambda: with_duration(squares(60, "libvpx", "webm"), 10)),
        6,
        (6, 32, 92, 3),
        shows_square(16, 1, 92),
        even(60, 6),
    ),
    Case(
        "webm-duration-10x-too-short",
        written("short.webm", lambda: with_duration(squares(60, "libvpx", "webm"), 0.1)),
        6,
        (6, 32, 92, 3),
        shows_square(16, 1, 92),
        even(60, 6),
    ),
    # noise inside the frames (the container intact): the decoder conceals it, as players do, and the clip is read
    Case("corrupt-frames", written("noisy.mp4", lambda: damaged(squares(60), b"mdat", 300, 200)), 4, (4, 32, 92, 3)),
    # -- refused: one VideoError line --
    Case("empty", written("empty.mp4", lambda: b""), error="the file is empty"),
    Case("missing", lambda folder: folder / "nowhere.mp4", error="no such file"),
    Case("folder", folder_case, error="is a folder, not a video file"),
    Case("png-named-mp4", written("photo.mp4", png), error="this is a PNG image, not a video"),
    Case("zip-named-mp4", written("archive.mp4", lambda: zip_of(squares(10))), error="this is a ZIP archive"),
    Case("random-bytes", written("noise.mp4", lambda: np.random.default_rng(0).bytes(4096)), error="not a video file"),
    Case(
        "text-named-mp4",
        written("notes.mp4", lambda: b"not a video at all\n" * 10),
        error="not a video file FFmpeg can read",
    ),
    Case("audio-only", written("song.mp4", audio_only), error="has no video stream \\(audio only\\)"),
    Case("no-frames", written("nothing.avi", no_frames), error="has no frames"),
    Case("1x1", written("dot.mkv", lambda: tiny(1, 1)), error="1x1, below 16 pixels a side"),
    Case("16x512", written("strip.mkv", lambda: tiny(16, 512)), error="more than 16 times longer"),
    # noise over the sample description (the codec and its parameters), or over the sample timing table
    Case(
        "corrupt-codec-header",
        written("broken.mp4", lambda: damaged(squares(30), b"stsd", 200)),
        error="corrupt or truncated",
    ),
    Case("corrupt-sample-table", written("broken.mp4", lambda: damaged(squares(30), b"stts", 24, 4)), error="corrupt"),
    Case("truncated-mp4", written("half.mp4", lambda: squares(60)[:-2000]), error="truncated: its 'mdat' box runs"),
    Case(
        "truncated-faststart-mp4",
        written("half.mp4", lambda: cut_in_half(squares(60, container_options={"movflags": "faststart"}))),
        error="truncated",
    ),
    Case(
        "truncated-webm",
        written("half.webm", lambda: cut_in_half(squares(60, "libvpx", "webm"))),
        error="truncated",
    ),
]


# --- one case in its own process -------------------------------------------------------------------------------

# The child imports vitviz.video without vitviz/__init__.py (which imports torch), so its memory is the reader's.
# Peak memory is VmHWM: it starts afresh at exec, while getrusage's ru_maxrss keeps the forking parent's high-water
# mark (pytest's, with torch loaded).
CHILD = """
import json, resource, sys, time, types
from pathlib import Path
package = types.ModuleType("vitviz")
package.__path__ = [str(Path.cwd() / "vitviz")]
sys.modules["vitviz"] = package
import numpy as np
from vitviz.video import VideoError, load_video
def peak_mb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024
path, frames, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
before = peak_mb()
started = time.monotonic()
try:
    video = load_video(path, frames=frames)
    np.save(out, video)
    outcome = {"shape": list(video.shape)}
except VideoError as error:
    outcome = {"error": str(error)}
outcome |= {"seconds": time.monotonic() - started, "peak_mb": peak_mb(), "imports_mb": before,
            "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
print(json.dumps(outcome))
"""


def run_case(case: Case, folder: Path) -> tuple[dict, float, subprocess.CompletedProcess, np.ndarray | None]:
    """(the child's report, the process's wall seconds, the process, the frames it returned) for ``case``."""
    import time

    folder.mkdir(parents=True, exist_ok=True)
    path, out = case.make(folder), folder / "frames.npy"
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), json.dumps(case.frames), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SECONDS * 3,
    )
    seconds = time.monotonic() - started
    report = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 and done.stdout else {}
    return report, seconds, done, (np.load(out) if out.exists() else None)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as temporary:
        for case in CORPUS:
            report, seconds, done, video = run_case(case, Path(temporary) / case.name)
            what = report.get("error") or report.get("shape") or done.stderr.strip()[-300:]
            shown = [case.shows(frame) for frame in video] if video is not None and case.shows else ""
            print(f"{case.name:>28}  {seconds:5.2f} s  {report.get('peak_mb', 0):4.0f} MB  {what}  {shown}")
