"""The vitviz page: page setup, the sidebar, the images, the model and the tabs.

Each part lives beside this file (tabs/ has one module per tab); all computation lives in vitviz/.
Started by `streamlit run app.py` in a checkout, or by the `vitviz app` command, which runs this file.
"""

from __future__ import annotations

import streamlit as st

import vitviz
from vitviz.preprocessing import ImageError
from vitviz_dashboard.budget import BUDGET_ERROR
from vitviz_dashboard.cached import get_model_with_progress, model_input_png, photo_and_analysis
from vitviz_dashboard.common import Page, keep_tab_widgets, prediction_line
from vitviz_dashboard.images import choose_image
from vitviz_dashboard.knockout import knocked_out_model
from vitviz_dashboard.prompts import prompt_model
from vitviz_dashboard.sidebar import MISSING_SPEC, describe_model, resolve, sidebar
from vitviz_dashboard.tabs import anatomy, class_specific, faithfulness, features, heads, overview, patch, tokens

# On a narrow page (800 px with the sidebar open) the eight tab names do not fit on one line, and Streamlit
# would hide the last ones behind a scroll arrow: let them wrap onto a second line instead. (A style element
# alone takes no space on the page; the selectors are Streamlit's stable class and the tab list's ARIA role.)
TAB_WRAP = "<style>.stTabs [role='tablist'] { flex-wrap: wrap; row-gap: 0.25rem; }</style>"
TABS = [
    "Overview",
    "Heads & layers",
    "Click a patch",
    "Features",
    "Class-specific",
    "Model anatomy",
    "Tokens",
    "Faithfulness",
]


def main() -> None:
    st.set_page_config(page_title="vitviz", page_icon="🔍", layout="wide")
    st.title("vitviz: what does the Vision Transformer look at?")
    st.html(TAB_WRAP)
    keep_tab_widgets()  # first: the runs that stop early below must not lose the tabs' settings
    settings = sidebar()
    if BUDGET_ERROR:
        st.sidebar.warning(BUDGET_ERROR)
    # the images come first, so a model that is missing or fails to load does not clear the uploads
    chosen = choose_image()
    if "tab" in st.session_state:  # and the open tab survives runs that stop before the tabs
        st.session_state.tab = st.session_state.tab
    if not settings.model_spec:
        st.info(MISSING_SPEC.get(settings.model_choice, "Choose a model in the sidebar, or type a spec into its box."))
        return
    try:
        model = get_model_with_progress(settings.model_spec)
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load model `{settings.model_spec}`: {error}")
        return
    describe_model(model, settings.model_spec)
    settings = resolve(settings, model)  # precision "auto": what timing this model on this machine chose
    model, settings = prompt_model(model, settings)  # CLIP, SigLIP: prompts become the classes
    intact_model, intact_settings = model, settings
    # two places drawn in every run, empty or not, so that nothing below them moves: a banner that appeared, or a
    # progress bar, shifted every element after it, the browser re-mounted the tabs and jumped to the page's top
    banner, progress = st.empty(), st.empty()
    model, settings = knocked_out_model(model, settings, banner)  # heads and tokens the user removed, with a banner
    if chosen is None:
        return
    name, images = chosen

    def prepare(image_name: str):
        """The photo and its analysis (another image of the session, for the compare sides)."""
        return photo_and_analysis(model, settings, image_name, images[image_name])

    try:
        photo, analysis = photo_and_analysis(model, settings, name, images[name], progress)
    except ImageError as error:
        st.error(f"Could not read {name}: {error}")
        return
    intact = model is not intact_model
    page = Page(
        model,
        settings,
        images[name],
        photo,
        analysis,
        intact_model if intact else None,
        intact_settings if intact else None,
    )
    line, saw = st.columns([4, 1], vertical_alignment="center")
    line.markdown(prediction_line(page))  # above the tabs: seen whichever is open
    height, width = analysis.pixel_values.shape[-2:]
    saw.image(
        model_input_png(settings.model_spec, photo.key, settings.precision, _analysis=analysis, _model=model),
        caption=f"What the model saw: {width}x{height}",
        width="content",
    )
    # Only the open tab runs (Streamlit's lazy tabs): a sidebar change redraws one tab, not eight, and
    # the class-specific maps (a backward pass) are computed when their tab is first opened.
    draws = [
        overview.draw,
        lambda p: heads.draw(p, images, prepare),
        patch.draw,
        lambda p: features.draw(p, images, prepare),
        class_specific.draw,
        anatomy.draw,
        tokens.draw,
        faithfulness.draw,
    ]
    for tab, draw in zip(st.tabs(TABS, key="tab", on_change="rerun"), draws):
        if tab.open:
            with tab:
                draw(page)


if __name__ == "__main__":  # Streamlit runs the script as __main__
    main()
