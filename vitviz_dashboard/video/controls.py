"""The Video page's controls: which map (rollout, relevance of a class, or a clicked patch's attention), the block
and head, and the frame shown large; and the clicked token, kept per model and video."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from vitviz.layout import TokenLayout
from vitviz_dashboard.state import kept

MAPS = {
    "Rollout": "rollout",
    "Relevance": "relevance",
    "Clicked patch": "patch",
    "Clicked patch over time": "patch_time",  # a divided block's temporal half (TimeSformer): its patch, every frame
}
MEAN = "mean of heads"
MAP, TARGET, LAYER, HEAD, FRAME = (kept(f"video|{name}") for name in ("map", "target", "layer", "head", "frame"))
SCOPE = "video|scope"  # (model spec, video digest) the class picker was last drawn for
TOKEN = "video|token"  # (model spec, video digest, the clicked token's index in the layout)
CLICKED = "video|clicked"  # set by a click: the next run shows the clicked patch's map


@dataclass(frozen=True)
class Choice:
    """What the page shows: the map's kind ("rollout", "relevance", "patch"), the relevance's class, the block and
    head (None: the mean of the heads), and the frame shown large."""

    method: str
    target: int | None
    layer: int
    head: int | None
    frame: int


def _bounded(key: str, default, options) -> None:
    """Put ``default`` in ``key`` when it holds nothing, or a value that this model or clip does not have."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = default


def map_controls(
    layers: int, heads: int, frames: int, classes: list[tuple[int, str, float]], scope: tuple, divided: bool = False
) -> Choice:
    """The map, class, block, head and frame pickers in one row, then the frame slider; ``classes`` the top
    predictions (index, name, probability) the relevance may be of. The class goes back to the top one when
    ``scope`` (the model and the video) changes. A model of ``divided`` blocks (TimeSformer) attends over space and
    over time in two halves: its clicked patch has both maps."""
    if st.session_state.pop(CLICKED, False):  # a click on the large frame: show what the patch attends to
        st.session_state[MAP] = "Clicked patch"
    if st.session_state.get(SCOPE) != scope:
        st.session_state[SCOPE] = scope
        st.session_state.pop(TARGET, None)
    maps = [
        name
        for name, method in MAPS.items()
        if (classes or method != "relevance") and (divided or method != "patch_time")  # a backbone: no class
    ]
    _bounded(MAP, "Rollout", maps)
    _bounded(LAYER, layers - 1, range(layers))
    head_options = [MEAN, *range(heads)]
    _bounded(HEAD, MEAN, head_options)
    _bounded(FRAME, 0, range(frames))
    names = {index: f"{name} ({chance:.1%})" for index, name, chance in classes}
    _bounded(TARGET, classes[0][0] if classes else None, names or [None])
    kind, target, layer, head = st.columns([3, 4, 2, 2])
    method = MAPS[kind.selectbox("Map", maps, key=MAP, help=MAP_HELP)]
    chosen = target.selectbox(
        "Class (relevance)",
        list(names) or [None],
        format_func=lambda index: names.get(index, "(a backbone: no classes)"),
        key=TARGET,
        disabled=method != "relevance" or not classes,
        help="The class whose relevance is shown; the top five predictions",
    )
    block = layer.selectbox(
        "Layer", range(layers), key=LAYER, help="The block of the clicked patch's attention and of the frames x frames "
        "heatmap"
    )  # fmt: skip
    fused = head.selectbox("Head", head_options, key=HEAD, format_func=str)
    frame = st.slider("Frame", 0, frames - 1, key=FRAME, help="The frame shown large, where a click picks a patch")
    return Choice(method, chosen if method == "relevance" else None, block, None if fused == MEAN else fused, frame)


MAP_HELP = (
    "Rollout: how much each tubelet flows into what the head reads, through every block. Relevance: the class's "
    "relevance (Chefer et al. 2021). Clicked patch: what the patch you click on the large frame attends to, in the "
    "chosen layer and head, over every frame; a divided block (TimeSformer) attends within the patch's own frame "
    "there, and over its own position in every frame in its other half: Clicked patch over time."
)


def clicked_token(spec: str, video: str, layout: TokenLayout, frame: int) -> int:
    """The clicked token of this model and video, or the patch at the centre of ``frame`` until one is clicked."""
    kept_spec, kept_video, token = st.session_state.get(TOKEN, (None, None, None))
    if (kept_spec, kept_video) == (spec, video) and token is not None and token < len(layout):
        return token
    return centre_token(layout, frame)


def centre_token(layout: TokenLayout, frame: int) -> int:
    """The patch token at the centre of input frame ``frame``."""
    patches = layout.patch_indices
    boxes, spans = layout.boxes[patches], layout.frames[patches]
    y, x = layout.image_size[0] / 2, layout.image_size[1] / 2
    centres = (boxes[:, 0] + boxes[:, 2]) / 2 - x, (boxes[:, 1] + boxes[:, 3]) / 2 - y
    distance = np.hypot(*centres) + np.where((spans[:, 0] <= frame) & (frame <= spans[:, 1]), 0, np.inf)
    return int(patches[int(np.argmin(distance))])


def remember_token(spec: str, video: str, token: int) -> None:
    """Keep the clicked token for this model and video, and show its map from the next run on."""
    st.session_state[TOKEN] = (spec, video, token)
    st.session_state[CLICKED] = True
