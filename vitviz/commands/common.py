"""What the commands share: the image (and video) files their arguments name, and the methods' own options."""

from __future__ import annotations

import argparse
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


def add_method_options(parser: argparse.ArgumentParser) -> None:
    """The sampling and perturbation methods' own options (``MapOptions``), as one group of every command that
    computes maps; their defaults are the library's (docs/methods.md)."""
    group = parser.add_argument_group("the sampling, perturbation and flow methods' options")
    for flag, name, kind, what in METHOD_FLAGS:
        group.add_argument(flag, dest=f"method_{name}", type=kind, metavar=name.upper(), help=what)


METHOD_FLAGS = (
    ("--ig-steps", "steps", int, "integrated-gradients: steps from the baseline (default 32)"),
    ("--samples", "samples", int, "smoothgrad, kernel-shap, rise: samples (default 32, 512 and 4000)"),
    ("--noise", "noise", float, "smoothgrad: noise std as a fraction of the input's range (default 0.15)"),
    ("--occlusion-window", "window", int, "occlusion: the square's side in pixels (default: the patch)"),
    ("--occlusion-stride", "stride", int, "occlusion: its step in pixels (default: the window)"),
    ("--rise-cells", "cells", int, "rise: the mask grid's cells a side (default 7)"),
    ("--rise-keep", "keep", float, "rise: the probability that a cell is kept (default 0.5)"),
    ("--sample-batch", "batch", int, "the sampling methods: images per forward pass (default 16)"),
    ("--method-seed", "seed", int, "the sampling methods' random numbers (default 0)"),
    ("--flow-limit", "flow_limit", int, "attention-flow: the most edges its graph may have (default 1500000)"),
)


def method_options(args: argparse.Namespace) -> dict:
    """The options given on the command line, by ``method_maps``'s names (the rest keep their defaults)."""
    found = {name: getattr(args, f"method_{name}", None) for _, name, _, _ in METHOD_FLAGS}
    return {name: value for name, value in found.items() if value is not None}


def check_method_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """``method_options``, each checked as MapOptions checks it: a bad one ends the command in one line."""
    from vitviz.explain import MapOptions

    options = method_options(args)
    try:
        MapOptions(**options)
    except ValueError as error:
        flags = {name: flag for flag, name, _, _ in METHOD_FLAGS}
        message = str(error)
        for name, flag in flags.items():
            if message.startswith(f"{name} "):
                message = flag + message[len(name) :]
        parser.error(message)
    return options
