"""The photos behind an index: the index stores each image's path relative to its source (the manifest's
``source``), so showing or re-running an image reads it from that source again.

A folder's images are read directly (``root / path``, kept inside the root), a table's from its folder; a zip or a saved
dataset is opened again with ``open_source`` and read by image_id (the source's fixed order). A stream from the Hub
cannot be read back without the network, and is refused with a message.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vitviz.dataset.sources import SourceError, open_source

REREADABLE = ("folder", "zip", "table", "dataset")


def source_location(manifest: dict) -> tuple[str, Path]:
    """(kind, path) of the source the index was made from: "folder", "zip", "table" or "dataset", and its path."""
    description = str(manifest.get("source", {}).get("description", ""))
    kind, _, rest = description.partition(" ")
    if kind == "dataset":
        rest = rest.split(" split ")[0]
    if kind not in REREADABLE or not rest:
        raise SourceError(
            f"the index's images cannot be read back: its source is {description or 'not recorded'!r} "
            "(only folders, zips, tables of paths and saved datasets can be re-read)"
        )
    return kind, Path(rest)


def photo_reader(manifest: dict, allowed: Callable[[Path], bool] = lambda path: True) -> Callable[[int, str], bytes]:
    """A function (image_id, path) -> the image file's bytes, from the index's source. Raises SourceError when the
    source is gone, cannot be re-read or is not ``allowed``; the function raises OSError for a file that is missing now,
    or that lies outside its folder (a folder's images) or outside what is ``allowed`` (a table's paths)."""
    kind, location = source_location(manifest)
    if not allowed(location):
        raise SourceError(f"the index's source {location} is outside the folders this page may read")
    if not location.exists():
        raise SourceError(f"the index's source {location} is gone: its photos cannot be shown")
    if kind in ("folder", "table"):  # a table's relative paths are relative to its folder, as when indexing
        root = location.resolve() if kind == "folder" else location.resolve().parent

        def read_file(image_id: int, path: str) -> bytes:
            file = (root / path).resolve()
            if (kind == "folder" and not file.is_relative_to(root)) or not allowed(file):
                raise OSError(f"{path} lies outside the folders this index's photos may be read from")
            return file.read_bytes()

        return read_file
    entries = list(open_source(location, split=_split(manifest)))

    def read_entry(image_id: int, path: str) -> bytes:
        if not 0 <= image_id < len(entries) or entries[image_id].path != path:
            raise OSError(f"image {image_id} ({path}) is no longer in {location}: the source changed since indexing")
        return entries[image_id].read()

    return read_entry


def _split(manifest: dict) -> str | None:
    description = str(manifest.get("source", {}).get("description", ""))
    return description.split(" split ", 1)[1] if " split " in description else None
