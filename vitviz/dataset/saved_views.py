"""Named views of an index, kept beside it (FiftyOne's saved views): ``DIR/views.json``, one record per name of what
the Dataset page's address holds (tab and filters, link.py's parameters) and what it does not: the ticked table rows,
the Grid's selection (with its similarity scores, when a search made it) and the map drawn over it.

Like the tags (tags.py), the file is the researcher's, beside the index's checksummed files: every change is a
read-modify-write under the folder's lock, written to a temporary file and renamed into place. A file that is not
one this module wrote raises SavedViewError with one line; nothing in it is trusted before it is checked.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from vitviz.dataset.tags import TagError, locked, plain_file, write_atomically

VIEWS = "views.json"
MAX_NAME = 64
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9 _.:+-]{{0,{MAX_NAME - 1}}}")
NAME_RULE = f"1 to {MAX_NAME} letters, digits, spaces and _ . : + -, beginning with a letter or digit"
MAX_VIEWS = 500
MAX_BYTES = 16 << 20  # a views file larger than this is not one this module wrote
MAX_IDS = 1_000_000  # ids a view's selection or ticks may hold
MAX_TEXT = 4_096  # characters of a parameter's value or a title
FORMAT = 1


class SavedViewError(ValueError):
    """A view name refused, or a views file that cannot be read or written; the message says why."""


@dataclass(frozen=True)
class SavedView:
    """One named view of an index."""

    params: dict[str, list[str]]  # the page's address without the index: tab and filters (link.py's names)
    ticked: tuple[int, ...] = ()  # the table rows ticked, by image id
    selection: tuple[int, ...] = ()  # the Grid's selection, in its order
    title: str = ""  # what the selection is ("the 11 images nearest to image 3")
    scores: tuple[float, ...] | None = None  # the selection's similarity scores, when a search made it
    grid_map: str | None = None  # the map drawn over the Grid's photos
    saved: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))

    def to_json(self) -> dict:
        lists = {"ticked": list(self.ticked), "selection": list(self.selection)}
        return asdict(self) | lists | {"scores": None if self.scores is None else list(self.scores)}


def check_name(name: object) -> str:
    """The name when valid (surrounding spaces dropped), else SavedViewError naming the rule."""
    text = name.strip() if isinstance(name, str) else name
    if not isinstance(text, str) or not NAME.fullmatch(text):
        raise SavedViewError(f"a view's name is {NAME_RULE}; {repr(name)[:80]} is not")
    return text


def _ids(where: str, value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_IDS or not all(type(i) is int and i >= 0 for i in value):
        raise SavedViewError(f"{where} must be a list of image ids")
    return tuple(value)


def _text(where: str, value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise SavedViewError(f"{where} must be a text of at most {MAX_TEXT} characters")
    return value


def view_from_json(name: str, record: object) -> SavedView:
    """A record of the file, every field checked."""
    where = f"view {name!r}"
    if not isinstance(record, dict) or not isinstance(record.get("params"), dict):
        raise SavedViewError(f"{where} is not a view (no params)")
    params = {}
    for key, values in record["params"].items():
        if not isinstance(values, list) or len(values) > 1000:
            raise SavedViewError(f"{where}: parameter {str(key)[:40]!r} must be a list of texts")
        params[_text(f"{where}'s parameter name", key)] = [_text(f"{where}'s {key}", v) for v in values]
    scores = record.get("scores")
    if scores is not None:
        if not isinstance(scores, list) or not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) for s in scores
        ):
            raise SavedViewError(f"{where}: scores must be a list of numbers")
        scores = tuple(float(s) for s in scores)
    selection = _ids(f"{where}'s selection", record.get("selection", []))
    if scores is not None and len(scores) != len(selection):
        raise SavedViewError(f"{where} has {len(scores)} scores for {len(selection)} selected images")
    grid_map = record.get("grid_map")
    return SavedView(
        params=params,
        ticked=_ids(f"{where}'s ticked rows", record.get("ticked", [])),
        selection=selection,
        title=_text(f"{where}'s title", record.get("title", "")),
        scores=scores,
        grid_map=None if grid_map is None else _text(f"{where}'s map", grid_map),
        saved=_text(f"{where}'s date", record.get("saved", "")),
    )


def read_views(folder: Path) -> dict[str, SavedView]:
    """The index's saved views by name (in the order they were saved); empty when none was ever saved."""
    path = Path(folder) / VIEWS
    try:
        info = plain_file(path)
    except TagError as error:
        raise SavedViewError(str(error)) from None
    if info is None:
        return {}
    if info.st_size > MAX_BYTES:
        raise SavedViewError(f"{path} is {info.st_size:,} bytes, more than a views file holds: delete it")
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as error:
        raise SavedViewError(f"{path} is not a readable views file ({str(error)[:100]}): delete it") from None
    views = document.get("views") if isinstance(document, dict) else None
    if not isinstance(views, dict) or document.get("format") != FORMAT:
        raise SavedViewError(f"{path} is not a views file of this vitviz (format {FORMAT}): delete it")
    try:
        return {check_name(name): view_from_json(name, record) for name, record in views.items()}
    except SavedViewError as error:
        raise SavedViewError(f"{path}: {error}; delete it or that view") from None


def _write(folder: Path, views: dict[str, SavedView]) -> None:
    document = {"format": FORMAT, "views": {name: view.to_json() for name, view in views.items()}}
    try:
        write_atomically(folder / VIEWS, json.dumps(document, indent=1).encode())
    except OSError as error:
        raise SavedViewError(f"cannot write {folder / VIEWS}: {error.strerror or error}") from None


def save_view(folder: Path, name: str, view: SavedView) -> str:
    """Keep ``view`` under ``name`` (replacing a view of that name); the name as kept."""
    name, folder = check_name(name), Path(folder)
    view = view_from_json(name, view.to_json())  # what a reader would refuse is refused now
    try:
        with locked(folder):
            views = read_views(folder)
            if name not in views and len(views) >= MAX_VIEWS:
                raise SavedViewError(f"the index keeps at most {MAX_VIEWS} views: delete one first")
            views[name] = view
            _write(folder, views)
    except TagError as error:  # the lock
        raise SavedViewError(str(error)) from None
    return name


def delete_view(folder: Path, name: str) -> bool:
    """Forget the view ``name``; whether there was one."""
    name, folder = check_name(name), Path(folder)
    try:
        with locked(folder):
            views = read_views(folder)
            if views.pop(name, None) is None:
                return False
            _write(folder, views)
    except TagError as error:
        raise SavedViewError(str(error)) from None
    return True


__all__ = ["SavedView", "SavedViewError", "check_name", "delete_view", "read_views", "save_view"]
