"""What the commands share: the image files their arguments name."""

from __future__ import annotations

from pathlib import Path

from vitviz.preprocessing import IMAGE_SUFFIXES, image_files


def find_images(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found += image_files(path)
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"error: {path} does not exist")
    if not found:
        raise SystemExit(f"error: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {', '.join(map(str, paths))}")
    return found
