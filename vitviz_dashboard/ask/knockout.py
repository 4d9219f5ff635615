"""The knock-out curve, on demand: image tokens taken out of the answer's view in the order of the map shown (most
relevant first, and least relevant first) and the answer's log-probability followed (vitviz.vlm.knockout)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from vitviz.render.answers import curve_figure
from vitviz.vlm import Answer
from vitviz_dashboard.cache.vlm import AnswerKey, knockout

RUN = "ask|knockout"  # the button
WANTED = "ask|knockout_maps"  # the maps (answer key, map's caption) whose curves were asked for in this session
ORDERS = {"most": "most relevant first", "least": "least relevant first"}


def draw_knockout(key: AnswerKey, answer: Answer, scores: np.ndarray | None, what: str) -> None:
    """A button that runs the curves for the map shown (``scores``, described by ``what``); once run for a map, its
    curves are drawn whenever that map is shown again."""
    st.subheader("Knock-out curve")
    if scores is None:
        st.caption("Choose a map above: the curve removes image tokens in its order.")
        return
    wanted = st.session_state.setdefault(WANTED, set())
    if (key, what) not in wanted:
        steps = 2 * 10
        if not st.button(f"Knock out image tokens in this map's order ({steps} passes of the model)", key=RUN):
            st.caption(f"Map: {what}.")
            return
        wanted.add((key, what))
    curves = knockout(key, np.asarray(scores, dtype=np.float32), _answer=answer)
    named = {
        f"{ORDERS[order]} (area {curve.area:.3g})": (curve.fractions, curve.logprob) for order, curve in curves.items()
    }
    st.plotly_chart(curve_figure(named, "the answer's log-probability"), key="ask|knockout_chart")
    st.caption(
        f"Map: {what}. Image tokens are blocked from the view of every position after the image, in the map's order; "
        "a faithful map makes the answer's log-probability fall fast when its highest tokens go first (a low area) "
        "and slowly when its lowest go first (a high area)."
    )
