"""The Video page's sample clip: moving shapes drawn in code and encoded with PyAV, never downloaded.

A red disc crosses the frame from left to right while a blue square falls from top to bottom, over a soft grey
gradient: two objects whose places change from frame to frame, so a map that follows them shows it. The page makes
the clip in memory the first time it is shown (a few hundred ms); run this file to write it to a file:

    python vitviz_dashboard/video/sample.py sample.mp4
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import av
import numpy as np

NAME = "sample: moving shapes.mp4"
WIDTH, HEIGHT, FRAMES, RATE = 256, 192, 48, 12  # 4 s at 12 frames a second


def sample_frame(index: int, frames: int = FRAMES, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """uint8 (height, width, 3): frame ``index`` of ``frames``: the background, the disc and the square."""
    progress = index / max(frames - 1, 1)
    y, x = np.mgrid[0:height, 0:width]
    grey = (90 + 60 * x / width + 30 * y / height).astype(np.uint8)
    image = np.repeat(grey[..., None], 3, axis=2)
    radius = height // 7
    cx, cy = radius + progress * (width - 2 * radius), height // 3
    image[(x - cx) ** 2 + (y - cy) ** 2 <= radius**2] = (220, 40, 40)
    side = height // 5
    left, top = int(width * 0.65), int(progress * (height - side))
    image[top : top + side, left : left + side] = (40, 70, 220)
    return image


def sample_clip(frames: int = FRAMES) -> bytes:
    """The sample as an H.264 MP4 (yuv420p), ``frames`` frames at RATE frames a second."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=RATE)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"crf": "20", "preset": "veryfast"}
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(sample_frame(index, frames), format="rgb24")
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode():
            output.mux(packet)
    return buffer.getvalue()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python vitviz_dashboard/video/sample.py OUT.mp4")
    Path(sys.argv[1]).write_bytes(sample_clip())
