"""A picture that reports where it was clicked, and the patch a click fell on (Click a patch, Features' matches).

Streamlit's own images report no clicks, and a Plotly chart has a fixed height (a photo in one floats in blank
space in a narrow column). This is a Streamlit component (``st.components.v2``, drawn in the page itself, not
in an iframe): an <img> as wide as its column, which follows the column when the window or the sidebar changes,
and sends each click as a trigger value, which Streamlit clears after the run it starts.
"""

from __future__ import annotations

import streamlit as st

from vitviz.analysis import ImageAnalysis
from vitviz.render import overlays

_JS = """
export default function (component) {
    const { data, parentElement, setTriggerValue } = component;
    let picture = parentElement.querySelector("img");
    if (!picture) {
        picture = document.createElement("img");
        parentElement.appendChild(picture);
    }
    if (picture.src !== data.src) picture.src = data.src;
    picture.alt = data.alt;
    picture.onclick = (event) => {
        const shown = picture.getBoundingClientRect();
        setTriggerValue("click", {x: event.clientX - shown.left, y: event.clientY - shown.top,
                                  width: shown.width, height: shown.height});
    };
}
"""
_CSS = "img { display: block; width: 100%; height: auto; cursor: crosshair; border-radius: 0.5rem; }"
_PICTURE = st.components.v2.component("vitviz_click_picture", js=_JS, css=_CSS)


def click_picture(source: str, alt: str, key: str) -> dict | None:
    """Draw the picture ``source`` (an image URL, e.g. ``cache.pictures.jpeg_data_uri``) across its column; return
    the click that started this run as {x, y, width, height} (the point and the picture's size, in CSS pixels as
    shown), or None."""
    result = _PICTURE(data={"src": source, "alt": alt}, key=key, on_click_change=lambda: None)
    return result.get("click") if result is not None else None


def clicked_patch(click: dict | None, photo_size: tuple[int, int], analysis: ImageAnalysis) -> tuple[int, int] | None:
    """The patch of this run's click on the picture, or None: no click, or a click outside the part of the photo
    the model saw. The picture is the shown photo made smaller evenly, so a click maps straight onto the shown
    photo, whose pixels ``analysis.box`` is in."""
    if not click:
        return None
    patch = overlays.patch_at(
        click["x"], click["y"], (click["width"], click["height"]), photo_size, analysis.grid_size, analysis.box
    )
    if patch is None:
        st.toast("That point is outside the part of the photo the model saw (the dimmed border).")
    return patch
