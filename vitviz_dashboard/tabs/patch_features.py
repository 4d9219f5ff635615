"""Features: what the patch features themselves say, beside the attention. PCA colours fitted jointly over several
photos (the DINOv2 and DINOv3 figures), a clicked patch's matches in its own photo and in another (dense
correspondence), and k-means parts that get the same colour in every photo. Any block, any facet."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import streamlit as st
import torch
from PIL import Image

from vitviz import explain
from vitviz.analysis import ImageAnalysis
from vitviz.explain.facets import FACETS
from vitviz.preprocessing import ImageError
from vitviz.render import overlays
from vitviz.render.feature_pictures import paint_patches, part_colours, side_by_side
from vitviz_dashboard.cache.pictures import grid_picture_uri
from vitviz_dashboard.cache.results import feature_parts, patch_features, pca_colours, session_photo
from vitviz_dashboard.downloads import npz_bytes
from vitviz_dashboard.page import Page, Photo
from vitviz_dashboard.state import FEATURES_PATCH
from vitviz_dashboard.widgets.click_picture import click_picture, clicked_patch
from vitviz_dashboard.widgets.controls import colour_legend, index_slider, rerun_tab

MAX_IMAGES = 8
FACET_HELP = (
    "token: the patch's token after the block; key, query, value: what the block's attention computes from "
    "it, heads side by side (Amir et al. 2021 found DINO's keys the best for parts and matches)."
)
PCA_PAPER = "[DINOv2](https://arxiv.org/abs/2304.07193), Oquab et al. 2023, figure 1"
MATCH_PAPER = "[Deep ViT Features as Dense Visual Descriptors](https://arxiv.org/abs/2112.05814), Amir et al. 2021"


@dataclass(frozen=True)
class Chosen:
    """One chosen photo with its analysis and its patch features (N, D) in the chosen block and facet."""

    name: str
    photo: Photo
    analysis: ImageAnalysis
    features: np.ndarray
    block: int
    facet: str

    @property
    def grid(self) -> tuple[int, int]:
        return self.analysis.grid_size


def fit_key(page: Page, chosen: list[Chosen]) -> tuple:
    """What a fit over the chosen photos' features depends on: the model's key, the photos, the block and facet."""
    return (page.model_key, tuple(one.photo.key for one in chosen), chosen[0].block, chosen[0].facet)


@st.fragment
def draw(page: Page) -> None:
    st.caption(
        "Patch features are what a ViT hands on to whatever reads it (a segmentation head, a retrieval "
        "index): here they are shown directly, as colours, matches and parts. Pick the photos, the block and "
        "the facet; every view below uses them."
    )
    chosen = choose(page)
    if not chosen:
        return
    st.subheader("PCA colours")
    pca_view(page, chosen)
    st.divider()
    st.subheader("Click a patch: its matches")
    matches_view(page, chosen)
    st.divider()
    st.subheader("Parts (k-means)")
    parts_view(page, chosen)


def choose(page: Page) -> list[Chosen]:
    """The photo, block and facet pickers, and the chosen photos' features (the page's photo first)."""
    c = page.model.config
    names = list(page.images)
    others = [n for n in names if n != page.photo.name]
    default = [page.photo.name, *others[:2]]
    picked = st.multiselect(
        f"Photos (up to {MAX_IMAGES}; the PCA and the parts are fitted over all of them at once)",
        names,
        key=page.widget_key("features_images", default, per_image=True),
        max_selections=MAX_IMAGES,
    )
    left, right = st.columns(2)
    with left:
        layers = range(c.num_layers)
        block = index_slider("Block", c.num_layers, page.widget_key("features_block", c.num_layers - 1, options=layers))
    facet = right.selectbox(
        "Facet", FACETS, key=page.widget_key("features_facet", "token", options=FACETS), help=FACET_HELP
    )
    if not picked:
        st.info("Choose one or more photos above.")
        return []
    chosen = []
    for name in picked:
        try:
            photo, analysis = session_photo(page, name)
        except ImageError as error:
            st.error(f"Could not read {name}: {error}")
            continue
        features = patch_features(
            page.model_key,
            photo.key,
            block,
            facet,
            _analysis=analysis,
            _model=page.model,
        )
        chosen.append(Chosen(name, photo, analysis, features, block, facet))
    st.caption(f"Block {block}, facet **{facet}**: {chosen[0].features.shape[1] if chosen else 0} numbers per patch.")
    return chosen


def pca_view(page: Page, chosen: list[Chosen]) -> None:
    st.caption(
        f"Each patch coloured by its first three principal components (red, green, blue), the PCA fitted on "
        f"the patches of every photo at once, so one colour means the same feature in each ({PCA_PAPER}). "
        "Removing the background follows DINOv2's recipe: the first component, scaled to [0, 1] over all "
        "photos, splits foreground from background at the threshold, and a second PCA on the foreground "
        "patches alone colours them. The colours are laid over the photo at the sidebar's overlay opacity "
        "(1 for DINOv2's opaque look)."
    )
    a, b = st.columns(2)  # the two switches one above the other: three columns cut their labels at 800 px
    remove = a.toggle("Remove background", key=page.widget_key("features_background", False))
    threshold = b.slider(
        "Foreground threshold", 0.0, 1.0, key=page.widget_key("features_threshold", 0.5), step=0.05, disabled=not remove
    )
    flip = a.toggle(
        "Flip 1st component",
        key=page.widget_key("features_flip", False),
        help="Which side of the first component is the foreground is arbitrary: flip it if the "
        "background came out as the foreground.",
    )
    try:
        result = pca_colours(
            *fit_key(page, chosen), threshold if remove else None, flip, _features=[one.features for one in chosen]
        )
    except ValueError as error:  # e.g. a threshold that leaves no foreground
        st.warning(f"No PCA colours: {error}")
        return
    alpha = page.settings.alpha
    pictures = [
        paint_patches(one.photo.image, colours.numpy().reshape(*one.grid, 3), one.analysis.box, alpha)
        for one, colours in zip(chosen, result.colours)
    ]
    show_row(pictures, [one.name for one in chosen])
    if result.foreground is not None:  # a photo wholly on one side: the first component tells the photos apart
        whole = [
            f"{one.name} ({'all foreground' if mask.all() else 'all background'})"
            for one, mask in zip(chosen, result.foreground)
            if mask.all() or not mask.any()
        ]
        if whole:
            st.caption(
                f"At this threshold {', '.join(whole)}: the first component separates these photos from "
                "the others rather than objects from their background. Try another block or facet, the "
                "threshold, or fewer photos."
            )
    variance = ", ".join(f"{v:.1%}" for v in result.explained_variance.tolist())
    st.caption(
        f"Explained variance of the three components: {variance}"
        + (" (of the foreground patches' PCA)." if remove else ".")
    )
    arrays = {"explained_variance": result.explained_variance.numpy()}
    for index, (one, colours) in enumerate(zip(chosen, result.colours)):
        arrays[f"colours_{index}"] = colours.numpy().reshape(*one.grid, 3)
        if result.foreground is not None:
            arrays[f"foreground_{index}"] = result.foreground[index].numpy().reshape(one.grid)
    view_downloads("PCA colours", "pca_colours", pictures, arrays, chosen)


def matches_view(page: Page, chosen: list[Chosen]) -> None:
    source = chosen[0]
    rows, cols = source.grid
    row, col = FEATURES_PATCH.get((rows // 2, cols // 2))
    row, col = min(row, rows - 1), min(col, cols - 1)
    st.caption(
        f"Click a patch of {source.name} (the first photo chosen above): each patch of both photos is coloured "
        f"by the cosine similarity of its feature with the clicked patch's, and the best matches are "
        f"outlined in green ({MATCH_PAPER})."
    )
    names = [one.name for one in chosen]
    a, b, c = st.columns(3)
    target_name = a.selectbox(
        "Match in", names, key=page.widget_key("features_target", names[-1], per_image=True, options=names)
    )
    k = b.number_input("Matches outlined", 1, 20, key=page.widget_key("features_top_k", 5))
    radius = c.number_input(
        "Skip neighbours within",
        0,
        10,
        key=page.widget_key("features_radius", 1),
        help="In the clicked photo, the patches this many patches or fewer from the clicked one "
        "are not counted as matches: a patch's own neighbourhood always looks alike. 0 "
        "skips only the patch itself.",
    )
    target = chosen[names.index(target_name)]
    left, middle, right = st.columns(3)
    with left:
        click = click_picture(
            grid_picture_uri(source.photo, source.analysis.box, source.grid, (row, col)),
            f"{source.name} with the model's patch grid",
            key="features_click",
        )
        st.caption(f"Click a patch of {source.name}; ({row}, {col}) is chosen.")
        clicked = clicked_patch(click, source.photo.image.size, source.analysis)
        if clicked is not None and clicked != (row, col):
            FEATURES_PATCH.set(clicked)
            rerun_tab()
    query = torch.from_numpy(source.features[row * cols + col])
    here = explain.patch_similarity(query, torch.from_numpy(source.features))
    there = explain.patch_similarity(query, torch.from_numpy(target.features))
    # one scale for both, set by every patch but the clicked one (its similarity with itself, 1, would flatten the rest)
    others = torch.cat([here[torch.arange(len(here)) != row * cols + col], there if target is not source else here[:0]])
    low, high = (float(others.min()), float(others.max())) if len(others) else (float(here.min()), float(here.max()))
    best_here = explain.top_matches(here, int(k), source.grid, exclude=row * cols + col, radius=int(radius))
    best_there = explain.top_matches(
        there, int(k), target.grid, exclude=row * cols + col if target is source else None, radius=int(radius)
    )
    pictures = [
        similarity_picture(page, one, similarity, best, (low, high), (row, col) if one is source else None)
        for one, similarity, best in ((source, here, best_here), (target, there, best_there))
    ]
    middle.image(pictures[0], width="stretch", caption=f"{source.name}: similarity to its patch ({row}, {col})")
    right.image(
        pictures[1],
        width="stretch",
        caption=f"{target.name}: similarity to {source.name}'s patch ({row}, {col})"
        if target is not source
        else f"{target.name}: similarity to its patch ({row}, {col})",
    )
    colour_legend(
        page.settings,
        low,
        high,
        "cosine similarity with the clicked patch, one scale for both photos "
        "(set by every patch but the clicked one, which is 1)",
    )
    arrays = {
        "similarity_source": here.numpy().reshape(source.grid),
        "similarity_target": there.numpy().reshape(target.grid),
        "matches_source": best_here.numpy(),
        "matches_target": best_there.numpy(),
        "clicked": np.array([row, col]),
    }
    view_downloads("Matches", f"matches_{row}_{col}", pictures, arrays, [source, target])


def similarity_picture(
    page: Page, one: Chosen, similarity: torch.Tensor, best: torch.Tensor, value_range, clicked: tuple[int, int] | None
) -> Image.Image:
    """The similarity map over the photo, the best matches outlined in green and the clicked patch in cyan."""
    settings, (rows, cols) = page.settings, one.grid
    picture = overlays.overlay(
        one.photo.image,
        similarity.numpy().reshape(rows, cols),
        settings.colormap,
        settings.alpha,
        one.analysis.box,
        value_range,
    )
    for index in best.tolist():
        picture = overlays.mark_patch(picture, divmod(index, cols), one.grid, one.analysis.box, colour=(0, 255, 0))
    if clicked is not None:
        picture = overlays.mark_patch(picture, clicked, one.grid, one.analysis.box)
    return picture


def parts_view(page: Page, chosen: list[Chosen]) -> None:
    st.caption(
        f"k-means on the patch features of every chosen photo at once (on unit-length features, so by cosine "
        f"similarity): a part gets the same colour in each photo, a rough co-segmentation ({MATCH_PAPER})."
    )
    total = sum(one.features.shape[0] for one in chosen)
    options = list(range(2, min(12, total) + 1))
    if not options:
        st.caption("Too few patches for parts.")
        return
    k = st.select_slider("Parts", options, key=page.widget_key("features_parts", min(5, options[-1]), options=options))
    labels = feature_parts(*fit_key(page, chosen), int(k), _features=[one.features for one in chosen])
    pictures = [
        paint_patches(
            one.photo.image,
            part_colours(part.reshape(one.grid)),
            one.analysis.box,
            page.settings.alpha,
        )
        for one, part in zip(chosen, labels)
    ]
    show_row(pictures, [one.name for one in chosen])
    arrays = {f"parts_{index}": part.reshape(one.grid) for index, (one, part) in enumerate(zip(chosen, labels))}
    view_downloads("Parts", f"parts_{k}", pictures, arrays, chosen)


def show_row(pictures: list[Image.Image], names: list[str]) -> None:
    """The pictures side by side, up to four a row (at least three columns: one or two photos are not blown up)."""
    columns = min(4, max(3, len(pictures)))
    for start in range(0, len(pictures), columns):
        row = zip(st.columns(columns), pictures[start : start + columns], names[start : start + columns])
        for column, picture, name in row:
            column.image(picture, width="stretch", caption=name)


def view_downloads(view: str, stem: str, pictures: list[Image.Image], arrays: dict, chosen: list[Chosen]) -> None:
    """A PNG of the view's pictures side by side and an .npz of its numbers with the photos' names, made on click."""

    def png() -> bytes:
        buffer = io.BytesIO()
        side_by_side(pictures).save(buffer, format="PNG")
        return buffer.getvalue()

    def npz() -> bytes:
        return npz_bytes({**arrays, "photos": np.array([one.name for one in chosen])})

    left, right = st.columns(2)
    left.download_button(
        f"{view} (PNG)",
        png,
        f"{stem}.png",
        "image/png",
        key=f"png_{view}",
        icon=":material/download:",
        help=f"The {view} pictures side by side",
    )
    right.download_button(
        f"{view} (.npz)",
        npz,
        f"{stem}.npz",
        "application/octet-stream",
        key=f"npz_{view}",
        icon=":material/download:",
        help=f"The {view} numbers, with the photos' names",
    )
