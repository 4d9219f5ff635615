"""The knock-out curves, on demand: image tokens taken out of the answer's view in the order of a map (most relevant
first, and least relevant first) and a log-probability followed (vitviz.vlm.knockout). With a token chosen, its own
log-probability in the order of its own map; and, for any choice, the answer's summed log-probability in the order
of the whole answer's map (the same layers and head). Each chart names what it measures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from vitviz.render.answers import curve_figure, token_name
from vitviz.vlm import Answer
from vitviz_dashboard.ask.maps import MapChoice, map_caption, map_values
from vitviz_dashboard.cache.vlm import AnswerKey, knockout

RUN = "ask|knockout"  # the button
WANTED = "ask|knockout_maps"  # the (answer key, chosen map's caption) whose curves were asked for in this session
CHART = "ask|knockout_chart"  # + "|token" or "|answer": each curve's chart
ORDERS = {"most": "most relevant first", "least": "least relevant first"}
STEPS = 2 * 10  # passes of the model per curve pair: both orders at CHEFER_FRACTIONS' ten fractions


@dataclass(frozen=True)
class Measured:
    """One pair of curves: the log-probability of answer token ``token`` (None: the whole answer's, summed),
    knocked out in the order of ``scores`` (that token's map, or the whole answer's), the map described by ``map``."""

    token: int | None
    scores: np.ndarray
    map: str


def measured_quantity(answer: Answer, token: int | None) -> str:
    """What a curve follows, in words: "log-probability of token 3 'cat'" or "summed log-probability of the answer"."""
    if token is None:
        return "summed log-probability of the answer"
    return f"log-probability of {token_name(answer, token)}"


def measured(key: AnswerKey, answer: Answer, token: int | None, choice: MapChoice) -> list[Measured]:
    """The curves the choice asks for: the token's (with a token chosen) and the whole answer's, each with the map
    it is ordered by; none where there is no map yet (the whole answer's relevance before it is asked for)."""
    tokens = [token, None] if token is not None else [None]
    found = [(t, map_values(key, answer, t, choice)) for t in tokens]
    return [Measured(t, scores, map_caption(answer, t, choice)) for t, scores in found if scores is not None]


def draw_knockout(key: AnswerKey, answer: Answer, token: int | None, choice: MapChoice) -> None:
    """A button that runs the curves of the chosen ``token`` (None: the whole answer) and of the whole answer, each
    in the order of its own map as ``choice`` draws it; once run for a map, its curves are drawn whenever that map is
    chosen again."""
    st.subheader("Knock-out curves")
    curves = measured(key, answer, token, choice)
    if not curves:
        st.caption("Choose a map above: the curve removes image tokens in its order.")
        return
    wanted = st.session_state.setdefault(WANTED, set())
    if (key, curves[0].map) not in wanted:
        steps = STEPS * len(curves)
        order = "this map's order" if len(curves) == 1 else "the maps' order"
        if not st.button(f"Knock out image tokens in {order} ({steps} passes of the model)", key=RUN):
            st.caption("Curves: " + "; ".join(measured_quantity(answer, c.token) for c in curves) + ".")
            return
        wanted.add((key, curves[0].map))
    if token is not None and len(curves) == 1:
        st.caption(
            "The whole answer's curve needs the whole answer's relevance: choose 'all tokens' and compute it to "
            "order that curve too."
        )
    for curve in curves:
        draw_curves(key, answer, curve)


def draw_curves(key: AnswerKey, answer: Answer, curve: Measured) -> None:
    """One chart: both orders of one map, the y axis named by what is measured, and a caption naming the map."""
    quantity = measured_quantity(answer, curve.token)
    pair = knockout(key, np.asarray(curve.scores, dtype=np.float32), curve.token, _answer=answer)
    named = {f"{ORDERS[order]} (area {c.area:.3g})": (c.fractions, c.logprob) for order, c in pair.items()}
    which = "answer" if curve.token is None else "token"
    st.plotly_chart(curve_figure(named, quantity), key=f"{CHART}|{which}")
    st.caption(
        f"The {quantity}, as image tokens are blocked from the view of every position after the image in the order "
        f"of the map: {curve.map}. A faithful map makes it fall fast when its highest tokens go first (a low area) "
        "and slowly when its lowest go first (a high area)."
    )
