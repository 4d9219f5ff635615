"""Opening an index typed into the sidebar, the photos behind it, the index's model, and sending one image to the
Photo page.

A typed folder is checked against the folders model paths are checked against (model_dirs.py: VITVIZ_MODEL_DIRS)
before anything looks at it, and the index's own source and model, which its manifest names, are checked the same
way before the page reads them: a hand-edited manifest must not make the page read /etc.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import streamlit as st
from PIL import Image

import vitviz
from vitviz.dataset import DatasetIndex, IndexFormatError, SourceError
from vitviz.preprocessing import ImageError, Preprocessing
from vitviz.text import PROMPT_SETS, template_set
from vitviz_dashboard.cache.dataset import IndexKey, cached_index, model_fingerprint, photo_reader_of, thumbnail_photo
from vitviz_dashboard.images import add_image
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_hub_spec, check_model_path
from vitviz_dashboard.sidebar.model_picker import MODEL_CHOICES, looks_like_path
from vitviz_dashboard.state import (
    MY_PROMPTS,
    PATH_OR_UPLOAD,
    PROMPT_ENSEMBLE,
    PROMPT_SOURCE,
    PROMPTS,
    SESSION_FOLDER,
    pick_photo_page_model,
    show_on_photo_page,
)

OUTSIDE = (
    "This page opens indexes, image folders and model paths only inside the folders that the server's owner allows "
    "(VITVIZ_MODEL_DIRS, the same folders as model paths; by default the checkpoints folder and the working directory)."
)
PATHS_OFF = "The server's owner has turned off opening paths on this page (VITVIZ_MODEL_DIRS is empty)."
# the session's own folder (its uploaded photos and their index, indexing.py), under the temporary folder: the page
# opens and reads it like an allowed folder, for this session only (its name is random, kept in the session's state)
SESSION_ROOT = Path(tempfile.gettempdir()) / "vitviz-session-indexes"


def page_roots() -> list[Path]:
    """The folders this session may open indexes and read photos in: the allowed folders, and its own folder."""
    own = SESSION_FOLDER.get()
    return [*allowed_model_dirs(), *([Path(own)] if own else [])]


def open_typed_index(text: str) -> DatasetIndex | None:
    """The index in the typed folder, or None with a message saying what is wrong (never a traceback)."""
    if not text.strip():
        st.info(
            "Enter the folder of an index made by `vitviz index SOURCE --model SPEC --out DIR` in the sidebar "
            "(docs/dataset-index.md)."
        )
        return None
    roots = page_roots()
    if not roots:
        st.error(PATHS_OFF)
        return None
    try:
        folder = check_model_path(text, roots)
    except ModelRefused:
        st.error(OUTSIDE)
        return None
    if not folder.is_dir():
        st.error(f"There is no folder `{text.strip()}`: enter the folder `vitviz index --out` wrote.")
        return None
    if not any(folder.iterdir()):
        st.error(
            f"`{text.strip()}` is empty: make an index in it with `vitviz index SOURCE --model SPEC --out "
            f"{text.strip()}`."
        )
        return None
    try:
        return cached_index(str(folder), manifest_stamp(folder))
    except (IndexFormatError, ValueError, OSError) as error:  # a damaged index: its message says what to do
        st.error(f"Could not open the index: {error}")
        return None


def manifest_stamp(folder: Path) -> int:
    """When the manifest last changed: a folder indexed again opens afresh."""
    try:
        return os.stat(folder / "manifest.json").st_mtime_ns
    except OSError:
        return 0


def index_key(index: DatasetIndex) -> IndexKey:
    """What names this index in cache keys: its folder and its manifest's stamp."""
    return IndexKey(str(index.folder), manifest_stamp(index.folder))


def _allowed(path: Path) -> bool:
    try:
        check_model_path(str(path), page_roots())
        return True
    except ModelRefused:
        return False


def read_photo(index: DatasetIndex, image_id: int, path: str) -> tuple[bytes | None, str]:
    """The image file's bytes from the index's source, or None and why (a source moved, outside the allowed folders,
    a file deleted since indexing)."""
    try:
        return photo_reader_of(index_key(index), index, _allowed)(int(image_id), str(path)), ""
    except (SourceError, OSError) as error:
        return None, str(error)


def photo_bytes(index: DatasetIndex, image_id: int, path: str) -> bytes | None:
    """``read_photo``'s bytes, or None with its reason shown."""
    data, reason = read_photo(index, image_id, path)
    if data is None:
        st.warning(f"Cannot show image {image_id} ({path}): {reason}")
    return data


def photo(index: DatasetIndex, image_id: int, path: str) -> tuple[Image.Image, tuple] | None:
    """The photo (long side at most PHOTO_SIDE) and the box the model's input came from, in its pixels; or None."""
    data = photo_bytes(index, image_id, path)
    if data is None:
        return None
    try:
        image = thumbnail_photo(index_key(index), int(image_id), str(path), _data=data)
    except ImageError as error:
        st.warning(f"Cannot show image {image_id} ({path}): {error}")
        return None
    preprocessing = Preprocessing.from_dict(index.manifest["model"]["preprocessing"])
    return image, preprocessing.crop_box(*image.size)


def checked_model_spec(spec: str) -> str:
    """The index's model spec when the page may load it (a path inside the allowed folders, or a spec naming no local
    path), the checked real path for a path; else ModelRefused."""
    if spec in MODEL_CHOICES:
        return spec
    if looks_like_path(spec):
        return str(check_model_path(spec, allowed_model_dirs()))
    return check_hub_spec(spec)


def open_in_photo_page(index: DatasetIndex, image_id: int, path: str, photo_page: st.Page) -> None:
    """Make the image one of the session's images and the index's model the Photo page's model, then go there."""
    data = photo_bytes(index, image_id, path)
    if data is None:
        return
    name, refusal = add_image(f"{index.folder.name}: {path}", data)  # an upload's checks and the session's limits
    if refusal:
        st.error(f"Cannot open image {image_id} ({path}) in the Photo page: {refusal}")
        return
    show_on_photo_page(name)
    spec = str(index.manifest["model"].get("spec", ""))
    for key, value in photo_prompts(index.manifest["model"]).items():  # a zero-shot index: its classes
        st.session_state[key] = value
    if spec in MODEL_CHOICES or not looks_like_path(spec):
        pick_photo_page_model(spec)  # the sidebar's picker: an option, or a typed spec
    else:  # its path field (the sidebar checks it against the allowed folders)
        pick_photo_page_model(PATH_OR_UPLOAD, spec)
    st.switch_page(photo_page)


def photo_prompts(model: dict) -> dict[str, object]:
    """The Photo page's prompt settings (sidebar/prompts.py's kept keys) that give the classes of a zero-shot index,
    from its manifest's model entry (`vitviz index --prompts/--prompt-set/--templates`); empty for any other index.
    Typed prompts with one template are typed through it (the same text embedded); the sidebar reads typed prompts
    as they are, so OpenAI's 80 templates over typed prompts cannot be given and the prompts go as typed."""
    prompt_set, templates = model.get("prompt_set"), model.get("templates")
    if prompt_set in PROMPT_SETS:
        return {str(PROMPT_SOURCE): prompt_set, str(PROMPT_ENSEMBLE): templates == "openai-80"}
    prompts = [str(p) for p in model.get("prompts") or []]
    if not prompts:
        return {}
    if templates == "photo":
        prompts = [template_set("photo")[0].format(p) for p in prompts]
    return {str(PROMPT_SOURCE): MY_PROMPTS, str(PROMPTS): "\n".join(prompts)}


def model_of(index: DatasetIndex) -> vitviz.ViT | None:
    """The index's model, loaded when the page may load it (else None with the reason shown)."""
    from vitviz_dashboard.cache.results import get_model

    spec = str(index.manifest["model"].get("spec", ""))
    try:
        model = get_model(checked_model_spec(spec))
    except ModelRefused as refusal:
        st.error(f"The index's model `{spec}` cannot be loaded on this page: {refusal}")
        return None
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load the index's model `{spec}`: {error}")
        return None
    if model_fingerprint(model) != index.manifest["model"].get("fingerprint"):
        st.error(
            f"The model `{spec}` has other weights now than when this index was made (its weight fingerprint "
            "differs): its queries and keys would not be the index's. Index the dataset again."
        )
        return None
    return model
