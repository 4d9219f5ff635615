"""One-line message helpers: what an error message echoes of a name, a spec, a file's value or a library's own message,
cut so that a hostile one of a megabyte stays readable. The bottom layer: it imports nothing of vitviz, so every
module (the model's config checks included) may use it."""

from __future__ import annotations

from typing import Any


def clip_text(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters with its full length said: what an error message echoes of a
    name, a spec, a file's value or a library's own message, so a hostile one of a megabyte stays readable."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def echo(value: Any, limit: int = 200) -> str:
    """``repr(value)`` for a message, cut as ``clip_text`` does."""
    return clip_text(repr(value), limit)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """ "1 image", "2 images", "1,024 rows": a count with its noun in the right number (``plural`` where adding "s"
    does not make it)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
