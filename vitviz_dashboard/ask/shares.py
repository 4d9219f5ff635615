"""The image-share chart: per language-model layer, how much of the chosen token's attention goes to the image, to
the text and to the first token (the attention sink)."""

from __future__ import annotations

import streamlit as st

from vitviz.render.answers import image_share_figure
from vitviz.vlm import Answer


def draw_shares(answer: Answer, token: int | None, head: int | None) -> None:
    """The chart for ``token`` (None: the answer's mean) and ``head`` (None: the heads' mean)."""
    # short: beside the map, in two fifths of an 800 px page, the longer "Where the attention goes, layer by layer"
    # took five lines
    st.subheader("Attention by layer")
    st.plotly_chart(image_share_figure(answer, token, head), key="ask|shares")
    st.caption(
        "Per layer, the share of the attention (from the position that predicts the token) on the image tokens, on "
        "the other text tokens, and on the first token of the sequence, where many heads park attention they do not "
        "use (the attention sink)."
    )
