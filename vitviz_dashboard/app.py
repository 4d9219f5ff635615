"""The vitviz page: page setup, the sidebar, the images, the model and its key, and the tabs.

Each part lives beside this file (tabs/ has one module per tab); all computation lives in vitviz/.
Started by `streamlit run app.py` in a checkout, or by the `vitviz app` command, which runs this file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import streamlit as st

import vitviz
from vitviz.explain.common import is_windowed
from vitviz.preprocessing import ImageError
from vitviz.video_clips import is_video_model
from vitviz_dashboard.ask.page import ask_page
from vitviz_dashboard.cache.budget import BUDGET_ERROR
from vitviz_dashboard.cache.results import get_model_with_progress, model_input_png, photo_and_analysis
from vitviz_dashboard.dataset.page import dataset_page
from vitviz_dashboard.images import choose_image
from vitviz_dashboard.knockout import knocked_out_model
from vitviz_dashboard.names import prediction_line
from vitviz_dashboard.page import PAGES, ModelKey, Page
from vitviz_dashboard.sae_editing import sae_edited_model
from vitviz_dashboard.sidebar.model_picker import MISSING_SPEC, describe_model, resolve, sidebar
from vitviz_dashboard.sidebar.prompts import prompt_model
from vitviz_dashboard.state import PHOTO_TAB, keep_widgets
from vitviz_dashboard.tabs import (
    anatomy,
    class_specific,
    faithfulness,
    heads,
    overview,
    patch,
    patch_features,
    sae_features,
    tokens,
    windowed,
)
from vitviz_dashboard.video.page import video_page

# On a narrow page (800 px with the sidebar open) the eight tab names do not fit on one line, and Streamlit
# would hide the last ones behind a scroll arrow: let them wrap onto a second line instead. (A style element
# alone takes no space on the page; the selectors are Streamlit's stable class and the tab list's ARIA role.)
TAB_WRAP = "<style>.stTabs [role='tablist'] { flex-wrap: wrap; row-gap: 0.25rem; }</style>"
# Every tab, in the page's order: its name and what draws it
TABS: dict[str, Callable[[Page], None]] = {
    "Overview": overview.draw,
    "Heads & layers": heads.draw,
    "Click a patch": patch.draw,
    "Features": patch_features.draw,
    "Class-specific": class_specific.draw,
    "Model anatomy": anatomy.draw,
    "Tokens": tokens.draw,
    "Faithfulness": faithfulness.draw,
    "SAE features": sae_features.draw,
}
# The same tabs for a model that attends in windows and merges tokens between stages (Swin): each draws what
# applies to it or says in one line why it does not (tabs/windowed.py)
WINDOWED_TABS: dict[str, Callable[[Page], None]] = windowed.tabs(TABS)


def main() -> None:
    """Four pages: Photo (one photo at a time), Dataset (an index made by `vitviz index`), Ask (a
    vision-language model's answer about a photo) and Video (a video model's maps over a clip's frames)."""
    st.set_page_config(page_title="vitviz", page_icon="🔍", layout="wide")
    st.html(TAB_WRAP)  # before either page draws its tabs, in every run
    keep_widgets()  # each page's kept values survive runs of the other pages
    photo = st.Page(photo_page, title="Photo", default=True)
    dataset = st.Page(lambda: dataset_page(photo), title="Dataset", url_path="dataset")
    ask = st.Page(lambda: ask_page(photo), title="Ask", url_path="ask")
    video = st.Page(video_page, title="Video", url_path="video")
    PAGES.update(photo=photo, dataset=dataset, ask=ask, video=video)
    st.navigation([photo, dataset, ask, video]).run()


VIDEO_MODEL_ON_PHOTO_PAGE = (
    "`{spec}` is a video model: it reads clips of frames, not photos. Open it on the Video page, or choose an "
    "image model here."
)


def photo_page() -> None:
    st.title("vitviz: what does the Vision Transformer look at?")
    keep_widgets()  # first: the runs that stop early below must not lose the tabs' settings
    settings = sidebar()
    if BUDGET_ERROR:
        st.sidebar.warning(BUDGET_ERROR)
    # the images come first, so a model that is missing or fails to load does not clear the uploads
    chosen = choose_image()
    if not settings.model_spec:
        st.info(MISSING_SPEC.get(settings.model_choice, "Choose a model in the sidebar, or type a spec into its box."))
        return
    try:
        loaded = get_model_with_progress(settings.model_spec)
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load model `{settings.model_spec}`: {error}")
        return
    if is_video_model(loaded):  # the mirror of the Video page's refusal of an image model
        st.error(VIDEO_MODEL_ON_PHOTO_PAGE.format(spec=settings.model_spec))
        return
    describe_model(loaded, settings.model_spec)
    settings = resolve(settings, loaded)  # precision "auto": what timing this model on this machine chose
    # CLIP, SigLIP: prompts become the classes
    intact_model, intact_key, prompt_error = prompt_model(loaded, ModelKey(settings.model_spec, settings.precision))
    settings = dataclasses.replace(settings, prompt_error=prompt_error)
    # places drawn in every run, empty or not, so that nothing below them moves: a banner that appeared, or a
    # progress bar, shifted every element after it, the browser re-mounted the tabs and jumped to the page's top
    banner, sae_banner, progress = st.empty(), st.empty(), st.empty()
    # with the SAE edit and without the heads and tokens the user removed, with banners; else the intact model itself
    if is_windowed(intact_model):  # knock-outs and SAE edits are made on the ViT tabs, which a Swin does not get
        model, key = intact_model, intact_key
    else:
        model, key = sae_edited_model(intact_model, intact_key, sae_banner)
        model, key = knocked_out_model(model, key, banner)
    if chosen is None:
        return
    name, images = chosen
    try:
        photo, analysis = photo_and_analysis(key, model, name, images[name], progress)
    except ImageError as error:
        st.error(f"Could not read {name}: {error}")
        return
    page = Page(model, key, settings, images, images[name], photo, analysis, intact_model if key.knocked_out else None)
    line, saw = st.columns([4, 1], vertical_alignment="center")
    line.markdown(prediction_line(page))  # above the tabs: seen whichever is open
    height, width = analysis.pixel_values.shape[-2:]
    saw.image(
        model_input_png(key, photo.key, _analysis=analysis, _model=model),
        caption=f"What the model saw: {width}x{height}",
        width="content",
    )
    # Only the open tab runs (Streamlit's lazy tabs): a sidebar change redraws one tab, not eight, and
    # the class-specific maps (a backward pass) are computed when their tab is first opened.
    tabs = WINDOWED_TABS if is_windowed(model) else TABS
    for tab, draw in zip(st.tabs(list(tabs), key=str(PHOTO_TAB), on_change="rerun"), tabs.values()):
        if tab.open:
            with tab:
                draw(page)


if __name__ == "__main__":  # Streamlit runs the script as __main__
    main()
