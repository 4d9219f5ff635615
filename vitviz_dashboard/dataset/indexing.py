"""Indexing a small folder from the page, by the code the command runs (vitviz.dataset.build.build_index), with a
progress bar. The source and the new index's folder are typed paths: both must lie inside the allowed folders."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import vitviz
from vitviz.dataset import IndexBusyError, IndexFormatError, SourceError
from vitviz.dataset.build import build_index, check_model
from vitviz.dataset.indexing import IndexOptions
from vitviz.dataset.sources import open_source
from vitviz.preprocessing import ImageError
from vitviz_dashboard.dataset.opening import OUTSIDE, checked_model_spec
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_model_path

MAX_IMAGES = 5000  # larger datasets: `vitviz index` on the command line (or torchrun)
BATCH = 32
OPENED = "dataset|opened"  # a folder just indexed, to be typed into the sidebar's field in the next run


def index_form() -> None:
    """Source folder, output folder and model; the Index button runs the pass with progress and opens the result."""
    with st.expander(f"Index a folder of images here (up to {MAX_IMAGES:,})"):
        source_text = st.text_input("Folder of images (class sub-folders give labels), or a .zip", key="dataset|source")
        out_text = st.text_input("New index folder", key="dataset|out")
        spec = st.text_input("Model", "default", key="dataset|model", help="a spec, or a checkpoint's path")
        if st.button("Index", key="dataset|index", disabled=not (source_text.strip() and out_text.strip())):
            out = run(source_text, out_text, spec)
            if out is not None:
                st.session_state[OPENED] = str(out)
                st.rerun()


def run(source_text: str, out_text: str, spec: str) -> Path | None:
    """Index the source into a new folder; the folder, or None with the reason shown."""
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
    from vitviz_dashboard.cache.results import get_model

    try:
        source = open_source(source_path)
        if source.count is not None and source.count > MAX_IMAGES:
            st.error(
                f"{source_path} holds {source.count:,} images; the page indexes up to {MAX_IMAGES:,}. "
                f"Run `vitviz index {source_path} --model {model_spec} --out {out}` instead."
            )
            return None
        model = get_model(model_spec)
        check_model(model)
        bar, done = st.progress(0.0, text="Indexing..."), [0]

        def advance(count: int) -> None:
            done[0] += count
            bar.progress(min(1.0, done[0] / max(1, source.count or 1)), text=f"Indexed {done[0]:,} images")

        build_index(model, source, out, IndexOptions(), model_spec, BATCH, progress=advance)
    except (SourceError, IndexFormatError, IndexBusyError, ImageError) as error:
        st.error(f"Could not index: {error}")
        return None
    except vitviz.ModelLoadError as error:
        st.error(f"Could not load the model `{spec}`: {error}")
        return None
    return out
