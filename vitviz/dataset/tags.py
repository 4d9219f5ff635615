"""Tags on images, kept beside an index (FiftyOne's sample tags): ``DIR/tags.parquet``, one row per (image_id, tag).

The index's own files are immutable and checksummed (checks.py); tags are the researcher's notes about them, so they
live in a file of their own that no check reads and `vitviz index --verify` never sees. Every change is a
read-modify-write under an flock on ``DIR/.beside.lock`` (two sessions tagging at once both keep their tags), written
to a temporary file and renamed into place, so a reader (a query, another session) sees the old file or the new one,
never half of one. The SQL of ``index.query`` sees the file as the view ``tags`` (sandbox_child.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd

TAGS = "tags.parquet"
LOCK = ".beside.lock"  # held while a file beside the index (tags, saved views) is read, changed and written
LOCK_SECONDS = 10.0  # how long a writer waits for another's change before giving up
MAX_TAG = 64  # characters of a tag
TAG = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.:+-]{{0,{MAX_TAG - 1}}}")
TAG_RULE = f"1 to {MAX_TAG} letters, digits and _ . : + -, beginning with a letter or digit"
MAX_BYTES = 256 << 20  # a tags file larger than this is not one this module wrote


class TagError(ValueError):
    """A tag refused (its name), or a tags file that cannot be read or written; the message says why."""


def check_tag(tag: object) -> str:
    """The tag when it is a valid name (surrounding spaces dropped), else TagError naming the rule."""
    text = tag.strip() if isinstance(tag, str) else tag
    if not isinstance(text, str) or not TAG.fullmatch(text):
        shown = repr(tag)[:80]
        raise TagError(f"a tag is {TAG_RULE}; {shown} is not")
    return text


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the index folder's lock of the files beside it, waiting up to LOCK_SECONDS for another writer."""
    try:
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise TagError(f"cannot write beside the index in {folder}: {error.strerror or error}") from None
    try:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    busy = f"{folder / LOCK} is held by another writer for over {LOCK_SECONDS:g} s; try again"
                    raise TagError(busy) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file in the same folder, synced and renamed into place."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def plain_file(path: Path) -> os.stat_result | None:
    """The file's stat when it is a regular file (not a link, which could point outside the index); None when absent;
    TagError for anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise TagError(f"{path} is not a regular file (a link or a folder?): delete it")
    return info


def empty() -> pd.DataFrame:
    return pd.DataFrame({"image_id": pd.Series([], dtype="int64"), "tag": pd.Series([], dtype="object")})


def read_tags(folder: Path) -> pd.DataFrame:
    """Every (image_id, tag) of the index in ``folder``, sorted by tag then image; empty when none was ever written."""
    path = folder / TAGS
    info = plain_file(path)
    if info is None:
        return empty()
    if info.st_size > MAX_BYTES:
        raise TagError(f"{path} is {info.st_size:,} bytes, more than a tags file holds: delete it")
    try:
        frame = pd.read_parquet(path)
    except Exception as error:  # pyarrow's errors for a damaged file are of several kinds
        raise TagError(f"{path} is not a readable tags file ({str(error)[:120]}): delete it") from None
    if list(frame.columns) != ["image_id", "tag"] or frame["image_id"].dtype.kind != "i":
        raise TagError(f"{path} is not a tags file (columns image_id, tag): delete it")
    return frame.astype({"image_id": "int64"})


def _write(folder: Path, frame: pd.DataFrame) -> None:
    frame = frame.drop_duplicates().sort_values(["tag", "image_id"], kind="stable").reset_index(drop=True)
    buffer = io.BytesIO()
    frame.astype({"image_id": "int64", "tag": "string"}).to_parquet(buffer, index=False)
    try:
        write_atomically(folder / TAGS, buffer.getvalue())
    except OSError as error:
        raise TagError(f"cannot write {folder / TAGS}: {error.strerror or error}") from None


def add_tag(folder: Path, image_ids: Iterable[int], tag: str) -> int:
    """Tag these images (ids checked by the caller); how many were not tagged so before."""
    tag, ids = check_tag(tag), sorted({int(i) for i in image_ids})
    with locked(folder):
        frame = read_tags(folder)
        had = set(frame.loc[frame["tag"] == tag, "image_id"].tolist())
        new = [i for i in ids if i not in had]
        if new:
            _write(folder, pd.concat([frame, pd.DataFrame({"image_id": new, "tag": tag})], ignore_index=True))
    return len(new)


def remove_tag(folder: Path, image_ids: Iterable[int], tag: str) -> int:
    """Take the tag off these images; how many had it."""
    tag, ids = check_tag(tag), {int(i) for i in image_ids}
    with locked(folder):
        frame = read_tags(folder)
        gone = (frame["tag"] == tag) & frame["image_id"].isin(ids)
        if gone.any():
            _write(folder, frame[~gone])
    return int(gone.sum())


def sql_source(folder: Path) -> list | None:
    """What a query process needs to show the tags file as the view ``tags``: [its path, its change stamp] (the stamp
    makes a changed file a new connection, whose view is bound afresh), or None without a tags file."""
    try:
        info = plain_file(folder / TAGS)
    except TagError:
        return None  # shown as no tags in SQL; index.tags() says what is wrong
    return None if info is None else [str(folder / TAGS), info.st_mtime_ns]


__all__ = ["TAGS", "TagError", "add_tag", "check_tag", "locked", "read_tags", "remove_tag", "write_atomically"]
