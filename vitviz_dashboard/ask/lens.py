"""The logit lens over the photo (Neo et al. 2024): at a chosen layer, the word each image token reads as through the
language model's final norm and unembedding; where the chosen token's own word comes out on top. For Qwen3-VL, whose
first layers add deepstack features of the vision tower to the image tokens, a choice of the hidden state read: before
they are added (as output_hidden_states reports it) or after (what the next layer reads)."""

from __future__ import annotations

import collections

import numpy as np
import streamlit as st
from PIL import Image

from vitviz.render.answers import map_over_photo, map_raster, tile_name, token_name
from vitviz.vlm import Answer
from vitviz.vlm.lens import has_deepstack
from vitviz_dashboard.ask.maps import draw_scale
from vitviz_dashboard.cache.vlm import AnswerKey, lens_words

TOP_K = 5
MOST_COMMON = 12  # words listed in the table
LAYER = "ask|lens_layer"
DEEPSTACK = "ask|lens_deepstack"
DEEPSTACK_OPTIONS = {"before": "before the deepstack features", "after": "after them (what the next layer reads)"}


def draw_lens(
    key: AnswerKey, answer: Answer, photo: Image.Image, token: int | None, colormap: str, alpha: float
) -> None:
    """The layer slider, the top-1 word's probability over the photo (or, for a chosen token, where its own word is
    among each image token's top words), and the most common top words."""
    st.subheader("Logit lens on the image tokens")
    layers = answer.model.num_layers
    if st.session_state.get(LAYER) not in range(layers + 1):
        st.session_state[LAYER] = layers
    layer = st.slider(
        "Hidden state after layer",
        0,
        layers,
        key=LAYER,
        help="0: the image features as they enter the language model; the last: its own prediction at each "
        "image token.",
    )
    deepstack = "before"
    if has_deepstack(answer):
        deepstack = st.radio(
            "Hidden state read",
            list(DEEPSTACK_OPTIONS),
            format_func=DEEPSTACK_OPTIONS.__getitem__,
            horizontal=True,
            key=DEEPSTACK,
            help="Qwen3-VL adds features of its vision tower's intermediate blocks to the image tokens after its "
            "first layers. Before: the layer's output, as output_hidden_states reports it. After: the sum, what "
            "the next layer reads. Elsewhere the two are the same.",
        )
    lens = lens_words(key, int(layer), TOP_K, deepstack, _answer=answer)
    word = None if token is None else answer.model.tokenizer.decode([answer.token_ids[token]]).strip()
    if word:
        hits = np.array([[w.strip() == word for w in row] for row in lens.words])
        values = np.where(hits, lens.probabilities, 0.0).sum(axis=1)
        caption = (
            f"Probability of {token_name(answer, token)} among each image token's top {TOP_K} words at layer {layer}"
        )
        if not hits.any():
            st.info(
                f"'{word}' is among the top {TOP_K} words of no image token at layer {layer}: the map is empty. "
                "Try another layer, or no token (the answer's mean) for each image token's own top word."
            )
    else:
        values = lens.probabilities[:, 0]
        caption = f"Each image token's top word's probability at layer {layer}"
    if has_deepstack(answer):
        caption += (
            ", read before the deepstack features are added"
            if deepstack == "before"
            else ", read after the deepstack features are added"
        )
    tiles = tile_name(answer, None)
    raster = map_raster(answer, values)
    # beside the words as the map is beside the share chart: never wider than the map above it. At the photo's own
    # size (capped by the column): stretched across a wide page, a small photo was blurred
    picture, words = st.columns([3, 2])
    with picture:
        st.image(
            map_over_photo(photo, raster, colormap, alpha),
            caption=caption + (f", {tiles}" if tiles else ""),
            width="content",
        )
        draw_scale(raster, colormap)
    counts = collections.Counter(w.strip() or repr(w) for w in lens.words[:, 0])
    rows = [{"top word": w, "image tokens": n} for w, n in counts.most_common(MOST_COMMON)]
    words.dataframe(rows, hide_index=True, key="ask|lens_table")
