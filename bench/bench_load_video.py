"""`load_video` on a long, large video: a 60-second 1080p MP4 sampled to 16 frames (issue 46: at most 2 s).

The video is made once with PyAV (H.264, 30 frames per second, a keyframe every --gop frames: 250 is x264's and
most cameras' default): moving shapes on a gradient, so the encoder has real work and the decoder real frames.
It is written to --video (in the temporary folder, never the repository), and kept between runs: encoding 1,800
frames of 1080p takes a minute or two on two cores.

Then, in one process, --repeats calls of each, interleaved, with their medians:
- `load_video(path, frames=16)`: the model's clip at the video size (the shorter side scaled to 224);
- `load_video(path, frames=16, size=None)`: the frames at their own size (the longer side capped at 1,024);
and the peak resident memory of the process (VmHWM) before and after the calls.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np
from common import interleaved_medians, parser, save

from vitviz import load_video


def make_video(path: Path, seconds: int, height: int, width: int, fps: int, gop: int) -> None:
    """An H.264 MP4 of moving shapes: a circle and a square crossing a gradient that drifts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.options = {"preset": "ultrafast"}
        for index in range(seconds * fps):
            t = index / (seconds * fps)
            frame = np.empty((height, width, 3), np.uint8)
            frame[..., 0] = (x * 255 // width + index) % 256
            frame[..., 1] = (y * 255 // height) % 256
            frame[..., 2] = 96
            cx, cy = int(t * width), height // 2
            frame[(x - cx) ** 2 + (y - cy) ** 2 < (height // 8) ** 2] = (255, 255, 255)
            sx = width - int(t * width)
            frame[height // 5 : height // 5 + height // 6, max(0, sx - 100) : sx] = (20, 20, 200)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def peak_resident_mb() -> float:
    """The process's peak resident memory so far (VmHWM), in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> None:
    arguments = parser(__doc__)
    arguments.add_argument(
        "--video", type=Path, default=Path(tempfile.gettempdir()) / "vitviz-bench" / "video_60s_1080p.mp4"
    )
    arguments.add_argument("--seconds", type=int, default=60)
    arguments.add_argument("--height", type=int, default=1080)
    arguments.add_argument("--width", type=int, default=1920)
    arguments.add_argument("--gop", type=int, default=250, help="frames between keyframes")
    arguments.add_argument("--repeats", type=int, default=5)
    args = arguments.parse_args(argv)
    if not args.video.exists():
        start = time.perf_counter()
        make_video(args.video, args.seconds, args.height, args.width, 30, args.gop)
        print(f"made {args.video} ({args.video.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.0f} s")
    before = peak_resident_mb()
    medians = interleaved_medians(
        {
            "16 frames at 224": lambda: load_video(args.video, frames=16),
            "16 frames at full size": lambda: load_video(args.video, frames=16, size=None),
        },
        args.repeats,
    )
    results = {
        "video": str(args.video),
        "video_mb": round(args.video.stat().st_size / 1e6, 1),
        "seconds": medians,
        "peak_resident_mb_before": round(before, 1),
        "peak_resident_mb_after": round(peak_resident_mb(), 1),
        "python": sys.version.split()[0],
        "av": av.__version__,
    }
    for name, seconds in medians.items():
        print(f"{name:>24}: {seconds:.3f} s (median of {args.repeats})")
    print(f"peak resident memory: {before:.0f} MB before the reads, {results['peak_resident_mb_after']:.0f} MB after")
    save(results, args.out)


if __name__ == "__main__":
    main()
