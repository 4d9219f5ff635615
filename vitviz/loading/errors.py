"""ModelLoadError, the one error of loading, and the helpers that keep its messages to one short line."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from vitviz.messages import clip_text

MAX_MESSAGE = 1000  # characters of an error message; the parts that echo a file or a spec are cut to 200 before


class ModelLoadError(ValueError):
    """A model could not be loaded; the message names the problem and, where possible, the fix. It is one line,
    of at most MAX_MESSAGE characters, whatever it quotes."""

    def __init__(self, message: str):
        super().__init__(clip_text(message, MAX_MESSAGE))


class ModelNotFoundError(ModelLoadError):
    """A spec that names no model: no source, file, folder or Hub id of that name. A page that reads only some
    kinds of model (the Video page) says what it reads instead of the message's whole list."""


def describe(error: BaseException) -> str:
    """A library's error as a short line for a message of ours: its type and the start of its text."""
    return f"{type(error).__name__}: {clip_text(str(error))}"


def summarize(items: Sequence[str], count: int | None = None, limit: int = 5) -> str:
    """The first ``limit`` of ``items`` (each cut to 100 characters) and how many more of ``count`` (all of them)."""
    count = len(items) if count is None else count
    more = f" and {count - limit:,} more" if count > limit else ""
    return ", ".join(clip_text(item, 100) for item in itertools.islice(items, limit)) + more
