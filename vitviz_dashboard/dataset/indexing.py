"""Indexing a small folder from the page, by the code the command runs (vitviz.dataset.build.build_index), with a
progress bar. The source and the new index's folder are typed paths: both must lie inside the allowed folders.

The session's uploaded photos can be indexed too, as a small dataset of their own: they are written to the session's
own folder under the temporary folder (opening.SESSION_ROOT, which only this session may open), then indexed by the
same code with the Photo page's model. Each time a session does so, it removes the folders of sessions that have
not indexed photos for a day (SESSION_MAX_AGE_S)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path

import streamlit as st

import vitviz
from vitviz.dataset import IndexBusyError, IndexFormatError, SourceError
from vitviz.dataset.build import build_index, check_model
from vitviz.dataset.indexing import IndexOptions
from vitviz.dataset.sources import open_source
from vitviz.preprocessing import IMAGE_SUFFIXES, ImageError
from vitviz.text import PromptError, check_prompts, parse_prompts, prompt_set, template_set
from vitviz_dashboard.dataset.opening import OUTSIDE, SESSION_FOLDER, SESSION_ROOT, checked_model_spec
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_model_path
from vitviz_dashboard.sidebar.model_picker import HUB_SPEC, PATH_OR_UPLOAD
from vitviz_dashboard.sidebar.prompts import (
    DEFAULT_PROMPTS,
    ENSEMBLE_KEY,
    MAX_PROMPTS,
    MY_PROMPTS,
    PROMPTS_KEY,
    SOURCE_KEY,
    zero_shot_model,
)

MAX_IMAGES = 5000  # larger datasets: `vitviz index` on the command line (or torchrun)
BATCH = 32
OPENED = "dataset|opened"  # a folder just indexed, to be typed into the sidebar's field in the next run
SESSION_MAX_AGE_S = 24 * 3600  # a session's photo indexes are removed a day after the session last made one


def index_form() -> None:
    """Source folder, output folder and model; the Index button runs the pass with progress and opens the result."""
    with st.expander(f"Index a folder of images here (up to {MAX_IMAGES:,})"):
        source_text = st.text_input("Folder of images (class sub-folders give labels), or a .zip", key="dataset|source")
        out_text = st.text_input("New index folder", key="dataset|out")
        spec = st.text_input("Model", "default", key="dataset|model", help="a spec, or a checkpoint's path")
        blocks, paths, labels = st.columns(3)
        activations = blocks.text_input(
            "Store activations of blocks",
            key="dataset|activations",
            placeholder="3 11",
            help="0-based blocks whose every output token is stored (fp16), for `vitviz sae train` and the Features "
            "tab (the command's --activations)",
        )
        path_column = paths.text_input("CSV/Parquet: path column", "path", key="dataset|path_column")
        label_column = labels.text_input("CSV/Parquet: label column", key="dataset|label_column", placeholder="none")
        if st.button("Index", key="dataset|index", disabled=not (source_text.strip() and out_text.strip())):
            out = run(source_text, out_text, spec, activations, path_column, label_column)
            if out is not None:
                st.session_state[OPENED] = str(out)
                st.rerun()
    session_photos_form()


def activation_blocks(text: str) -> tuple[int, ...]:
    """The typed blocks ("3 11", "3, 11"), sorted and distinct; ValueError for anything but whole numbers >= 0."""
    words = text.replace(",", " ").split()
    if not all(word.isdigit() for word in words):
        raise ValueError(f"blocks are whole numbers from 0, separated by spaces; got {text.strip()!r}")
    return tuple(sorted({int(word) for word in words}))


def run(
    source_text: str, out_text: str, spec: str, activations: str = "", path_column: str = "path", label_column: str = ""
) -> Path | None:
    """Index the source into a new folder; the folder, or None with the reason shown."""
    try:
        blocks = activation_blocks(activations)
    except ValueError as error:
        st.error(f"Store activations of blocks: {error}")
        return None
    roots = allowed_model_dirs()
    try:
        source_path = check_model_path(source_text, roots)
        out = check_model_path(out_text, roots)
        model_spec = checked_model_spec(spec.strip())
    except ModelRefused as refusal:
        st.error(OUTSIDE if "VITVIZ_MODEL_DIRS" in str(refusal) else str(refusal))
        return None
    if out.exists() and any(out.iterdir()):
        st.error(f"`{out_text.strip()}` is not empty: give a new folder for the index.")
        return None
    columns = (path_column.strip() or "path", label_column.strip() or None)
    return index_folder(source_path, out, model_spec, activations=blocks, columns=columns)


def index_folder(
    source_path: Path,
    out: Path,
    model_spec: str,
    with_prompts: bool = False,
    activations: tuple[int, ...] = (),
    columns: tuple[str, str | None] = ("path", None),
) -> Path | None:
    """Index the (checked) source into the (checked, new) folder with the (checked) model, with a progress bar; the
    folder, or None with the reason shown. ``with_prompts``: a model with a text tower is indexed as the zero-shot
    model of the Photo page's prompts (its manifest records them, as the command's --prompts / --prompt-set);
    ``activations``: the blocks whose output tokens are stored; ``columns``: a CSV/Parquet source's path and label
    columns."""
    from vitviz_dashboard.cache.results import get_model

    try:
        source = open_source(source_path, *columns)
        if source.count is not None and source.count > MAX_IMAGES:
            st.error(
                f"{source_path} holds {source.count:,} images; the page indexes up to {MAX_IMAGES:,}. "
                f"Run `vitviz index {source_path} --model {model_spec} --out {out}` instead."
            )
            return None
        model = get_model(model_spec)
        extra = None
        if with_prompts and model.text_tower is not None:
            prompts, templates, extra = photo_page_prompts()
            model = zero_shot_model(model, model_spec, tuple(prompts), None if templates is None else tuple(templates))
        check_model(model)
        layers = model.config.num_layers
        if any(block >= layers for block in activations):
            st.error(f"Store activations of blocks: the model has blocks 0 to {layers - 1}; got {list(activations)}")
            return None
        bar, done = st.progress(0.0, text="Indexing..."), [0]

        def advance(count: int) -> None:
            done[0] += count
            bar.progress(min(1.0, done[0] / max(1, source.count or 1)), text=f"Indexed {done[0]:,} images")

        build_index(
            model,
            source,
            out,
            IndexOptions(activations=activations),
            model_spec,
            BATCH,
            progress=advance,
            model_extra=extra,
        )
    except (SourceError, IndexFormatError, IndexBusyError, ImageError, PromptError) as error:
        st.error(f"Could not index: {error}")
        return None
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load the model `{model_spec}`: {error}")
        return None
    return out


def photo_page_model() -> str:
    """The model the Photo page shows (its sidebar's picker, kept through visits here: page.PHOTO_WIDGETS): a spec, a
    typed spec or a checkpoint's path; "default" when it names none this page can reload (an uploaded checkpoint, an
    empty field)."""
    choice = str(st.session_state.get("model_box") or "default")
    if choice == PATH_OR_UPLOAD:
        return str(st.session_state.get("model_path") or "").strip() or "default"
    return "default" if choice == HUB_SPEC else choice


def photo_page_prompts() -> tuple[list[str], list[str] | None, dict]:
    """The Photo page's prompts (sidebar/prompts.py's kept keys, its defaults when it never showed them): the classes,
    the templates (None: read as typed) and the manifest's record of them, as `vitviz index` writes it."""
    source = st.session_state.get(SOURCE_KEY, MY_PROMPTS)
    if source == MY_PROMPTS:
        prompts = check_prompts(parse_prompts(st.session_state.get(PROMPTS_KEY, DEFAULT_PROMPTS)), MAX_PROMPTS)
        return prompts, None, {"prompts": prompts, "prompt_set": None, "templates": None}
    templates = "openai-80" if st.session_state.get(ENSEMBLE_KEY) else "photo"
    record = {"prompts": None, "prompt_set": source, "templates": templates}
    return list(prompt_set(source)), list(template_set(templates)), record


def session_photos_form() -> None:
    """A button that indexes the session's uploaded photos (the Photo page's images) and opens the index."""
    photos = st.session_state.get("history", {})  # images.py: name -> ImageFile, uploads and opened images
    spec = photo_page_model()
    with st.expander(f"Index this session's photos ({len(photos)})"):
        about = (
            f"The photos uploaded on the Photo page, as a small dataset of their own, indexed with `{spec}` (the "
            "Photo page's model, with its prompts as the classes for a model with a text tower). The index lives in "
            "a temporary folder of this session."
        )
        if st.button("Index the session's photos", key="dataset|index_session", disabled=not photos, help=about):
            out = index_session_photos(photos, spec)
            if out is not None:
                st.session_state[OPENED] = str(out)
                st.rerun()


def index_session_photos(photos: dict, spec: str) -> Path | None:
    """Write the photos into the session's own folder and index them there (the same photos with the same model and
    prompts again: the index made before is opened). The index's folder, or None with the reason shown."""
    try:
        model_spec = checked_model_spec(spec)
    except ModelRefused as refusal:
        st.error(str(refusal))
        return None
    if SESSION_FOLDER not in st.session_state:
        st.session_state[SESSION_FOLDER] = str(SESSION_ROOT / secrets.token_hex(16))
    own = Path(st.session_state[SESSION_FOLDER])
    own.mkdir(parents=True, exist_ok=True)
    os.utime(own)  # in use: the sweep below, in other sessions, leaves it alone
    sweep_session_folders(SESSION_ROOT, keep=own)
    prompts = [st.session_state.get(key) for key in (SOURCE_KEY, PROMPTS_KEY, ENSEMBLE_KEY)]
    digest = hashlib.sha256(repr((sorted((n, f.key) for n, f in photos.items()), model_spec, prompts)).encode())
    folder = Path(st.session_state[SESSION_FOLDER]) / digest.hexdigest()[:16]
    out = folder / "index"
    if (out / "manifest.json").is_file() and open_index_complete(out):
        return out
    shutil.rmtree(out, ignore_errors=True)  # a run stopped half-way (a closed tab): the folder is this session's own
    images = folder / "photos"
    images.mkdir(parents=True, exist_ok=True)
    for position, (name, file) in enumerate(photos.items()):
        (images / file_name(position, name)).write_bytes(file.data)
    return index_folder(images, out, model_spec, with_prompts=True)


def sweep_session_folders(root: Path, keep: Path, max_age_s: float = SESSION_MAX_AGE_S) -> list[Path]:
    """Remove the session folders under ``root`` that no session has used for ``max_age_s`` (Streamlit says nothing
    when a session ends, so a folder's age is all there is to go by); ``keep`` stays. Returns what was removed."""
    removed = []
    now = time.time()
    for folder in root.iterdir() if root.is_dir() else ():
        try:
            stale = folder.is_dir() and folder != keep and now - folder.stat().st_mtime > max_age_s
        except OSError:  # removed by another session's sweep meanwhile
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def open_index_complete(out: Path) -> bool:
    """Whether the folder holds a finished index (a killed run's is indexed again)."""
    try:
        return bool(json.loads((out / "manifest.json").read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def file_name(position: int, name: str) -> str:
    """A safe file name for a session image: its position (names may repeat after cleaning) and its name's letters,
    digits, dots and dashes, with an image suffix (the source lists files by suffix; the bytes say the format)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[-80:]
    return f"{position:03d}_{cleaned}" + ("" if Path(cleaned).suffix.lower() in IMAGE_SUFFIXES else ".png")
