"""Features: an SAE's latents over the index (vitviz.sae.browse), sorted by how often they fire or by their mean
activation; per latent, its top images with the patches where it fires drawn over them, a histogram of its codes,
the labels of its top images, the classes whose logits it raises most and the later heads that attend to where it
fires; latents found by the labels of their top images or by the model's errors there."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch

from vitviz.dataset import DatasetIndex
from vitviz.sae import SAEError, TopKSAE
from vitviz.sae.ablation import ablation_tables
from vitviz.sae.browse import (
    check_block,
    image_codes,
    raised_classes,
    top_image_shares,
)
from vitviz_dashboard.cache.dataset import latent_effects, latent_tables
from vitviz_dashboard.cache.sae import SAEFiles
from vitviz_dashboard.dataset import drawing, grid
from vitviz_dashboard.dataset.latents import overview, where_it_fires
from vitviz_dashboard.dataset.opening import index_key, model_of, photo, read_photo
from vitviz_dashboard.sae_editing import SAE_HELP, SAE_LABEL, open_typed_sae, stamp
from vitviz_dashboard.state import DATASET_SAE, dataset_key

if TYPE_CHECKING:
    from vitviz_dashboard.dataset.page import DatasetPage

SAE_FOLDER = str(DATASET_SAE)  # the Photo page's SAE tab starts from what is typed here
ORDERS = {"frequency": "how often it fires", "mean_activation": "mean activation when firing"}
ALL = "__all__"  # no search
WRONG = "__wrong__"  # the search for latents whose top images the model gets wrong
LISTED = 200  # latents in the table and the picker
TOP_CLASSES = 5


def draw(page: DatasetPage) -> None:
    index = page.index
    opened = open_typed_sae(st.text_input(SAE_LABEL, key=SAE_FOLDER, help=SAE_HELP))
    if opened is None:
        return
    sae, path = opened
    try:
        block = check_block(index, sae)
    except SAEError as error:
        st.error(f"This SAE does not fit this index: {error}")
        return
    folder = path if path.is_dir() else path.parent
    files = SAEFiles(str(path), stamp(path))
    try:  # block: the SAE's, resolved for the index's model (saev counts from the end)
        latents, tops, about = latent_tables(index_key(index), files, block, _index=index, _sae=sae, _folder=folder)
    except OSError as error:
        st.error(f"Could not write the latent tables beside the SAE ({error}): copy the SAE to a writable folder.")
        return
    firing = latents[latents["frequency"] > 0]
    st.caption(
        f"Block {block}: {sae.config.latents:,} latents, {len(firing):,} of them fire on some of the "
        f"{about['tokens']:,} patch tokens of {about['images']:,} images ({len(latents) - len(firing):,} dead). "
        "Codes are in the SAE's normalised units. Computed once, kept beside the SAE as latents.parquet and "
        "top_images.parquet."
    )
    if firing.empty:
        st.info("No latent of this SAE fires on this index's images.")
        return
    clicked = overview(firing)
    order = st.radio("Sort by", list(ORDERS), format_func=ORDERS.get, horizontal=True, key=dataset_key("sae_order"))
    listed = found(index, firing, tops, order).head(LISTED)
    choices = listed["latent"].tolist()
    if clicked is not None:  # a latent clicked on the overview is offered even when the table leaves it out
        choices += [] if clicked in choices else [clicked]
        st.session_state[dataset_key("sae_latent")] = clicked
    st.dataframe(listed.drop(columns=["histogram"]), hide_index=True, height=240)
    latent = st.selectbox(
        "Latent",
        choices,
        key=dataset_key("sae_latent"),
        format_func=lambda j: f"latent {j}",
    )
    row = latents.set_index("latent").loc[latent]
    top = tops[tops["latent"] == latent].sort_values("rank")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            histogram_figure(row["histogram"], about["histogram_edges"], latent), key=dataset_key("sae_hist")
        )
    with right:
        raised(index, sae, block, files, latent, float(row["max_activation"]), top)
    top_images(index, sae, block, latent, top, page.colormap, page.alpha)
    where_it_fires(index, sae, files, block, latent)
    ablations(index, folder, latent, float(row["max_activation"]))


def found(index: DatasetIndex, firing: pd.DataFrame, tops: pd.DataFrame, order: str) -> pd.DataFrame:
    """The firing latents sorted by ``order``, or first those whose top images are most often of a chosen class or
    wrongly predicted (then by ``order``)."""
    images = index.query("SELECT image_id, label, correct FROM images", limit=index.count + 1)
    labels = sorted(str(label) for label in images["label"].dropna().unique())
    choices = [ALL, WRONG, *labels]
    search = st.selectbox(
        "Find latents",
        choices,
        key=dataset_key("sae_find"),
        format_func=lambda c: {ALL: "all latents", WRONG: "whose top images the model gets wrong"}.get(
            c, f"whose top images are labelled {c}"
        ),
    )
    if search == ALL:
        return firing.sort_values([order, "latent"], ascending=[False, True])
    shares = top_image_shares(tops, images, None if search == WRONG else search)
    column = "wrong_share" if search == WRONG else "label_share"
    joined = firing.merge(shares[["latent", column]], on="latent", how="left").fillna({column: 0.0})
    return joined.sort_values([column, order, "latent"], ascending=[False, False, True])


def histogram_figure(counts, edges, latent: int) -> go.Figure:
    edges = np.asarray(edges)
    centres = np.sqrt(edges[:-1] * edges[1:])
    figure = go.Figure(go.Bar(x=centres, y=np.asarray(counts), width=np.diff(edges), marker_color="#2a9d8f"))
    figure.update_layout(
        title=f"Latent {latent}: its non-zero codes",
        xaxis=dict(type="log", title="code (SAE units, log scale)"),
        yaxis_title="patch tokens",
        height=280,
        margin=dict(l=0, r=0, t=40, b=0),
    )
    return figure


def image_rows(index: DatasetIndex, image_ids: list[int]) -> pd.DataFrame:
    listed = ", ".join(str(int(i)) for i in image_ids) or "-1"
    return index.query(f"SELECT image_id, path, label FROM images WHERE image_id IN ({listed})").set_index("image_id")


def top_images(index: DatasetIndex, sae: TopKSAE, block: int, latent: int, top, colormap: str, alpha: float) -> None:
    """The latent's top images, its codes over each one's patches drawn on the photo, and their labels."""
    rows = image_rows(index, top["image_id"].tolist())
    labels = Counter(str(rows.loc[i, "label"]) for i in top["image_id"] if pd.notna(rows.loc[i, "label"]))
    st.markdown(
        f"**Its top {len(top)} images.** Labels: "
        + (", ".join(f"{label} x{count}" for label, count in labels.most_common()) or "none")
    )
    ids = [int(i) for i in top["image_id"] if int(i) >= 0]
    grid.select_button(
        index, ids, f"latent {latent}'s top images", "latent", "Top images in the grid", dataset_key("sae_top_grid")
    )
    grid_rows, grid_cols = index.grid
    prefix = index.manifest["activations"]["prefix_tokens"]
    columns = st.columns(4)
    for position, entry in enumerate(top.itertuples()):
        image_id, path = int(entry.image_id), str(rows.loc[entry.image_id, "path"])
        codes = image_codes(sae, torch.from_numpy(index.activations(image_id, block)[0]), prefix)[:, latent]
        shown = photo(index, image_id, path)
        if shown is None:
            continue
        image, box = shown
        patch_map = codes.reshape(grid_rows, grid_cols).numpy()
        label = rows.loc[entry.image_id, "label"]
        columns[position % 4].image(
            drawing.map_thumbnail(image, patch_map, box, colormap, alpha),
            caption=f"{image_id}: {drawing.breakable(path)}{f', {label}' if pd.notna(label) else ''}; "
            f"largest code {entry.value:.3g}",
        )


def raised(index: DatasetIndex, sae: TopKSAE, block: int, files: SAEFiles, latent: int, largest: float, top) -> None:
    """The classes whose logits the latent's decoder column raises most (at its largest code, the final norm frozen
    on its top images), and the heads of the later blocks that attend most to the patches where it fires."""
    model = model_of(index)
    if model is None:
        return
    image_ids = tuple(int(i) for i in top["image_id"].tolist())

    def readable() -> list[tuple[int, bytes]]:
        """The top images' files, read only when the result is not kept (top_images says which cannot be read)."""
        rows = image_rows(index, list(image_ids))
        read = [(i, read_photo(index, i, str(rows.loc[i, "path"]))[0]) for i in image_ids]
        return [(image_id, data) for image_id, data in read if data is not None]

    passes = latent_effects(
        index_key(index), files, block, latent, largest, image_ids, _model=model, _sae=sae, _index=index, _read=readable
    )
    if passes is None:
        st.caption("None of its top images could be read again: the model cannot be run on them.")
        return
    effects, heads = passes
    if effects is None:
        st.caption("The index's model has no classes: there are no logits a latent raises.")
    else:
        classes = raised_classes(effects, list(model.class_names or []), TOP_CLASSES)
        st.markdown("**Classes it raises most**")
        if classes:
            st.dataframe(pd.DataFrame(classes, columns=["class", "logit change"]), hide_index=True)
        else:
            st.caption(f"None: it raises no class's logit (its largest change is {float(np.max(effects)):+.3g}).")
        last = block == model.config.num_layers - 1
        st.caption(
            f"Direct logit attribution of its decoder column at its largest code ({largest:.3g}), added to the last "
            "block's output with the final norm frozen, averaged over its top images"
            + ("." if last else " (the direct path only: what the later blocks make of it is left out).")
        )
    if len(heads):
        first = block + 1
        layer, head = np.unravel_index(np.argsort(-heads, axis=None, kind="stable")[:TOP_CLASSES], heads.shape)
        st.markdown("**Heads of the later blocks that attend most to where it fires**")
        st.dataframe(
            pd.DataFrame({"layer": layer + first, "head": head, "attention share": heads[layer, head]}),
            hide_index=True,
        )


def ablations(index: DatasetIndex, folder: Path, latent: int, largest: float) -> None:
    """The per-class accuracy tables `vitviz sae ablate INDEX SAE --latent J` wrote beside the SAE for this latent;
    ``largest`` is the latent's largest activation over the index, so a code set to a multiple of it says so."""
    tables = {path: table for path, table in ablation_tables(folder).items() if latent in table["latent"].to_pylist()}
    st.markdown(f"**Latent {latent} edited over the index** (`vitviz sae ablate`)")
    if not tables:
        st.caption(
            f"No table yet: `vitviz sae ablate {index.folder} {folder} --latent {latent}` writes per-class accuracy "
            f"with this latent suppressed beside the SAE, and it shows here (`--set-to-max -2` sets its code to -2 x "
            "its largest activation, saev's protocol)."
        )
        return
    for path, table in tables.items():
        frame = table.to_pandas()
        scale, set_to = frame["scale"].iloc[0], frame["set_to"].iloc[0]
        st.caption(f"{path.name}: {edit_wording(scale, set_to, largest)}")
        st.dataframe(
            frame.drop(columns=["latent", "scale", "set_to", "block"]).sort_values("accuracy_change"),
            hide_index=True,
            key=dataset_key(f"ablation|{path.name}"),
        )


def edit_wording(scale: float | None, set_to: float | None, largest: float) -> str:
    """How an ablation table's edit reads: codes x 0, or codes set to -0.597 (-2 x the latent's largest activation
    over the index, 0.299) when the value is a multiple of it (`--set-to-max`)."""
    if scale is not None and pd.notna(scale):
        return f"codes x {scale:g}"
    text = f"codes set to {set_to:.4g} on every patch"
    if largest > 0:
        text += f" ({set_to / largest:.3g} x the latent's largest activation over the index, {largest:.4g})"
    return text
