"""Where the images come from: a folder, a zip, a CSV or Parquet list of paths, or a Hugging Face dataset.

Every source is a fixed order of entries (path relative to the source, optional label, and how to read the bytes).
Bytes are read only when an entry is indexed, so a process of a torchrun job reads only its own share. Labels follow
torchvision's ImageFolder convention: the first folder under the root names the class; images at the root have none.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from vitviz.loading.specs import HUB_PREFIX  # "hf:": Hub datasets are named as Hub models are
from vitviz.preprocessing import IMAGE_SUFFIXES, image_files

TABLE_SUFFIXES = {".csv", ".parquet"}


class SourceError(ValueError):
    """The source cannot be indexed; the message says why and what to give instead."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the source (a dataset row: "<split>/<row>" unless the row names its file)
    label: str | None  # the class name, when the source gives one
    read: Callable[[], bytes]  # the file's bytes; raises OSError (or anything) when unreadable


@dataclass(frozen=True)
class Source:
    description: str  # what was opened, for the manifest: "folder /data/cifar10/test"
    entries: Iterable[Entry]  # in a fixed order: position i is image_id i
    count: int | None  # how many entries; None for a stream of unknown length
    arguments: dict = field(default_factory=dict)  # open_source's arguments that open it again (for the manifest)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)


def open_source(
    spec: str | Path, path_column: str = "path", label_column: str | None = None, split: str | None = None
) -> Source:
    """The source ``spec`` names: a folder (of images, or a dataset saved with ``datasets.save_to_disk``), a .zip,
    a .csv / .parquet of paths, or ``hf:<dataset id>`` (streamed from the Hugging Face Hub)."""
    text = str(spec)
    local = not text.startswith(HUB_PREFIX)
    arguments = {
        "spec": str(Path(text).expanduser().resolve()) if local else text,
        "path_column": path_column,
        "label_column": label_column,
        "split": split,
    }
    return replace(_open(text, path_column, label_column, split), arguments=arguments)


def _open(text: str, path_column: str, label_column: str | None, split: str | None) -> Source:
    if text.startswith(HUB_PREFIX):
        return _hub_source(text.removeprefix(HUB_PREFIX), split, label_column)
    path = Path(text).expanduser()
    if not path.exists():
        raise SourceError(
            f"{path} does not exist: give a folder of images, a .zip, a .csv/.parquet of paths, "
            f"a dataset saved with datasets.save_to_disk, or {HUB_PREFIX}<dataset id>"
        )
    if path.is_dir():
        if any((path / name).is_file() for name in ("dataset_info.json", "dataset_dict.json", "state.json")):
            return _saved_dataset_source(path, split, label_column)
        return _folder_source(path)
    if path.suffix.lower() == ".zip":
        return _zip_source(path)
    if path.suffix.lower() in TABLE_SUFFIXES:
        return _table_source(path, path_column, label_column or "label", label_column is not None)
    raise SourceError(f"{path} is not a folder, .zip, .csv or .parquet file")


def _labelled(relative: list[PurePosixPath]) -> list[str | None]:
    """ImageFolder labels: the first folder of each path; None for a file at the root."""
    return [p.parts[0] if len(p.parts) > 1 else None for p in relative]


def _no_images(where: Path, found_files: bool) -> SourceError:
    what = "has files, but none is an image" if found_files else "is empty"
    return SourceError(f"{where} {what}: looked for {', '.join(sorted(IMAGE_SUFFIXES))} (in sub-folders too)")


def _folder_source(root: Path) -> Source:
    images = image_files(root)
    if not images:
        raise _no_images(root, any(p.is_file() for p in root.rglob("*")))
    relative = [PurePosixPath(p.relative_to(root).as_posix()) for p in images]
    entries = [Entry(str(r), label, p.read_bytes) for r, label, p in zip(relative, _labelled(relative), images)]
    return Source(f"folder {root.resolve()}", entries, len(entries))


def _zip_source(path: Path) -> Source:
    try:
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if not n.endswith("/") and not n.startswith("__MACOSX/"))
    except (zipfile.BadZipFile, OSError) as error:
        raise SourceError(f"{path} is not a readable zip: {error}") from None
    suffixes = IMAGE_SUFFIXES
    images = [n for n in names if PurePosixPath(n).suffix.lower() in suffixes]
    if not images:
        raise _no_images(path, bool(names))
    relative = [PurePosixPath(n) for n in images]
    tops = {r.parts[0] for r in relative}
    if len(tops) == 1 and all(len(r.parts) > 2 for r in relative):  # test/bird/1.jpg: one wrapping folder, then classes
        relative = [PurePosixPath(*r.parts[1:]) for r in relative]
    reader = _ZipReader(path)
    entries = [Entry(str(r), label, reader.opener(n)) for r, label, n in zip(relative, _labelled(relative), images)]
    return Source(f"zip {path.resolve()}", entries, len(entries))


class _ZipReader:
    """Reads members of one zip, opening it once per process (and again after a fork)."""

    def __init__(self, path: Path):
        self.path, self._archive, self._pid = path, None, None

    def opener(self, name: str) -> Callable[[], bytes]:
        return lambda: self.read(name)

    def read(self, name: str) -> bytes:
        if self._archive is None or self._pid != os.getpid():
            self._archive, self._pid = zipfile.ZipFile(self.path), os.getpid()
        return self._archive.read(name)


def _table_source(path: Path, path_column: str, label_column: str, label_required: bool) -> Source:
    import pandas as pd

    try:
        table = pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    except Exception as error:  # pandas raises many kinds for a bad file
        raise SourceError(f"{path} could not be read as a table: {error}") from None
    if path_column not in table.columns:
        raise SourceError(
            f"{path} has no {path_column!r} column (columns: {', '.join(map(str, table.columns))}); "
            "give the column of image paths with --path-column"
        )
    if label_required and label_column not in table.columns:
        raise SourceError(
            f"{path} has no label column {label_column!r} (columns: {', '.join(map(str, table.columns))})"
        )
    if table.empty:
        raise SourceError(f"{path} lists no images")
    labels = table[label_column] if label_column in table.columns else [None] * len(table)
    base = path.parent
    entries = []
    for name, label in zip(table[path_column], labels):
        file = base / str(name)  # relative paths are relative to the table's folder
        entries.append(Entry(str(name), None if pd.isna(label) else str(label), file.read_bytes))
    return Source(f"table {path.resolve()}", entries, len(entries))


def _image_and_label_columns(features, label_column: str | None) -> tuple[str, str | None]:
    """The dataset's image column (a datasets.Image feature) and its label column, if any."""
    import datasets

    images = [name for name, feature in features.items() if isinstance(feature, datasets.Image)]
    if not images:
        raise SourceError(f"the dataset has no image column (columns: {', '.join(features)})")
    if label_column is not None and label_column not in features:
        raise SourceError(f"the dataset has no label column {label_column!r} (columns: {', '.join(features)})")
    if label_column is None:
        label_column = next((n for n in ("label", "labels") if n in features), None)
    return images[0], label_column


def _label_name(features, column: str | None, value) -> str | None:
    import datasets

    if column is None or value is None:
        return None
    feature = features[column]
    return feature.int2str(value) if isinstance(feature, datasets.ClassLabel) else str(value)


def _image_bytes(value: dict) -> bytes:
    """A datasets.Image(decode=False) value: its bytes, or the file it points to."""
    if value.get("bytes") is not None:
        return value["bytes"]
    if value.get("path"):
        return Path(value["path"]).read_bytes()
    raise OSError("the row has neither image bytes nor a path")


def _saved_dataset_source(folder: Path, split: str | None, label_column: str | None) -> Source:
    import datasets

    try:
        dataset = datasets.load_from_disk(str(folder))
    except Exception as error:  # whatever datasets raises, said in one message
        raise SourceError(f"{folder} could not be opened with datasets.load_from_disk: {error}") from None
    if isinstance(dataset, datasets.DatasetDict):
        if split is None and len(dataset) > 1:
            raise SourceError(f"{folder} holds the splits {', '.join(dataset)}: choose one with --split")
        split = split or next(iter(dataset))
        if split not in dataset:
            raise SourceError(f"{folder} has no split {split!r}; it has {', '.join(dataset)}")
        dataset = dataset[split]
    image_column, label_column = _image_and_label_columns(dataset.features, label_column)
    raw = dataset.cast_column(image_column, datasets.Image(decode=False))
    if len(raw) == 0:
        raise SourceError(f"{folder} is an empty dataset")
    prefix = split or "rows"

    def entry(row: int) -> Entry:
        value = raw[row][image_column]
        name = value.get("path") or f"{prefix}/{row}"
        label = _label_name(dataset.features, label_column, raw[row][label_column] if label_column else None)
        return Entry(name, label, lambda: _image_bytes(value))

    return Source(
        f"dataset {folder.resolve()}" + (f" split {split}" if split else ""), _LazyEntries(entry, len(raw)), len(raw)
    )


class _LazyEntries:
    """Entries built on demand from row numbers: a large dataset is never listed whole."""

    def __init__(self, make: Callable[[int], Entry], count: int):
        self.make, self.count = make, count

    def __iter__(self) -> Iterator[Entry]:
        return (self.make(row) for row in range(self.count))


def _hub_source(dataset_id: str, split: str | None, label_column: str | None) -> Source:
    """A Hub dataset streamed row by row (nothing is downloaded in advance)."""
    import datasets

    split = split or "train"
    try:
        stream = datasets.load_dataset(dataset_id, split=split, streaming=True)
        features = stream.features
    except Exception as error:  # offline, unknown id, no such split...
        raise SourceError(
            f"could not stream the Hugging Face dataset {dataset_id!r} (split {split!r}): {error}; "
            "on a machine without the network, save it with datasets.save_to_disk elsewhere and "
            "index that folder"
        ) from None
    if features is None:
        raise SourceError(f"the Hub dataset {dataset_id!r} does not declare its features; save it to disk first")
    image_column, label_column = _image_and_label_columns(features, label_column)
    stream = stream.cast_column(image_column, datasets.Image(decode=False))

    def entries() -> Iterator[Entry]:
        for row, example in enumerate(stream):
            value = example[image_column]
            label = _label_name(features, label_column, example[label_column] if label_column else None)
            yield Entry(f"{split}/{row}", label, lambda value=value: _image_bytes(value))

    return Source(f"hub {dataset_id} split {split}", _Stream(entries), None)


class _Stream:
    def __init__(self, make: Callable[[], Iterator[Entry]]):
        self.make = make

    def __iter__(self) -> Iterator[Entry]:
        return self.make()


def read_entry(entry: Entry) -> tuple[bytes | None, str | None]:
    """The entry's bytes, or None and why they could not be read."""
    try:
        return entry.read(), None
    except Exception as error:  # a vanished file, a corrupt zip member, a broken row: never fatal
        return None, f"unreadable: {type(error).__name__}: {error}"
