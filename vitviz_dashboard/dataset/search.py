"""Patch search: pick an image and click one of its patches (or type its row and column), and see the k stored
patches most like it across the dataset (the index's FAISS search over the patch features), each as a crop beside its
photo with the patch outlined. The results go on: *Show in Grid* makes their images the Grid's selection, each with
its best patch's similarity; each result's *Open in Photo* opens its photo on the Photo page (as the Grid's does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from vitviz.render import overlays
from vitviz_dashboard.cache.pictures import jpeg_data_uri
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.opening import open_in_photo_page, photo
from vitviz_dashboard.state import dataset_key
from vitviz_dashboard.widgets.click_picture import click_picture

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

CLICKED = dataset_key("search_clicked")  # a click's patch, put into the row and column fields before they are drawn
ROW, COL = dataset_key("search_row"), dataset_key("search_col")
CROP, PHOTO = 96, 160  # a match's crop and photo, in pixels


def draw(page: DatasetPage) -> None:
    index = page.index
    if "patches" not in index.manifest.get("search", {}):
        st.info("This index has no patch search: it was made with --no-features.")
        return
    rows, cols = index.grid
    if CLICKED in st.session_state:  # a widget's value can be set only before the widget is drawn
        st.session_state[ROW], st.session_state[COL] = st.session_state.pop(CLICKED)
    # the fields' defaults in the state, not the widgets: a click sets them, and a widget with both logs a warning
    st.session_state.setdefault(ROW, rows // 2)
    st.session_state.setdefault(COL, cols // 2)
    image_field, row_field, col_field, k_field = st.columns(4)
    image_id = image_field.number_input("Image id", 0, index.count - 1, 0, key=dataset_key("search_image"))
    row = row_field.number_input("Patch row", 0, rows - 1, key=ROW)
    col = col_field.number_input("Patch column", 0, cols - 1, key=COL)
    k = k_field.number_input("Nearest", 1, 64, 8, key=dataset_key("search_k"))
    chosen = index.query(f"SELECT path, error FROM images WHERE image_id = {int(image_id)}")
    if chosen["error"].notna().iloc[0]:
        st.error(f"Image {image_id} could not be read when it was indexed: {chosen['error'].iloc[0]}")
        return
    path = str(chosen["path"].iloc[0])
    shown = photo(index, int(image_id), path)
    if shown is not None:
        image, box = shown
        picture, _ = st.columns([1, 2])  # a third of the page: patches of a 16 x 16 grid still take a click
        with picture:
            thumbnail = drawing.marked_thumbnail(image, (int(row), int(col)), index.grid, box, side=512)
            click = click_picture(jpeg_data_uri(thumbnail), f"image {image_id}", key=dataset_key("search_click"))
            shown_path = drawing.breakable(path)
            st.caption(f"Image {image_id} ({shown_path}), patch ({row}, {col}). Click a patch to search for it.")
        if click:  # the thumbnail is the photo made smaller evenly, so the click maps onto the photo's pixels
            clicked = overlays.patch_at(
                click["x"], click["y"], (click["width"], click["height"]), image.size, index.grid, box
            )
            if clicked is None:
                st.toast("That point is outside the part of the photo the model saw.")
            elif clicked != (int(row), int(col)):
                st.session_state[CLICKED] = clicked
                st.rerun()
    others = st.checkbox(
        "Other images only",
        value=True,
        key=dataset_key("search_others"),
        help="Leave out the chosen image's own patches: its neighbouring patches are often the most similar.",
    )
    found = index.nearest_patches(int(image_id), (int(row), int(col)), int(k), other_images=others)
    paths = index.query(
        f"SELECT image_id, path FROM images WHERE image_id IN ({', '.join(str(int(i)) for i in found.image_id)})"
    )
    found = found.merge(paths, on="image_id", how="left")
    whose = "in other images" if others else "(the first is itself)"
    st.markdown(f"**The {len(found)} most similar patches** {whose}, by the cosine of the stored features")
    images = found.drop_duplicates("image_id")  # best first: each image with its best patch's similarity
    grid.select_button(
        index,
        images["image_id"].tolist(),
        f"the images of the {len(found)} patches most like patch ({row}, {col}) of image {image_id}",
        "patch search",
        f"Show in Grid ({len(images)} images)",
        dataset_key("search_grid"),
        scores=images["similarity"].tolist(),
    )
    # cards of a fixed width in a row that wraps: the crop stays at CROP px however narrow the page (one card a row
    # at 800 px with the sidebar open, where four columns left it 28 px wide)
    with st.container(horizontal=True, gap="medium", key=dataset_key("search_cards")):
        for position, match in enumerate(found.itertuples()):
            shown = photo(index, match.image_id, match.path)
            if shown is None:
                continue
            image, box = shown
            patch = (int(match.row), int(match.col))
            with st.container(width=CROP + PHOTO + 16):
                with st.container(horizontal=True, gap="small"):
                    st.image(drawing.patch_crop(image, patch, index.grid, box, side=CROP), width=CROP)
                    st.image(drawing.marked_thumbnail(image, patch, index.grid, box, side=PHOTO), width=PHOTO)
                st.caption(match_caption(match.image_id, match.path, patch, match.similarity))
                if st.button(
                    "Open in Photo",
                    key=dataset_key(f"search_open|{position}|{match.image_id}"),
                    icon=":material/open_in_new:",
                ):
                    open_in_photo_page(index, int(match.image_id), str(match.path), page.photo_page)


def match_caption(image_id: int, path: object, patch: tuple[int, int], similarity: float) -> str:
    """A match's caption from the parts it has, so no line begins with a comma: "12: patch (6, 6), similarity 0.912"
    (the image id first, as the page's other captions) and, on a line of its own, the file's path (breakable between
    folders) when the index knows it."""
    text = f"{int(image_id)}: " + ", ".join([f"patch ({patch[0]}, {patch[1]})", f"similarity {float(similarity):.3f}"])
    if isinstance(path, str) and path.strip():
        text += f"  \n{drawing.breakable(path.strip())}"
    return text
