"""The clip on the page: every frame with its map as a strip of thumbnails, and the chosen frame large, where a click
picks the patch whose attention the map can show, with the map's colour scale under it."""

from __future__ import annotations

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.layout import TokenLayout
from vitviz.render.overlays import scale_strip
from vitviz.render.video_overlays import outline_token, token_at
from vitviz_dashboard.cache.pictures import jpeg_data_uri
from vitviz_dashboard.widgets.click_picture import click_picture

PER_ROW = 8  # thumbnails in a row of the strip: 16 frames in two rows, readable at 800 px


def draw_strip(pictures: np.ndarray, chosen: int) -> None:
    """Every frame's picture (uint8 (F, H, W, 3)), PER_ROW to a row, each captioned with its number (the chosen one
    marked ▶). A number, not "frame 12": at 800 px a thumbnail is 50 px wide."""
    per_row = min(PER_ROW, len(pictures))
    for start in range(0, len(pictures), per_row):
        columns = st.columns(per_row, gap="small")
        for column, index in zip(columns, range(start, min(start + per_row, len(pictures))), strict=False):
            column.image(pictures[index], caption=f"▶ {index}" if index == chosen else str(index), width="stretch")


def draw_large(
    picture: np.ndarray, layout: TokenLayout, frame: int, token: int | None, name: str, key: str
) -> int | None:
    """The chosen frame large (``picture``, with ``token`` outlined when given), clickable: returns the token under
    this run's click (its index in ``layout``), or None."""
    if token is not None and layout.frames[token, 0] <= frame <= layout.frames[token, 1]:
        picture = outline_token(picture, layout, token)
    click = click_picture(jpeg_data_uri(Image.fromarray(picture), quality=90), f"frame {frame} of {name}", key=key)
    if not click or not click.get("width") or not click.get("height"):
        return None
    height, width = layout.image_size
    x = min(max(click["x"] * width / click["width"], 0.0), width - 1e-6)
    y = min(max(click["y"] * height / click["height"], 0.0), height - 1e-6)
    return token_at(layout, frame, x, y)


def draw_scale(colormap: str, low: float, high: float, label: str) -> None:
    """The colour scale of the clip's map: one for every frame."""
    st.image(scale_strip(colormap, low, high, 280, label), width="content")
