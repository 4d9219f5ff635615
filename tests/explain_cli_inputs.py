"""Inputs of the `vitviz explain` tests: class names and a folder of photos of every shape, one broken."""

from pathlib import Path

from PIL import Image

NAMES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


def photo_folder(folder: Path) -> Path:
    """Photos of three shapes in ``folder`` and a subfolder, two with the same stem, and one broken file."""
    (folder / "nested").mkdir(parents=True)
    Image.effect_mandelbrot((64, 48), (-2, -1, 1, 1), 30).convert("RGB").save(folder / "wide.png")
    Image.new("RGB", (40, 70), (10, 200, 30)).save(folder / "nested" / "tall.jpg")
    Image.new("RGB", (20, 20), (1, 2, 3)).save(folder / "nested" / "wide.bmp")  # same stem as wide.png
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return folder


def explain(source, model, out, *options: str) -> int:
    """``vitviz explain SOURCE --model MODEL --out OUT OPTIONS...`` run in this process; returns its exit status."""
    from vitviz.commands.explain import main

    return main([str(source), "--model", str(model), "--out", str(out), *options])
