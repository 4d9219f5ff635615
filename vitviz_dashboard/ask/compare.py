"""Two tokens side by side on one colour scale: the map the controls choose (attention at the layers and head, or
relevance), for two tokens of the answer (or the whole answer), coloured from the lower of their two lows to the
higher of their two highs, so equal colours are equal values."""

from __future__ import annotations

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.render.answers import map_over_photo, map_raster
from vitviz.vlm import Answer
from vitviz_dashboard.ask.maps import MapChoice, draw_scale, map_caption, map_values
from vitviz_dashboard.ask.tokens import ALL, token_labels
from vitviz_dashboard.cache.vlm import AnswerKey

FIRST, SECOND = "ask|compare_first", "ask|compare_second"
RELEVANCE = "ask|compare_relevance"  # the button: relevance costs a backward pass per token, so it waits for a click
RELEVANCE_ASKED = "ask|compare_relevance_asked"  # the AnswerKeys whose relevance was compared in this session


def draw_compare(
    key: AnswerKey, answer: Answer, photo: Image.Image, choice: MapChoice, colormap: str, alpha: float
) -> None:
    """Two pickers and the two maps on one scale, with that scale under them."""
    st.subheader("Two tokens on one colour scale")
    count = len(answer.token_ids)
    options = [ALL, *range(count)]
    labels = {k: v.replace("\\", "") for k, v in token_labels(answer).items()}
    for name, default in ((FIRST, 0), (SECOND, min(1, count - 1))):
        if st.session_state.get(name) not in options:
            st.session_state[name] = default
    left, right = st.columns(2)
    picked = [
        box.selectbox(label, options, format_func=lambda t: f"{t}: {labels[t]}" if t != ALL else labels[t], key=name)
        for box, label, name in ((left, "Left token", FIRST), (right, "Right token", SECOND))
    ]
    tokens = [None if t == ALL else int(t) for t in picked]
    asked = st.session_state.setdefault(RELEVANCE_ASKED, set())
    if choice.kind == "relevance" and key not in asked:
        if not st.button("Compare their relevance (a backward pass per token)", key=RELEVANCE):
            return
        asked.add(key)
    found = [map_values(key, answer, t, choice) for t in tokens]
    if any(v is None for v in found):
        st.info("The whole answer's relevance is computed on demand: choose 'all tokens' above and compute it.")
        return
    rasters = [map_raster(answer, v, choice.tile) for v in found]
    if any(np.isnan(r).all() for r in rasters):
        st.info("This tile covers no pixel of the photo.")
        return
    low = float(min(np.nanmin(r) for r in rasters))
    high = float(max(np.nanmax(r) for r in rasters))
    for box, token, raster in zip((left, right), tokens, rasters, strict=True):
        box.image(
            map_over_photo(photo, raster, colormap, alpha, (low, high)),
            caption=map_caption(answer, token, choice),
            width="content",  # at most the photo's own size: stretched across a 1920 px page, a small photo blurs
        )
    draw_scale(np.array([low, high], dtype=np.float32), colormap, "one scale for both maps")
