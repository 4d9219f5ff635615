"""SAE features: which latents of a sparse autoencoder fire where on this photo, and an edit of chosen latents that
becomes the whole page's model (sae_editing.py), with the top classes before and after."""

from __future__ import annotations

import base64
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

from vitviz.dataset import IndexFormatError
from vitviz.sae import SAEError, TopKSAE
from vitviz.sae.browse import check_fit, patch_latents, read_latent_tables, top_latents
from vitviz_dashboard.cache.dataset import cached_index
from vitviz_dashboard.cache.pictures import overlay_picture
from vitviz_dashboard.cache.sae import SAEFiles, photo_codes
from vitviz_dashboard.dataset.grid import select
from vitviz_dashboard.dataset.opening import manifest_stamp, page_roots
from vitviz_dashboard.knockout import what_changes
from vitviz_dashboard.page import PAGES, Page
from vitviz_dashboard.sae_editing import SAE_HELP, SAE_LABEL, apply, open_typed_sae, stamp
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, check_model_path
from vitviz_dashboard.state import DATASET_FOLDER, DATASET_SAE, sae_edit
from vitviz_dashboard.widgets.click_picture import click_picture, clicked_patch
from vitviz_dashboard.widgets.controls import rerun_tab

SHOWN = 8  # latents drawn over the photo
CLICKED = "sae_clicked"  # the patch a click picked, put into the row and column fields in the next run


def largest_activations(path: Path) -> np.ndarray | None:
    """Each latent's largest code over an index, when the Dataset page's Features tab has written it beside the SAE."""
    tables = read_latent_tables(path if path.is_dir() else path.parent)
    return None if tables is None else tables[0]["max_activation"].to_numpy()


def draw(page: Page) -> None:
    st.caption(
        "A sparse autoencoder (SAE) splits one block's patch tokens into sparse latents (`vitviz sae train`; "
        "docs/sae.md). Here: the latents that fire most on this photo, each drawn over it, and an edit of chosen "
        "latents that the whole page then shows."
    )
    # the SAE typed on the Dataset page, until one is typed here: it need not be typed twice
    field = page.widget_key("sae_folder", DATASET_SAE.get(""))
    opened = open_typed_sae(st.text_input(SAE_LABEL, key=field, help=SAE_HELP))
    if opened is None:
        return
    sae, path = opened
    model = page.intact_model if page.intact_model is not None else page.model  # the codes of the unedited model
    with warnings.catch_warnings(record=True) as caught:  # another model named in the SAE's file
        warnings.simplefilter("always", UserWarning)
        try:
            block = check_fit(sae, model.config.num_layers, model.config.hidden_size, page.model_key.spec)
        except SAEError as error:
            st.error(f"This SAE does not fit this model: {error}")
            return
    for warning in caught:
        st.warning(str(warning.message))
    if getattr(sae, "scaling_missing", None):
        st.warning(f"{sae.scaling_missing}; `vitviz sae calibrate INDEX SAE` estimates it from an index.")
    elif getattr(sae, "scaling_note", None):
        st.caption(f"The SAE's {sae.scaling_note}.")
    codes = torch.from_numpy(
        photo_codes(
            page.model_key.intact(),
            page.photo.key,
            SAEFiles(str(path), stamp(path)),
            block,
            _model=model,
            _sae=sae,
            _pixels=page.analysis.pixel_values,
        )
    )
    ranked = top_latents(codes, SHOWN)
    rows, cols = page.analysis.grid_size
    if not ranked:
        st.info("No latent of this SAE fires on this photo.")
    else:
        st.markdown(
            f"**The {len(ranked)} latents that fire most on this photo** (block {block}, codes in the SAE's units)"
        )
        grid = st.columns(4)
        for position, (latent, value, patches) in enumerate(ranked):
            patch_map = codes[:, latent].reshape(rows, cols).numpy()
            grid[position % 4].image(
                overlay_picture(page.photo, patch_map, page.analysis.box, page.settings),
                caption=f"latent {latent}: largest {value:.3g}, on {patches} of {rows * cols} patches",
                width="stretch",
            )
        one_patch(page, codes)
        dataset_link(path, block, ranked)
    edit(page, sae, path, block, [latent for latent, _, _ in ranked])


def dataset_link(path: Path, block: int, ranked: list[tuple[int, float, int]]) -> None:
    """Where the Dataset page has an index open and this SAE's latent tables were computed over it (its Features
    tab): a latent's top images there, in the Dataset page's grid."""
    folder, dataset = DATASET_FOLDER.get(), PAGES.get("dataset")
    if not folder or dataset is None:
        return
    try:  # the folder passed the Dataset page's checks when it was typed; it is checked again, quietly
        checked = check_model_path(str(folder), page_roots())
        index = cached_index(str(checked), manifest_stamp(checked))
    except (ModelRefused, IndexFormatError, ValueError, OSError):
        return
    tables = read_latent_tables(path if path.is_dir() else path.parent, index, block)
    if tables is None:
        st.caption(
            "Open this SAE in the Dataset page's Features tab once (over the index open there) to see a latent's "
            "top images in the dataset from here."
        )
        return
    tops = tables[1]
    st.markdown(f"**A latent's top images in the dataset** (`{index.folder.name}`)")
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    latent = left.selectbox(
        "Latent", [j for j, _, _ in ranked], key="sae_dataset_latent", format_func="latent {}".format
    )
    ids = tops[tops["latent"] == latent].sort_values("rank")["image_id"].tolist()
    if right.button(
        "Show them in the Dataset page", key="sae_to_dataset", disabled=not ids, icon=":material/grid_view:"
    ):
        select(index, ids, f"latent {latent}'s top images", "the Photo page's SAE tab", show=True)
        st.switch_page(dataset)


def one_patch(page: Page, codes: torch.Tensor) -> None:
    """The latents that fire on one patch, largest first: click it on the photo (or set its row and column)."""
    rows, cols = page.analysis.grid_size
    st.markdown("**One patch's latents**")
    row_key = page.widget_key("sae_row", rows // 2, per_image=True)
    col_key = page.widget_key("sae_col", cols // 2, per_image=True)
    if CLICKED in st.session_state:  # a click of the last run: a widget's value can be set only before it is drawn
        st.session_state[row_key], st.session_state[col_key] = st.session_state.pop(CLICKED)
    picture, fields = st.columns([1, 2])
    with fields:
        left, right = st.columns(2)
        row = int(left.number_input("Row", 0, rows - 1, key=row_key))
        col = int(right.number_input("Column", 0, cols - 1, key=col_key))
        listed = patch_latents(codes, row * cols + col)
        if listed:
            st.dataframe(pd.DataFrame(listed, columns=["latent", "code"]), hide_index=True)
        else:
            st.caption("No latent fires on this patch.")
    strongest = codes.max(dim=1).values.reshape(rows, cols).numpy()  # each patch's largest code
    with picture:
        shown = overlay_picture(page.photo, strongest, page.analysis.box, page.settings, mark=(row, col))
        uri = "data:image/jpeg;base64," + base64.b64encode(shown).decode()
        click = click_picture(uri, f"{page.photo.name}: each patch's largest SAE code", key="sae_click")
        st.caption("Each patch's largest code, the chosen patch outlined. Click a patch to list its latents.")
    clicked = clicked_patch(click, page.photo.image.size, page.analysis)
    if clicked is not None and clicked != (row, col):
        st.session_state[CLICKED] = clicked
        rerun_tab()


def apply_sliders(spec: str, path: Path, block: int, sliders: dict[int, str], largest) -> None:
    """Apply's callback: the sliders' values as they are when it is pressed (read from the session state, not
    from the run that drew the button: a slider moved just before the click would otherwise be applied at its old
    value), as multiples of each latent's largest activation, or as factors where none is known."""
    values = {latent: float(st.session_state.get(key, 0.0)) for latent, key in sliders.items()}
    if largest is not None:
        apply(spec, path, block, {j: v * float(largest[j]) for j, v in values.items()}, {})
    else:
        apply(spec, path, block, {}, values)


def edit(page: Page, sae: TopKSAE, path: Path, block: int, firing: list[int]) -> None:
    """A slider per chosen latent, and a button that makes the edited model the page's."""
    st.subheader("Edit latents")
    largest = largest_activations(path)
    if largest is not None and len(largest) != sae.config.latents:
        largest = None
    st.caption(
        "Each chosen latent's code is set, on every patch, to a multiple of its largest activation over the index "
        "(saev's protocol: −2x turns a feature around; 0 suppresses it)."
        if largest is not None
        else "Each chosen latent's code is multiplied by a factor (0 suppresses it, 2 doubles it). Open the SAE in the "
        "Dataset page's Features tab once to set latents to multiples of their largest activation instead."
    )
    every = list(range(sae.config.latents))
    chosen = st.multiselect(
        "Latents to edit",
        every,
        key=page.widget_key(f"sae_latents|{path}", firing[:1], options=None),
        help="The latents above fire most on this photo; any latent of the SAE can be chosen.",
    )
    sliders = {}  # latent -> its slider's session-state key, read when Apply is pressed
    for latent in chosen:
        if largest is not None:
            sliders[int(latent)] = key = page.widget_key(f"sae_multiple|{path}|{latent}", 0.0)
            st.slider(
                f"Latent {latent}: set to this multiple of its largest activation ({largest[latent]:.3g})",
                -2.0,
                2.0,
                step=0.1,
                key=key,
            )
        else:
            sliders[int(latent)] = key = page.widget_key(f"sae_factor|{path}|{latent}", 0.0)
            st.slider(f"Latent {latent}: multiply its code by", 0.0, 2.0, step=0.1, key=key)
    st.button(
        "Apply to the page's model",
        on_click=apply_sliders,
        args=(page.model_key.spec, path, block, sliders, largest),
        disabled=not chosen,
        key="sae_apply",
        help="Every tab then shows the edited model; the banner above the tabs restores it.",
    )
    if sae_edit(page.model_key.spec).get() and page.intact_model is not None:
        what_changes(page)
