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
from vitviz.text import PromptError
from vitviz_dashboard.cache.models import zero_shot_model
from vitviz_dashboard.dataset.opening import OUTSIDE, SESSION_ROOT, checked_model_spec
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_model_path
from vitviz_dashboard.state import (
    INDEXED,
    PROMPT_ENSEMBLE,
    PROMPT_SOURCE,
    PROMPTS,
    SESSION_FOLDER,
    dataset_key,
    photo_page_model,
    photo_page_prompts,
    session_photos,
)

MAX_IMAGES = 5000  # larger datasets: `vitviz index` on the command line (or torchrun)
BATCH = 32
SESSION_MAX_AGE_S = 24 * 3600  # a session's photo indexes are removed a day after the session last made one


def index_form() -> None:
    """Source folder, output folder and model; the Index button runs the pass with progress and opens the result."""
    with st.expander(f"Index a folder of images here (up to {MAX_IMAGES:,})"):
        source_text = st.text_input(
            "Folder of images (class sub-folders give labels), or a .zip", key=dataset_key("source")
        )
        out_text = st.text_input("New index folder", key=dataset_key("out"))
        spec = st.text_input("Model", "default", key=dataset_key("model"), help="a spec, or a checkpoint's path")
        blocks, paths, labels = st.columns(3)
        activations = blocks.text_input(
            "Store activations of blocks",
            key=dataset_key("activations"),
            placeholder="3 11",
            help="0-based blocks whose every output token is stored (fp16), for `vitviz sae train` and the Features "
            "tab (the command's --activations)",
        )
        path_column = paths.text_input("CSV/Parquet: path column", "path", key=dataset_key("path_column"))
        label_column = labels.text_input(
            "CSV/Parquet: label column", key=dataset_key("label_column"), placeholder="none"
        )
        if st.button("Index", key=dataset_key("index"), disabled=not (source_text.strip() and out_text.strip())):
            out = run(source_text, out_text, spec, activations, path_column, label_column)
            if out is not None:
                INDEXED.set(str(out))  # the sidebar's field opens it in the next run
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


def session_photos_form() -> None:
    """A button that indexes the session's uploaded photos (the Photo page's images) and opens the index."""
    photos = session_photos()
    spec = photo_page_model()
    with st.expander(f"Index this session's photos ({len(photos)})"):
        about = (
            f"The photos uploaded on the Photo page, as a small dataset of their own, indexed with `{spec}` (the "
            "Photo page's model, with its prompts as the classes for a model with a text tower). The index lives in "
            "a temporary folder of this session."
        )
        if st.button("Index the session's photos", key=dataset_key("index_session"), disabled=not photos, help=about):
            out = index_session_photos(photos, spec)
            if out is not None:
                INDEXED.set(str(out))  # the sidebar's field opens it in the next run
                st.rerun()


def index_session_photos(photos: dict, spec: str) -> Path | None:
    """Write the photos into the session's own folder and index them there (the same photos with the same model and
    prompts again: the index made before is opened). The index's folder, or None with the reason shown."""
    try:
        model_spec = checked_model_spec(spec)
    except ModelRefused as refusal:
        st.error(str(refusal))
        return None
    own = Path(SESSION_FOLDER.setdefault(str(SESSION_ROOT / secrets.token_hex(16))))
    own.mkdir(parents=True, exist_ok=True)
    os.utime(own)  # in use: the sweep below, in other sessions, leaves it alone
    sweep_session_folders(SESSION_ROOT, keep=own)
    prompts = [key.get() for key in (PROMPT_SOURCE, PROMPTS, PROMPT_ENSEMBLE)]
    digest = hashlib.sha256(repr((sorted((n, f.key) for n, f in photos.items()), model_spec, prompts)).encode())
    folder = own / digest.hexdigest()[:16]
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
