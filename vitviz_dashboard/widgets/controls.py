"""Small controls the tabs share: a slider over an index, the class picker, the colour legend under an overlay, and
a re-run of the current tab alone."""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from vitviz_dashboard.cache.pictures import colour_bar_png
from vitviz_dashboard.names import class_name, classes_by_probability, is_zero_shot
from vitviz_dashboard.page import Page, Settings


def rerun_tab() -> None:
    """Re-run only the current tab during the tab's own (fragment) rerun; during a full run, the page."""
    try:
        st.rerun(scope="fragment")
    except StreamlitAPIException:  # Streamlit allows the fragment scope only in fragment reruns
        st.rerun()


def index_slider(label: str, count: int, key: str, start: int = 0) -> int:
    """A slider over start..start+count-1 (the numbers the page names the choices by), returning the position
    0..count-1; with a single choice there is nothing to slide (Streamlit refuses min == max)."""
    if count <= 1:
        return 0
    return st.slider(label, start, start + count - 1, key=key) - start


def class_picker(page: Page, label: str = "Explain the class", name: str = "class", default: int | None = None) -> int:
    """The class a tab explains, chosen once for the Class-specific and Faithfulness tabs (one widget key for both;
    only the open tab draws it): by default the top prediction, the classes ordered by probability."""
    probabilities = page.analysis.probabilities
    order = classes_by_probability(probabilities)
    default = order[0] if default is None else default
    what = "prompt" if is_zero_shot(page.model) else "class"
    return st.selectbox(
        label.replace("class", what),
        order,
        key=page.widget_key(name, default, per_image=True, options=order),
        format_func=lambda i: f"{class_name(page.model, i)} ({probabilities[i]:.1%})",
        help="Shared by the Class-specific and Faithfulness tabs.",
    )


def colour_legend(settings: Settings, low: float, high: float, what: str) -> None:
    """The colour scale of the overlay above: a strip of the colormap, and what its two ends stand for."""
    # at its own 384 px (narrower in a narrower column): stretched across a wide page, a strip grew 60 px tall
    st.image(
        colour_bar_png(settings.colormap),
        width="content",
        caption=f"Colours: {what}, from {low:.3g} (left of the strip) to {high:.3g} (right).",
    )
