"""The Video page's downloads: the overlay as an animated GIF and as an MP4 (vitviz.render.video_overlays), and the
arrays as npz: the frames the model read, the map per token and painted per frame, the tokens' boxes and frames, the
prediction, and the chosen block's attention between frames. Each file is built only when its button is clicked."""

from __future__ import annotations

import io

import numpy as np
import streamlit as st

from vitviz.render.video_overlays import gif_bytes, mp4_bytes


def arrays_npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def draw_downloads(stem: str, pictures: np.ndarray, arrays, fps: float) -> None:
    """Three buttons: the overlay ``pictures`` (uint8 (F, H, W, 3)) as GIF and MP4 at ``fps``, and ``arrays`` (a
    function giving the npz's arrays by name) as npz."""
    stem = stem.rsplit(".", 1)[0].replace(" ", "_").replace(":", "")
    gif, mp4, npz = st.columns(3)
    gif.download_button(
        "Overlay (GIF)",
        lambda: gif_bytes(pictures, fps),
        f"{stem}_overlay.gif",
        "image/gif",
        icon=":material/download:",
        help="Every frame with its map, looping",
    )
    mp4.download_button(
        "Overlay (MP4)",
        lambda: mp4_bytes(pictures, fps),
        f"{stem}_overlay.mp4",
        "video/mp4",
        icon=":material/download:",
        help="Every frame with its map, H.264",
    )
    npz.download_button(
        "Arrays (npz)",
        lambda: arrays_npz(arrays()),
        f"{stem}_maps.npz",
        "application/octet-stream",
        icon=":material/download:",
        help="frames, map (per token), map_frames (per pixel), token_boxes, token_frames, probabilities, "
        "class_names, frame_attention and readout_per_frame of the chosen layer",
    )
