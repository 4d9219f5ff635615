"""The chosen token's map over the photo: attention (a layer range, one head or the heads' mean) or relevance
(Chefer et al.'s, over every layer), drawn where each tile's pixels came from, one tile or all of them. The whole
answer's relevance is the mean over its tokens of each token's relevance (one backward pass per token, run on demand:
a button)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.render.answers import map_over_photo, map_range, map_raster, tile_name, token_name
from vitviz.render.overlays import COLORMAPS, scale_strip
from vitviz.vlm import Answer, token_attention
from vitviz_dashboard.cache.vlm import AnswerKey, answer_relevance, token_relevance
from vitviz_dashboard.state import kept

KINDS = ("attention", "relevance")
ALL = -1  # every head (their mean), every tile
COLORMAP, ALPHA = kept("ask|colormap"), kept("ask|alpha")  # kept through a visit to another page
SCALE_WIDTH = 256  # pixels: a map's colour scale on the page
RELEVANCE_ALL = "ask|relevance_all"  # the button for the whole answer's relevance
RELEVANCE_ASKED = "ask|relevance_asked"  # the AnswerKeys whose whole-answer relevance was asked for in this session


@dataclass(frozen=True)
class MapChoice:
    """What the map shows: attention or relevance, the layers (first, last), the head (None: their mean), the tile
    (None: every tile, their mean where they overlap)."""

    kind: str
    layers: tuple[int, int]
    head: int | None
    tile: int | None


def fitted(key: str, default, options) -> None:
    """Put ``default`` in the session state under ``key`` unless it holds one of ``options`` (another model's layer
    count, another answer's tiles)."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = default


def map_controls(answer: Answer, token: int | None) -> MapChoice:
    """The map's controls, in one row: kind, layers, head, tile."""
    _, layers, heads, _ = answer.image_attention.shape
    # two rows of two: four in one row cut the head's name at 800 px
    kind_box, layer_box = st.columns([1, 1.4])
    head_box, tile_box = st.columns(2)
    kind = kind_box.radio(
        "Map",
        KINDS,
        horizontal=True,
        key="ask|kind",
        help="attention: the weights from the position that predicts the token to each image token. relevance: "
        "Chefer et al. 2021b's class-specific relevance of the token's logit (every layer, gradients times attention).",
    )
    pairs = [(a, b) for a in range(layers) for b in range(a, layers)]
    fitted("ask|layers", (0, layers - 1), pairs)
    chosen_layers = (
        layer_box.slider("Layers", 0, layers - 1, key="ask|layers", disabled=kind == "relevance")
        if layers > 1
        else (0, 0)
    )
    head_options = [ALL, *range(heads)]
    fitted("ask|head", ALL, head_options)
    head = head_box.selectbox(
        "Head",
        head_options,
        format_func=lambda h: "mean of heads" if h == ALL else f"head {h}",
        key="ask|head",
        disabled=kind == "relevance",
    )
    tile_options = [ALL, *range(len(answer.tiles))]
    fitted("ask|tile", ALL, tile_options)
    tile = tile_box.selectbox(
        "Tile",
        tile_options,
        format_func=lambda t: "all tiles" if t == ALL else f"{t}: {answer.tiles[t].name}",
        key="ask|tile",
        disabled=len(answer.tiles) == 1,
        help="Where tiles overlap (a global image and its splits), 'all tiles' shows their mean.",
    )
    return MapChoice(
        kind,
        tuple(int(v) for v in chosen_layers),
        None if head == ALL else int(head),
        None if tile == ALL else int(tile),
    )


def map_caption(answer: Answer, token: int | None, choice: MapChoice) -> str:
    """What the map shows, in words: the token by its index and text, the layers and head, and the tile where the
    model splits the photo into tiles (the map's caption; the knock-out curve and the downloads name the map by it)."""
    what = token_name(answer, token)
    tile = tile_name(answer, choice.tile)
    where = f", {tile}" if tile else ""
    if choice.kind == "relevance" and token is None:
        count = len(answer.token_ids)
        return f"Relevance of the whole answer: the mean of its {count} tokens' relevance (Chefer et al. 2021b){where}"
    if choice.kind == "relevance":
        return f"Relevance of {what} (Chefer et al. 2021b, every layer){where}"
    first, last = choice.layers
    head = "the heads' mean" if choice.head is None else f"head {choice.head}"
    return f"Attention of {what} on the image, layers {first} to {last}, {head}{where}"


def map_fields(answer: Answer, token: int | None, choice: MapChoice, caption: str) -> dict[str, np.ndarray]:
    """What attention.npz says of its ``shown_map``: its caption (``shown_map_name``), and the same in fields:
    its kind, the token (-1: the whole answer), the layers (first, last), the head (-1: their mean) and the tile
    (-1: every tile)."""
    layers = (0, answer.image_attention.shape[1] - 1) if choice.kind == "relevance" else choice.layers
    head = None if choice.kind == "relevance" else choice.head
    return {
        "shown_map_name": np.array(caption),
        "shown_map_kind": np.array(choice.kind),
        "shown_map_token": np.array(-1 if token is None else token, dtype=np.int64),
        "shown_map_layers": np.array(layers, dtype=np.int64),
        "shown_map_head": np.array(-1 if head is None else head, dtype=np.int64),
        "shown_map_tile": np.array(-1 if choice.tile is None else choice.tile, dtype=np.int64),
    }


def map_values(key: AnswerKey, answer: Answer, token: int | None, choice: MapChoice) -> np.ndarray | None:
    """The chosen map's value per image token (N,); None for the whole answer's relevance until it is asked for
    (a backward pass per token)."""
    if choice.kind == "attention":
        return token_attention(answer, token, choice.layers, choice.head)
    if token is None:
        if key not in st.session_state.get(RELEVANCE_ASKED, set()):
            return None
        return answer_relevance(key, _answer=answer)
    return token_relevance(key, token, _answer=answer)


def draw_map(
    key: AnswerKey,
    answer: Answer,
    photo: Image.Image,
    token: int | None,
    choice: MapChoice,
    colormap: str,
    alpha: float,
) -> np.ndarray | None:
    """The map over the photo, with its colour scale; returns the values drawn (None when there is no map)."""
    if choice.kind == "relevance" and token is None and key not in st.session_state.get(RELEVANCE_ASKED, set()):
        count = len(answer.token_ids)
        st.caption(
            f"The whole answer's relevance is the mean over its {count} tokens of each token's relevance: one "
            "backward pass per token (those already shown cost nothing)."
        )
        if not st.button(f"Compute the whole answer's relevance ({count} backward passes)", key=RELEVANCE_ALL):
            return None
        st.session_state.setdefault(RELEVANCE_ASKED, set()).add(key)
    values = map_values(key, answer, token, choice)
    raster = map_raster(answer, values, choice.tile)
    if np.isnan(raster).all():
        st.info("This tile covers no pixel of the photo.")
        return None
    caption = map_caption(answer, token, choice)
    st.image(map_over_photo(photo, raster, colormap, alpha), caption=caption, width="stretch")
    draw_scale(raster, colormap, "dimmed: pixels no chosen tile saw")
    return values


def draw_scale(raster: np.ndarray, colormap: str, note: str = "") -> None:
    """A map's colour scale under it: the colours and the values of their two ends (scale_strip), said in its
    caption too."""
    low, high = map_range(raster)
    caption = f"Colour scale: {low:.3g} to {high:.3g}" + (f"; {note}" if note else "")
    st.image(scale_strip(colormap, low, high, SCALE_WIDTH), caption=caption, width=SCALE_WIDTH)


def display_controls() -> tuple[str, float]:
    """The sidebar's colormap and opacity for the Ask page."""
    st.sidebar.header("Display")
    colormap = st.sidebar.selectbox("Colormap", COLORMAPS, key=COLORMAP)
    st.session_state.setdefault(ALPHA, 0.55)  # the default in the state, not the widget (Streamlit warns of both)
    alpha = st.sidebar.slider("Overlay opacity", 0.0, 1.0, step=0.05, key=ALPHA)
    return colormap, alpha
