"""Sparse autoencoders on the pages: a typed SAE opened (``hf:<org>/<name>[/<subfolder>]`` from the Hub, or a file
or folder in any format ``vitviz.sae.load_sae`` reads, inside the allowed folders), and latents of an SAE edited in
the model the whole Photo page shows.

The edit lives in session state per image tower, as knock-outs do (knockout.py): the SAE's folder and, per latent,
the code it is set to on every patch (a multiple of its largest activation over an index, when that is known) or
the factor its code is multiplied by. Before any tab is drawn, ``sae_edited_model`` turns the model into
``vitviz.sae.with_sae(model, ...)``, which shares every weight, and puts a banner above the tabs with one click to
restore the model. The edit joins the model's key (page.ModelKey.sae_edit), so every cache keeps the edited
model's results apart, and its ``intact()`` key names the model before.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import streamlit as st

import vitviz
from vitviz.loading.download import REPO_ID
from vitviz.loading.specs import HUB_PREFIX
from vitviz.messages import clip_text
from vitviz.sae import SAEError, TopKSAE, with_sae
from vitviz.sae.browse import LATENTS_FILE, TOP_FILE
from vitviz_dashboard.cache.sae import SAEFiles, cached_sae, hub_folder
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_model_path
from vitviz_dashboard.state import sae_edit

OUTSIDE = (
    "This page opens SAE folders only inside the folders that the server's owner allows (VITVIZ_MODEL_DIRS, the same "
    "folders as model paths; by default the checkpoints folder and the working directory)."
)
SAE_HELP = (
    "`hf:<org>/<name>[/<subfolder>]` for an SAE on the Hugging Face Hub (saev, SAELens, ViT-Prisma, sparsify), or a "
    "folder or file: one written by `vitviz sae train ... --out DIR`, saev's sae.pt, a SAELens, ViT-Prisma or "
    "sparsify folder, inside the folders the server's owner allows (VITVIZ_MODEL_DIRS)."
)
SAE_LABEL = "SAE from the Hub or a folder"


def check_sae_hub_spec(text: str) -> str:
    """``text`` when it is ``hf:<org>/<name>[/<subfolder>]`` with plain path parts (no ``..``, ``.``, ``~``,
    backslashes or empty parts): a place in a Hub repository, never a local path; else ModelRefused."""
    spec = text.strip()
    parts = spec[len(HUB_PREFIX) :].split("/")
    plain = all(p and p not in (".", "..") and not p.startswith("~") and "\\" not in p for p in parts)
    if not spec.startswith(HUB_PREFIX) or len(parts) < 2 or not plain or not REPO_ID.fullmatch("/".join(parts[:2])):
        raise ModelRefused(
            f"`{clip_text(spec, 80)}` is not an SAE on the Hub: write hf:<org>/<name>[/<subfolder>], e.g. "
            "hf:osunlp/SAE_CLIP_24K_ViT-B-16_IN1K"
        )
    return spec


# what vitviz writes beside an SAE (the Features tab's tables, `vitviz sae ablate`'s): not the SAE, so writing them
# must not make the SAE look changed (every result keyed by its stamp would be computed again)
WRITTEN_BESIDE = (LATENTS_FILE, TOP_FILE, "ablate-*.parquet")


def stamp(path: Path) -> int:
    """When the SAE's own files last changed (a file, or a folder's files but WRITTEN_BESIDE): one trained again, or
    given its input scaling, opens afresh."""
    try:
        files = [p for p in path.iterdir() if not any(p.match(n) for n in WRITTEN_BESIDE)] if path.is_dir() else [path]
        return max((os.stat(p).st_mtime_ns for p in files), default=0)
    except OSError:
        return 0


def open_typed_sae(text: str) -> tuple[TopKSAE, Path] | None:
    """The SAE a visitor typed (``hf:`` spec or a path inside the allowed folders) and the local file or folder
    its files are in (for a Hub SAE, its place in the Hub's cache), or None with a message saying what is wrong."""
    if not text.strip():
        st.info(
            "Enter a sparse autoencoder: `hf:<org>/<name>[/<subfolder>]` from the Hub, or the folder "
            "`vitviz sae train INDEX --block B --out DIR` makes."
        )
        return None
    try:
        if text.strip().startswith(HUB_PREFIX):
            path = hub_folder(check_sae_hub_spec(text))
        else:
            path = check_model_path(text, allowed_model_dirs())
    except ModelRefused as error:
        st.error(str(error) if text.strip().startswith(HUB_PREFIX) else OUTSIDE)
        return None
    except SAEError as error:  # not in the cache and the Hub unreachable, no such subfolder
        st.error(f"Could not open the SAE: {error}")
        return None
    if not path.exists():
        st.error(f"There is no SAE at `{text.strip()}`: enter the folder `vitviz sae train --out` wrote.")
        return None
    try:
        return cached_sae(SAEFiles(str(path), stamp(path))), path
    except (SAEError, OSError, RuntimeError) as error:  # an unknown format, a damaged file: its message says which
        st.error(f"Could not open the SAE: {error}")
        return None


def restore(spec: str) -> None:
    sae_edit(spec).pop()


def apply(spec: str, folder: Path, block: int, set_to: dict[int, float], scale: dict[int, float]) -> None:
    sae_edit(spec).set({"folder": str(folder), "block": block, "set_to": set_to, "scale": scale})


def sae_edited_model(model: vitviz.ViT, key: ModelKey, slot) -> tuple[vitviz.ViT, ModelKey]:
    """The model the page shows and its key: with the SAE edit the user applied, a banner saying so and a restore
    button, drawn in ``slot`` (an st.empty() the page draws in every run); or the model itself."""
    edit = sae_edit(key.spec).get()
    if not edit:
        return model, key
    path = Path(edit["folder"])
    try:
        sae = cached_sae(SAEFiles(str(path), stamp(path)))
        edited = with_sae(model, sae, edit["block"], scale=edit["scale"], set_to=edit["set_to"])
    except (SAEError, OSError, RuntimeError) as error:  # the SAE changed or went away since it was applied
        restore(key.spec)
        slot.error(f"The SAE edit was dropped: {error}")
        return model, key
    parts = [f"latent {j} set to {v:.3g}" for j, v in sorted(edit["set_to"].items())]
    parts += [f"latent {j} x {v:.3g}" for j, v in sorted(edit["scale"].items())]
    text, button = slot.container().columns([3, 1], vertical_alignment="center")
    text.warning(
        f"**Edited model.** SAE `{path.name}` on block {edit['block']}: {', '.join(parts)}. The predictions and every "
        "map below are this model's.",
        icon=":material/tune:",
    )
    button.button("Restore the model", on_click=restore, args=(key.spec,), key="restore_sae", help="Undo the edit")
    record = (
        str(path),
        stamp(path),
        edit["block"],
        tuple(sorted(("set", j, v) for j, v in edit["set_to"].items()))
        + tuple(sorted(("scale", j, v) for j, v in edit["scale"].items())),
    )
    return edited, dataclasses.replace(key, sae_edit=record)
