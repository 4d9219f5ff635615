"""What the commands share: the image (and video) files their arguments name."""

from __future__ import annotations

from pathlib import Path

from vitviz.preprocessing import IMAGE_SUFFIXES, image_files


def find_images(paths: list[Path], videos: frozenset[str] = frozenset()) -> list[Path]:
    """The files the arguments name: files as given, and under folders the images (and, with ``videos``, the files
    with those suffixes, hidden ones left out), sorted; a missing path or nothing found ends the command in one line."""
    found = []
    for path in paths:
        if path.is_dir():
            extra = (
                {p for p in path.rglob("*") if p.suffix.lower() in videos and not p.name.startswith(".")}
                if videos
                else set()
            )
            found += sorted(set(image_files(path)) | {p for p in extra if p.is_file()})
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"error: {path} does not exist")
    if not found:
        kinds = "images or videos" if videos else "images"
        raise SystemExit(
            f"error: no {kinds} ({', '.join(sorted(IMAGE_SUFFIXES | videos))}) in {', '.join(map(str, paths))}"
        )
    return found
