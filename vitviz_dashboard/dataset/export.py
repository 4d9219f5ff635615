"""A selection taken away: its images' rows (image_id first) as CSV or Parquet, downloaded from the page; or a
sub-index (vitviz.dataset.subset) written into a new folder inside the allowed folders, for `vitviz sae` or the
benchmark. A selection made by a similarity search carries a ``similarity`` column (after ``image_id``), and images
with tags (vitviz/dataset/tags.py) a ``tags`` column, a list per image. In the CSV, a list column (``top5_classes``,
``high_norm_patches``, ``tags``...) is written as a JSON array per cell (``["airplane", "ship"]``), which
``json.loads`` reads back; Parquet keeps lists as lists."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import streamlit as st

from vitviz.dataset import DatasetIndex
from vitviz.dataset.subset import SubsetError, write_subindex
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, allowed_model_dirs, check_model_path
from vitviz_dashboard.state import dataset_key

CHUNK = 5_000  # ids in one query's IN list


def rows_of(index: DatasetIndex, ids: Sequence[int]) -> pd.DataFrame:
    """The images table's rows of these ids, in their order (ids the index lacks are left out)."""
    ids = [int(i) for i in ids]
    parts = [
        index.query(f"SELECT * FROM images WHERE image_id IN ({', '.join(map(str, ids[s : s + CHUNK]))})", CHUNK)
        for s in range(0, len(ids), CHUNK)
    ]
    if not parts:
        return index.query("SELECT * FROM images", limit=1).iloc[:0]
    frame = pd.concat(parts).set_index("image_id")
    return frame.reindex([i for i in ids if i in frame.index]).reset_index()


def selection_rows(index: DatasetIndex, selection) -> pd.DataFrame:
    """The selection's rows (``rows_of``), with its similarity scores after ``image_id`` when a search made it, and
    a ``tags`` column (a list per image, empty for untagged ones) when any of them is tagged."""
    rows = rows_of(index, selection.ids)
    if selection.scores is not None:
        scores = dict(zip(selection.ids, selection.scores))
        rows.insert(1, "similarity", rows["image_id"].map(scores).astype("float64"))
    try:
        tagged = index.tags(rows["image_id"].tolist()) if len(rows) else None
    except ValueError:  # a tags file that cannot be read: the Grid's captions say so
        tagged = None
    if tagged is not None and len(tagged):
        lists = tagged.groupby("image_id")["tag"].agg(list)
        rows["tags"] = [list(lists.get(i, [])) for i in rows["image_id"]]
    return rows


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def plain(value):
    """A NumPy array or scalar as Python lists and numbers; float32 values by their shortest text (0.63303, not
    0.6330299973487854), as the CSV's float32 columns are written."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and value.dtype.itemsize < 8:
            return [float(str(x)) for x in value.ravel()] if value.ndim == 1 else [plain(row) for row in value]
        return [plain(x) for x in value] if value.dtype == object else value.tolist()
    if isinstance(value, np.floating) and value.dtype.itemsize < 8:
        return float(str(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [plain(x) for x in value]
    return value


def json_cell(value):
    """A list or array cell as a JSON array (NumPy's own text, ``['a' 'b']``, parses as nothing); others as they are."""
    if isinstance(value, np.ndarray | list | tuple):
        return json.dumps(plain(value), default=str)
    return value


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """The rows as CSV, every list column's cells as JSON arrays."""
    frame = frame.copy()
    for column in frame.columns:
        if pd.api.types.is_object_dtype(frame[column]):  # lists and arrays are objects; strings need no change
            frame[column] = frame[column].map(json_cell)
    return frame.to_csv(index=False).encode()


def file_stem(title: str) -> str:
    """A file name from the selection's title: letters, digits and dashes."""
    return re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:60] or "selection"


def draw(index: DatasetIndex, selection) -> None:
    """Download buttons for the selection's rows."""
    rows = selection_rows(index, selection)
    stem = file_stem(selection.title)
    st.markdown("**Export the selection**")
    left, right = st.columns(2)
    left.download_button(
        "Rows as CSV",
        csv_bytes(rows),
        f"{stem}.csv",
        "text/csv",
        key=dataset_key("export_csv"),
        icon=":material/download:",
    )
    right.download_button(
        "Rows as Parquet",
        parquet_bytes(rows),
        f"{stem}.parquet",
        "application/vnd.apache.parquet",
        key=dataset_key("export_parquet"),
        icon=":material/download:",
    )
    subindex_form(index, selection)


def subindex_form(index: DatasetIndex, selection) -> None:
    """A folder typed in, and the selection written there as an index of its own."""
    with st.form(dataset_key("subindex_form"), border=False):
        typed = st.text_input(
            "Sub-index folder (new, inside the allowed folders)",
            key=dataset_key("subindex_folder"),
            placeholder="cifar-index-wrong-cats/",
        )
        submitted = st.form_submit_button("Write a sub-index", icon=":material/create_new_folder:")
    if not submitted:
        return
    try:
        out = check_model_path(typed, allowed_model_dirs())
        with st.spinner(f"Writing {len(selection.ids):,} images' rows and arrays..."):
            written = write_subindex(index, selection.ids, out)
    except ModelRefused as refusal:
        st.error(str(refusal))
        return
    except (SubsetError, OSError) as error:
        st.error(f"No sub-index written: {error}")
        return
    st.success(
        f"Wrote {len(selection.ids):,} images to `{written}`: open it here, or train an SAE on it with "
        f"`vitviz sae train {written} --block B --out DIR`.",
        icon=":material/check_circle:",
    )
