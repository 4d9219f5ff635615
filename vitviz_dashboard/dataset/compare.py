"""The Compare tab (LIT's side-by-side models): a second index of the same images, made by another model, typed in
and opened as the sidebar opens the first (the allowed folders, one line for each bad folder); images matched by the
sha256 of their file (vitviz.dataset.compare). It shows how often the two models agree and which is right, the
images where their predictions differ (both predictions and probabilities; tick one), and for a chosen image each
index's stored map over its photo, side by side on one colour scale."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.compare import NothingShared, agreement_counts, disagreements
from vitviz_dashboard.cache.dataset import index_match
from vitviz_dashboard.dataset import drawing
from vitviz_dashboard.dataset.grid import legend
from vitviz_dashboard.dataset.opening import index_key, open_typed_index, photo
from vitviz_dashboard.dataset.table import map_kinds, map_name
from vitviz_dashboard.state import dataset_key, kept

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

FOLDER = kept(dataset_key("compare_folder"))  # the second index's folder, kept through other tabs and pages
IMAGE = dataset_key("compare_image")  # the chosen image, by its id in the open index
TICK_SEEN = dataset_key("compare_tick_seen")  # the table's ticked row in the run before: only a new tick chooses
MAX_ROWS = 1_000  # rows of the disagreements table
MAX_OPTIONS = 5_000  # images offered by the picker (the disagreements first)
SIDE = 320  # each photo's side in pixels
NO_FOLDER = (
    "Type the folder of a second index of the same images, made by another model (`vitviz index SOURCE --model "
    "OTHER --out DIR`), to see where the two models disagree and each one's maps side by side."
)


def model_name(index: DatasetIndex) -> str:
    return str(index.manifest["model"].get("spec", "?"))


def counts_line(counts: dict[str, int], a: str, b: str) -> str:
    """The agreement in words: how many images both hold, how often the predictions agree, who is right."""
    shared = counts["shared"]
    text = (
        f"**{shared:,} images in both.** The predictions agree on {counts['agree']:,} and differ on "
        f"{counts['disagree']:,}"
    )
    if counts["labelled"]:
        n = counts["labelled"]
        text += (
            f". Of the {n:,} labelled: A (`{a}`) is right on {counts['a_right']:,} ({counts['a_right'] / n:.1%}), "
            f"B (`{b}`) on {counts['b_right']:,} ({counts['b_right'] / n:.1%}); both right {counts['both_right']:,}, "
            f"only A {counts['only_a_right']:,}, only B {counts['only_b_right']:,}, both wrong "
            f"{counts['both_wrong']:,}"
        )
    return text + "."


def disagreement_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The disagreements as the page lists them: the open index's id first, then both predictions side by side."""
    return pd.DataFrame(
        {
            "image_id": rows["image_id_a"].astype("int64"),
            "label": rows["label"],
            "A prediction": rows["prediction_a"],
            "A probability": rows["probability_a"].astype("float64"),
            "B prediction": rows["prediction_b"],
            "B probability": rows["probability_b"].astype("float64"),
            "B image_id": rows["image_id_b"].astype("int64"),
            "path": rows["path_a"],
        }
    )


def draw(page: DatasetPage) -> None:
    index = page.index
    text = st.text_input(
        "Second index folder (the same images, another model)",
        key=FOLDER,
        placeholder="cifar-index-other-model/",
        help="Opened as the sidebar's index folder is: inside the folders the server allows (VITVIZ_MODEL_DIRS).",
    )
    if not text.strip():
        st.info(NO_FOLDER)
        return
    other = open_typed_index(text)
    if other is None:
        return
    if other.folder == index.folder:
        st.info("That is the open index: type the folder of another index of the same images.")
        return
    try:
        matched = index_match(index_key(index), index_key(other), _index=index, _other=other)
    except NothingShared as error:
        st.error(f"Nothing to compare: {error}.")
        return
    a, b = model_name(index), model_name(other)
    st.markdown(counts_line(agreement_counts(matched), a, b))
    differing = disagreements(matched)
    chosen = disagreement_list(differing)
    if chosen is not None and chosen != st.session_state.get(TICK_SEEN):  # a new tick chooses the image below
        st.session_state[IMAGE] = chosen
    st.session_state[TICK_SEEN] = chosen
    side_by_side(page, index, other, matched, differing, a, b)


def disagreement_list(differing: pd.DataFrame) -> int | None:
    """The table of images whose predictions differ, the most confident first; the ticked row's image id, if any."""
    if differing.empty:
        st.caption("The two models predict the same class for every image both could read.")
        return None
    st.markdown(f"**Where the predictions differ** ({len(differing):,} images, the most confident first)")
    shown = disagreement_table(differing.iloc[:MAX_ROWS])
    if len(differing) > MAX_ROWS:
        st.caption(f"The first {MAX_ROWS:,} of them.")
    event = st.dataframe(
        shown.style.format({"A probability": "{:.1%}", "B probability": "{:.1%}"}, na_rep="-"),
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        height=min(36 + 35 * len(shown), 320),
        key=dataset_key("compare_table"),
    )
    rows = list(event.selection.rows)
    return int(shown["image_id"].iloc[rows[0]]) if rows else None


def side_by_side(
    page: DatasetPage,
    index: DatasetIndex,
    other: DatasetIndex,
    matched: pd.DataFrame,
    differing: pd.DataFrame,
    a: str,
    b: str,
) -> None:
    """A chosen image's stored map in each index over its photo, on one colour scale (the range of both maps)."""
    st.markdown("**One image, each index's map**")
    options = list(dict.fromkeys([*differing["image_id_a"].tolist(), *matched["image_id_a"].tolist()]))[:MAX_OPTIONS]
    options = [int(i) for i in options]
    if st.session_state.get(IMAGE) not in options:
        st.session_state.pop(IMAGE, None)  # a stale id (another pair of indexes): the first disagreement
    kinds = [k for k in map_kinds(index) if k in map_kinds(other)]
    pick, kind_field = st.columns([1, 2])
    image_id = pick.selectbox(
        "Image (its id in the open index)", options, key=IMAGE, help="Tick a row above to choose it too"
    )
    kind = kind_field.selectbox("Map", kinds, key=dataset_key("compare_map"), format_func=map_name)
    if image_id is None or not kinds:
        return
    row = matched.loc[matched["image_id_a"] == image_id].iloc[0]
    sides = [(index, int(row["image_id_a"]), str(row["path_a"])), (other, int(row["image_id_b"]), str(row["path_b"]))]
    maps = [side.maps([i], kind)[0] for side, i, _ in sides]
    value_range = legend(np.concatenate([m.ravel() for m in maps]), kind, page.colormap, "both indexes")
    for column, (side, i, path), patch_map, letter, spec in zip(st.columns(2), sides, maps, "AB", (a, b)):
        with column:
            prediction, probability = row[f"prediction_{letter.lower()}"], row[f"probability_{letter.lower()}"]
            said = "no prediction" if pd.isna(prediction) else f"{prediction} ({float(probability):.0%})"
            st.markdown(f"**{letter}**: `{spec}` says {said}")
            shown = photo(side, i, path)
            if shown is None:
                continue
            image, box = shown
            picture = drawing.patch_thumbnail(image, patch_map, box, page.colormap, page.alpha, value_range, SIDE)
            st.image(picture, caption=f"image {i} of {side.folder.name}: {drawing.breakable(path)}", width="content")
