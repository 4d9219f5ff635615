"""Video files in, sampled RGB frames out: ``load_video``, the one intake for videos, as ``load_image`` is for photos.

A clip of N frames is sampled as transformers' video processors sample it (``default_sample_indices_fn``): the k-th
of F frames is frame ``k * N // F`` (k = 0 .. F - 1), so the samples are evenly spaced from the first frame on. A
clip shorter than F frames repeats frames by the same rule (transformers refuses it instead).

Only the sampled frames cost what a frame costs. The reader seeks to the keyframe before each sampled frame and
decodes forward to it; when the samples lie closer together than the keyframes (a short clip, or many samples), it
decodes straight on instead, since seeking back would decode the same frames twice. Each kept frame is scaled and
converted to RGB in one FFmpeg step right after it is decoded, so an 8K video never holds a full-size RGB frame.

N comes from the container (its frame count, or its duration times its frame rate) but is not trusted: the reader
first looks at the real end of the stream, and when it disagrees with the metadata, it counts the packets (which
reads the file but decodes nothing). GIFs are decoded in order, keeping only the sampled frames: a GIF frame is
drawn over the previous one, so none can be skipped, and GIF files have no index to seek with.

Every file is read or refused within MAX_SECONDS and a bounded amount of memory (docs/video.md); what is refused
raises one ``VideoError`` whose message names the problem.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral
from pathlib import Path

import av
import numpy as np

DEFAULT_FRAMES = 16  # VideoMAE's clip length (TimeSformer takes 8, ViViT 32, V-JEPA 2 16 to 64)
MAX_FRAMES = 1024  # samples per call: far above any video model's clip
MAX_SECONDS = 8.0  # the decoding budget; with opening and checks, a file is read or refused within 10 s
MIN_SIDE = 16  # pixels: below one patch of every video ViT (16 x 16), there is nothing to explain
MAX_PIXELS = 8192 * 4320  # DCI 8K, the largest frame cameras write; larger frames are refused before decoding
MAX_ASPECT_RATIO = 16  # longer side / shorter side; beyond this the scaled frame is a line of pixels
WORKING_SIDE = 1024  # size=None: frames keep their size, but the longer side is scaled down to at most this
MAX_OUTPUT_BYTES = 200_000_000  # the returned (frames, H, W, 3) array
MAX_COUNTED = 1_000_000  # packets counted when the metadata cannot be trusted (9 hours at 30 frames per second)
DECODER_THREADS = 2  # slice threads: more would hold more frames in flight (8K frames are 50 MB each)
# FFmpeg demuxers that may open a file (its format_whitelist): containers of video, and never one that opens other
# files or URLs (HLS, DASH, concat, image sequences) or reads a still image as a one-frame video
DEMUXERS = ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi", "gif", "mpegts", "mpeg", "flv", "ogg", "asf")
FORMATS = "MP4, MOV, M4V, MKV, WebM, AVI, GIF, MPEG-TS, MPEG-PS, FLV, Ogg, WMV"
# signatures of files that are not videos, so the error can say what the file is
_NOT_VIDEOS = [
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"BM", "a BMP image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"%PDF", "a PDF document"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a program (ELF executable)"),
    (b"ID3", "an MP3 audio file"),
    (b"fLaC", "a FLAC audio file"),
]


class VideoError(ValueError):
    """The file is not a video vitviz can read within its bounds; the message says why."""


def sample_indices(count: int, frames: int) -> list[int]:
    """The frames sampled from a clip of ``count``: the k-th is ``k * count // frames`` (transformers' rule)."""
    return [k * count // frames for k in range(frames)]


def load_video(
    source: bytes | bytearray | memoryview | str | os.PathLike, *, frames: int | None = None, size: int | None = None
) -> np.ndarray:
    """``frames`` frames of a video, evenly sampled over the clip, as uint8 RGB of shape (frames, H, W, 3).

    ``source`` is the file's bytes or its path (str or PathLike). ``frames`` defaults to DEFAULT_FRAMES (16).
    ``size`` scales every frame so that its shorter side is ``size`` pixels (16 to WORKING_SIDE); None keeps the
    video's size, scaled down so that the longer side is at most WORKING_SIDE (1,024) pixels. Refuses what is not a
    readable video, or cannot be read within MAX_SECONDS, with a ``VideoError`` that names the problem.
    """
    count = DEFAULT_FRAMES if frames is None else _checked_int("frames", frames, 1, MAX_FRAMES)
    side = None if size is None else _checked_int("size", size, MIN_SIDE, WORKING_SIDE)
    opener = _opener(source)
    reader = _Reader(opener, count, side, time.monotonic() + MAX_SECONDS)
    try:
        return reader.read()
    except av.error.FFmpegError as error:  # damage found while demuxing or decoding
        raise VideoError(f"the {reader.kind} is corrupt or truncated: {_reason(error)}") from None


def _checked_int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} is a whole number, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is outside {low}..{high}")
    return int(value)


def _opener(source) -> Callable[[], io.IOBase]:
    """A function that gives a fresh file object for ``source`` (the reader may open it twice). Paths are opened
    by Python, never handed to FFmpeg as a URL, so a name like ``http://...`` or ``concat:...`` is only a name."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        _check_head(data[:16], len(data))
        return lambda: io.BytesIO(data)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"a video is given as bytes or a path (str or PathLike), not {type(source).__name__}")
    path = Path(source)
    try:
        if path.is_dir():
            raise VideoError(f"{path} is a folder, not a video file")
        with path.open("rb") as file:
            _check_head(file.read(16), path.stat().st_size)
    except FileNotFoundError:
        raise VideoError(f"{path}: no such file") from None
    except OSError as error:
        raise VideoError(f"{path} cannot be read: {error.strerror or error}") from None
    return lambda: path.open("rb")


def _check_head(head: bytes, size: int) -> None:
    if size == 0:
        raise VideoError("the file is empty")
    for signature, name in _NOT_VIDEOS:
        if head.startswith(signature):
            hint = " (vitviz.load_image reads images)" if name.endswith("image") else ""
            raise VideoError(f"this is {name}, not a video{hint}")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        raise VideoError("this is a WebP image, not a video (vitviz.load_image reads images)")


def _kind(head: bytes) -> str:
    """What the file says it is, for messages: 'MP4 file', 'WebM/MKV file', ..."""
    if head[4:8] == b"ftyp" or head[4:8] in (b"moov", b"mdat", b"free", b"wide"):
        return "MP4/MOV file"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "WebM/MKV file"
    if head.startswith(b"GIF8"):
        return "GIF file"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "AVI file"
    return "video file"


def _check_complete(file: io.IOBase, kind: str) -> None:
    """Refuse an MP4 or MKV whose top-level structure runs past the end of the file: a download or copy cut short.
    FFmpeg would read what is there, and the clip would silently end early."""
    end = file.seek(0, io.SEEK_END)
    if kind == "MP4/MOV file":  # top-level boxes: 32-bit size (1: a 64-bit size follows; 0: to the end) and type
        position = 0
        for _ in range(10_000):
            file.seek(position)
            header = file.read(16)
            if len(header) < 8:
                return
            size, name = int.from_bytes(header[:4], "big"), header[4:8].decode("latin-1")
            if size == 1 and len(header) == 16:
                size = int.from_bytes(header[8:16], "big")
            if size == 0:
                return
            if size < 8 or position + size > end:
                if not (name.isascii() and name.isprintable() and size >= 8):
                    raise VideoError(f"the MP4/MOV file is damaged: the box header at byte {position:,} is unreadable")
                raise VideoError(
                    f"the MP4/MOV file is truncated: its {name!r} box runs {position + size - end:,} bytes past "
                    "the end of the file"
                )
            position += size
    elif kind == "WebM/MKV file":  # the EBML header, then the Segment, whose size says where the file ends
        file.seek(0)
        head = file.read(64)
        header_size, at = _ebml_number(head, 4)
        if header_size is None:
            return
        segment = 4 + at + header_size
        if head[segment : segment + 4] == b"\x18\x53\x80\x67":
            size, length = _ebml_number(head, segment + 4)
            if size is not None and segment + 4 + length + size > end:
                raise VideoError(
                    f"the WebM/MKV file is truncated: its Segment runs {segment + 4 + length + size - end:,} bytes "
                    "past the end of the file"
                )


def _ebml_number(data: bytes, at: int) -> tuple[int | None, int]:
    """(value, length in bytes) of the EBML variable-length size at ``at``; None for 'unknown size' (all ones)."""
    if at >= len(data) or data[at] == 0:
        return None, 1
    length = 9 - data[at].bit_length()
    raw = data[at : at + length]
    value = int.from_bytes(raw, "big") & ((1 << (7 * length)) - 1)
    return (None if value == (1 << (7 * length)) - 1 else value), length


def _reason(error: av.error.FFmpegError) -> str:
    return (error.strerror or str(error)).rstrip(".").lower()


@dataclass(frozen=True)
class _Timeline:
    """Where frame i is: the timestamps (in the stream's time base) of every frame, or a start and a step."""

    count: int
    start: int = 0
    step: Fraction = Fraction(0)  # timestamps per frame (declared timelines)
    stamps: tuple[int, ...] | None = None  # every frame's timestamp, in presentation order (counted timelines)

    def stamp(self, index: int) -> int:
        return self.stamps[index] if self.stamps is not None else self.start + round(index * self.step)

    @property
    def tolerance(self) -> Fraction:  # a frame is "at" a time within half a frame's step
        if self.stamps is None:
            return self.step / 2
        gaps = np.diff(self.stamps)
        return Fraction(int(gaps.min()) if gaps.size else 1, 2)


class _Reader:
    """One load_video call: the file opened as many times as needed, and the frames it keeps."""

    def __init__(self, opener: Callable[[], io.IOBase], frames: int, side: int | None, deadline: float):
        self.opener, self.frames, self.side, self.deadline = opener, frames, side, deadline
        with opener() as file:
            self.kind = _kind(file.read(16))
            _check_complete(file, self.kind)
        self.out: np.ndarray | None = None
        self.decoded = 0

    @contextmanager
    def open(self) -> Iterator[tuple[av.container.InputContainer, av.video.stream.VideoStream]]:
        with self.opener() as file:
            try:
                container = av.open(file, "r", options={"format_whitelist": ",".join(DEMUXERS)})
            except av.error.EOFError:
                raise VideoError(f"the {self.kind} ends before its first frame: truncated, or it holds none") from None
            except av.error.FFmpegError as error:
                if self.kind == "video file":
                    raise VideoError(f"not a video file FFmpeg can read ({FORMATS}): {_reason(error)}") from None
                raise VideoError(f"the {self.kind} is corrupt or truncated: {_reason(error)}") from None
            with container:
                yield container, self.video_stream(container)

    def video_stream(self, container) -> av.video.stream.VideoStream:
        if not container.streams.video:
            audio = " (audio only)" if container.streams.audio else ""
            raise VideoError(f"the {self.kind} has no video stream{audio}")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise VideoError(f"the {self.kind}'s video stream is damaged, or in a codec FFmpeg here cannot decode")
        stream.thread_type, stream.codec_context.thread_count = "SLICE", DECODER_THREADS
        width, height = stream.codec_context.width, stream.codec_context.height
        if width and height:
            self.check_size(width, height)
        return stream

    def check_size(self, width: int, height: int) -> None:
        if min(width, height) < MIN_SIDE:
            raise VideoError(
                f"the video is {width}x{height}, below {MIN_SIDE} pixels a side: smaller than one patch of a video "
                "ViT (16 x 16), so there is nothing to explain"
            )
        if width * height > MAX_PIXELS:
            raise VideoError(
                f"the video is {width}x{height} = {width * height / 1e6:.0f} Mpx a frame, above the limit of "
                f"{MAX_PIXELS / 1e6:.0f} Mpx (8K)"
            )
        if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
            raise VideoError(
                f"the video is {width}x{height}, more than {MAX_ASPECT_RATIO} times longer than it is wide; "
                "crop it to the part you want explained"
            )

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise VideoError(
                f"sampling the video took more than {MAX_SECONDS:.0f} s ({self.decoded:,} frames decoded): it is "
                "too long or too large to read here; cut or scale it first"
            )

    # -- the plan: declared timeline, checked at the end; else counted ------------------------------------------

    def read(self) -> np.ndarray:
        with self.open() as (container, stream):
            in_order = "gif" in container.format.name.split(",")
            timeline = None if in_order else self.declared(container, stream)
            if timeline is not None and self.end_agrees(container, stream, timeline):
                if self.sample_by_seeking(container, stream, timeline):
                    return self.out
        with self.open() as (container, stream):  # the metadata lied, or is missing: count
            declared_frames = stream.frames
            stamps = self.count(container, stream)
        if declared_frames > len(stamps):
            raise VideoError(
                f"the {self.kind} is truncated or damaged: its index lists {declared_frames:,} frames, "
                f"the file holds {len(stamps):,}"
            )
        if not stamps:
            raise VideoError(f"the {self.kind}'s video stream has no frames")
        with self.open() as (container, stream):
            if in_order or None in stamps:
                self.sample_in_order(container, stream, len(stamps))
            elif not self.sample_by_seeking(container, stream, _Timeline(len(stamps), stamps=tuple(sorted(stamps)))):
                raise VideoError(f"the {self.kind} is damaged: frames its packets promise cannot be decoded")
        return self.out

    def declared(self, container, stream) -> _Timeline | None:
        """The timeline the metadata gives: frame count (or duration x rate), start and frame rate."""
        rate, base = stream.average_rate or stream.guessed_rate, stream.time_base
        if not rate or rate <= 0 or not base:
            return None
        count = stream.frames
        if count <= 0:
            if stream.duration:
                seconds = stream.duration * base
            elif container.duration:
                seconds = Fraction(container.duration, av.time_base)
            else:
                return None
            count = round(seconds * rate)
        if not 0 < count <= MAX_COUNTED:
            return None
        return _Timeline(count, stream.start_time or 0, 1 / (Fraction(rate) * Fraction(base)))

    def end_agrees(self, container, stream, timeline: _Timeline) -> bool:
        """Whether the stream really ends at the timeline's last frame: seek there and read the packets to the end
        (a keyframe interval's worth; nothing is decoded)."""
        last = timeline.stamp(timeline.count - 1)
        try:
            container.seek(last, stream=stream, backward=True)
        except av.error.FFmpegError:
            return False
        seen = None
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            if packet.pts is None:
                return False
            seen = packet.pts if seen is None else max(seen, packet.pts)
            if seen > last + 2 * timeline.step:  # the stream goes on past its declared end
                return False
            self.check_time()
        return seen is not None and abs(seen - last) <= timeline.step * 3 / 2

    def count(self, container, stream) -> list[int | None]:
        """Every packet's timestamp, in file order: the frame count without decoding."""
        stamps = []
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            stamps.append(packet.pts)
            if len(stamps) > MAX_COUNTED:
                raise VideoError(f"the video has more than {MAX_COUNTED:,} frames, above the limit")
            if len(stamps) % 1024 == 0:
                self.check_time()
        return stamps

    # -- decoding -------------------------------------------------------------------------------------------------

    def sample_by_seeking(self, container, stream, timeline: _Timeline) -> bool:
        """Decode the sampled frames, seeking when the next one is further than a keyframe interval ahead; False
        when the stream ends before a sampled frame (its declared timeline was wrong)."""
        wanted: dict[int, list[int]] = {}
        for slot, index in enumerate(sample_indices(timeline.count, self.frames)):
            wanted.setdefault(timeline.stamp(index), []).append(slot)
        half = timeline.tolerance
        decoding, position, keyframe, interval = None, None, None, 0
        for target, slots in sorted(wanted.items()):
            # keep decoding while the target is within a keyframe interval (the longest seen, or the distance since
            # the last keyframe): the keyframe before it is then probably behind us, and seeking would redo the work
            reach = max(interval, position - keyframe) if keyframe is not None else interval
            if decoding is None or target - position > reach:
                container.seek(target, stream=stream, backward=True)
                decoding, keyframe = container.decode(stream), None
            for frame in decoding:
                self.decoded += 1
                self.check_time()
                if frame.pts is None:
                    return False
                position = frame.pts
                if frame.key_frame:
                    if keyframe is not None:
                        interval = max(interval, position - keyframe)
                    keyframe = position
                if position >= target - half:
                    self.keep(frame, slots)
                    break
            else:
                return False
        return True

    def sample_in_order(self, container, stream, count: int) -> None:
        """Decode every frame up to the last sampled one, converting only the sampled (GIFs, or no timestamps)."""
        wanted: dict[int, list[int]] = {}
        for slot, index in enumerate(sample_indices(count, self.frames)):
            wanted.setdefault(index, []).append(slot)
        last = max(wanted)
        for index, frame in enumerate(container.decode(stream)):
            self.decoded += 1
            if index in wanted:
                self.keep(frame, wanted[index])
            if index == last:
                return
            if index % 64 == 0:
                self.check_time()
        raise VideoError(f"the {self.kind} is truncated or damaged: it decodes to fewer than its {count:,} frames")

    def keep(self, frame: av.VideoFrame, slots: list[int]) -> None:
        """Scale and convert a decoded frame into its slots of the output (allocated at the first frame)."""
        if self.out is None:
            self.check_size(frame.width, frame.height)
            height, width = self.output_size(frame.width, frame.height)
            needed = self.frames * height * width * 3
            if needed > MAX_OUTPUT_BYTES:
                raise VideoError(
                    f"{self.frames} frames of {width}x{height} take {needed / 1e6:,.0f} MB, above the limit of "
                    f"{MAX_OUTPUT_BYTES / 1e6:,.0f} MB: ask for fewer frames or a smaller size"
                )
            self.out = np.empty((self.frames, height, width, 3), np.uint8)
        height, width = self.out.shape[1:3]
        rgb = frame.reformat(width=width, height=height, format="rgb24", interpolation="AREA").to_ndarray()
        self.out[slots] = rgb  # (H, W, 3) into each slot that samples this frame

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """(H, W) of the returned frames: the shorter side to ``side``, or the longer side to at most WORKING_SIDE."""
        if self.side is not None:
            scale = self.side / min(width, height)
        else:
            scale = min(1.0, WORKING_SIDE / max(width, height))
        return max(1, round(height * scale)), max(1, round(width * scale))
