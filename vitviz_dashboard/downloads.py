"""Download buttons: a tab's overlay as a PNG at the photo's full resolution and its maps as .npz, and one chart's
numbers as CSV or .npz. Every file is built only when its button is clicked (deferred data)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import streamlit as st

from vitviz.render import overlays
from vitviz_dashboard.page import Page

OVERLAY_PNG, MAPS_NPZ = "Overlay (PNG, full size)", "This tab's maps (.npz)"  # the download buttons under each tab


def downloads(page: Page, tab: str, maps: dict[str, np.ndarray], overlay: str | None = None) -> None:
    """Buttons for what this tab shows: the overlay of maps[overlay] as a PNG at the photo's full
    resolution, and the maps as .npz. Files are built only when a button is clicked (deferred data)."""
    stem = f"{Path(page.photo.name).stem}_{tab}".replace(" ", "_")
    arrays = {"".join(ch if ch.isalnum() else "_" for ch in name): value for name, value in maps.items()}

    def overlay_png() -> bytes:
        buffer = io.BytesIO()
        full_box = tuple(v / page.photo.scale for v in page.analysis.box)
        picture = overlays.overlay(
            page.photo.full, maps[overlay], page.settings.colormap, page.settings.alpha, full_box
        )
        picture.save(buffer, format="PNG")
        return buffer.getvalue()

    def maps_npz() -> bytes:
        return npz_bytes({"probabilities": page.analysis.probabilities, **arrays})

    left, right = st.columns(2)  # short labels, as in Features: at 800 px a half column holds about 25 characters
    if overlay is not None:
        left.download_button(
            OVERLAY_PNG,
            overlay_png,
            f"{stem}.png",
            "image/png",
            icon=":material/download:",
            help="The overlay drawn on the photo at its full resolution",
        )
    right.download_button(
        MAPS_NPZ,
        maps_npz,
        f"{stem}_maps.npz",
        "application/octet-stream",
        icon=":material/download:",
        help="Every map this tab shows, as NumPy arrays",
    )


def chart_download(container, page: Page, what: str, values, rows: str = "", columns: str = "") -> None:
    """A small button under one chart for its numbers, labelled by ``what`` ("mean distances": a few words, to fit
    half a column at 800 px): a 2-D array as a CSV table, with its ``rows`` and ``columns`` named ("layer", "head") in
    the first column and the header; a dict of arrays as one .npz."""
    stem = f"{Path(page.photo.name).stem}_{what}".replace(" ", "_")
    label = what[:1].upper() + what[1:]
    if isinstance(values, dict):
        container.download_button(
            f"{label} (.npz)",
            lambda: npz_bytes(values),
            f"{stem}.npz",
            "application/octet-stream",
            icon=":material/download:",
            help=f"The {what} shown above, as NumPy arrays",
        )
        return
    container.download_button(
        f"{label} (.csv)",
        lambda: csv_table(values, rows, columns).encode(),
        f"{stem}.csv",
        "text/csv",
        icon=":material/download:",
        help=f"The {what} shown above, one row per {rows}, one column per {columns}",
    )


def npz_bytes(arrays: dict) -> bytes:
    """Named arrays as one compressed NumPy .npz file."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def csv_table(values, rows: str, columns: str) -> str:
    """A 2-D array as CSV: a header naming each column ("head 0", ...), then one line per row ("layer 0", ...)."""
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"a CSV table needs a 2-D array; got shape {values.shape}")
    header = ",".join([f"{rows} \\ {columns}"] + [f"{columns} {c}" for c in range(values.shape[1])])
    lines = [header] + [",".join([f"{rows} {r}"] + [f"{v:.6g}" for v in row]) for r, row in enumerate(values)]
    return "\n".join(lines) + "\n"
