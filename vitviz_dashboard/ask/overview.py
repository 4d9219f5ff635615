"""The layer x head overview of the chosen token: per language-model layer and head, its share of attention on the
image tokens or its largest weight on one image token, as a heatmap; a click on a cell shows that layer and head in
the map (``apply_click``, called before the map's controls are drawn, sets them)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.render.answers import layer_head_figure, token_name
from vitviz.vlm import Answer
from vitviz_dashboard.ask.maps import MapChoice

CHART = "ask|overview_chart"
STATISTIC = "ask|overview_statistic"
APPLIED = "ask|overview_applied"  # the click last applied to the map's controls
STATISTICS = ("image share", "largest weight on one image token")


def chart_points(event) -> list[dict]:
    """The selected points of st.plotly_chart's event (or of a plain dict a test put in the session state)."""
    selection = (event or {}).get("selection") or {}
    return list(selection.get("points") or [])


def layer_head_values(answer: Answer, token: int | None, statistic: str) -> np.ndarray:
    """float32 (L, H): the token's (None: the answer's mean) image share, or its largest weight on one image token,
    per layer and head."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}; got {statistic!r}")
    if statistic == "image share":
        per_token = answer.image_share  # (n, L, H)
    else:
        per_token = answer.image_attention.max(axis=-1)  # (n, L, H)
    return (per_token.mean(axis=0) if token is None else per_token[token]).astype(np.float32)


def apply_click(answer: Answer) -> None:
    """A new click on a cell of the overview: the map shows attention at that layer alone and that head."""
    points = chart_points(st.session_state.get(CHART))
    cells = [tuple(int(v) for v in p["customdata"][:2]) for p in points if p.get("customdata") is not None]
    if not cells or cells == st.session_state.get(APPLIED):
        return
    st.session_state[APPLIED] = cells
    layer, head = cells[0]
    _, layers, heads, _ = answer.image_attention.shape
    if 0 <= layer < layers and 0 <= head < heads:
        st.session_state["ask|kind"] = "attention"
        st.session_state["ask|layers"] = (layer, layer)
        st.session_state["ask|head"] = head


def draw_overview(answer: Answer, token: int | None, choice: MapChoice) -> None:
    """The heatmap of the chosen token, the map's layer and head outlined when it shows one of each."""
    st.subheader("Layers × heads")
    statistic = st.radio("Per layer and head", STATISTICS, horizontal=True, key=STATISTIC)
    values = layer_head_values(answer, token, statistic)
    first, last = choice.layers
    chosen = (first, choice.head) if choice.kind == "attention" and first == last and choice.head is not None else None
    title = "share" if statistic == "image share" else "weight"
    st.plotly_chart(layer_head_figure(values, title, chosen), on_select="rerun", selection_mode="points", key=CHART)
    who = "the answer's tokens (their mean)" if token is None else token_name(answer, token)
    what = (
        "share of the attention on all the image tokens"
        if statistic == "image share"
        else "largest attention weight on a single image token"
    )
    st.caption(
        f"The {what} of {who}, per layer (up) and head (across). Click a cell to show that layer and head "
        "in the map above."
    )
