"""The Ask page's downloads: answer.json and attention.npz as `vitviz ask` writes them (with the map shown, and what it
is), and the map drawn over the photo as a PNG with its colour scale. Each file is built only when its button is
clicked."""

from __future__ import annotations

import io
import json

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.render.answers import answer_arrays, answer_record
from vitviz.vlm import Answer


def answer_json(answer: Answer, spec: str, image: str) -> bytes:
    return (json.dumps(answer_record(answer, image=image, model=spec), indent=1, ensure_ascii=False) + "\n").encode()


def attention_npz(answer: Answer, shown: tuple[np.ndarray, dict[str, np.ndarray]] | None) -> bytes:
    """answer_arrays, and with ``shown`` (the map's value per image token, and what says which map it is:
    ``shown_map_name`` and its fields, maps.map_fields) ``shown_map`` and those."""
    buffer = io.BytesIO()
    arrays = answer_arrays(answer)
    if shown is not None:
        values, about = shown
        arrays["shown_map"] = np.asarray(values, dtype=np.float32)
        arrays.update(about)
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def png(picture: Image.Image) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def draw_downloads(
    answer: Answer, spec: str, image: str, shown: tuple[np.ndarray, dict[str, np.ndarray]] | None, picture
) -> None:
    """Three buttons: the answer's record, its arrays (with the map shown, per image token, and which map it is:
    ``shown``, as attention_npz takes it), the map's picture (``picture``: a function that draws it, or None when
    there is no map)."""
    stem = image.rsplit(".", 1)[0].replace(" ", "_")
    left, middle, right = st.columns(3)
    left.download_button(
        "answer.json",
        lambda: answer_json(answer, spec, image),
        f"{stem}_answer.json",
        "application/json",
        icon=":material/download:",
        help="The question, the answer, its tokens and their shares per layer",
    )
    middle.download_button(
        "attention.npz",
        lambda: attention_npz(answer, shown),
        f"{stem}_attention.npz",
        "application/octet-stream",
        icon=":material/download:",
        help="image_attention, image_token_grid, the tiles' boxes, and the map shown (shown_map) with its name "
        "(shown_map_name)",
    )
    if picture is not None:
        right.download_button(
            "Map (PNG)",
            lambda: png(picture()),
            f"{stem}_map.png",
            "image/png",
            icon=":material/download:",
            help="The map shown, over the photo, with its colour scale and value range",
        )
