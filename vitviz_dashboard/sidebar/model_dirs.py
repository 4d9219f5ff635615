"""What the page may open from the text a visitor types: checkpoints and model folders only inside the
folders the server's owner allows, and timm or Hugging Face specs that name no local path.

Anyone who can reach a deployed dashboard can type into its fields. ``vitviz.load_model`` opens any path
the server can read, and its messages ("not found", "is not a readable PyTorch file", "has no
config.json") would tell a visitor which files exist. So a typed path is resolved (``~``, ``..`` and
symlinks) and compared with the allowed folders before anything looks at what it points to, and every
path outside them gets the same message, OUTSIDE_MESSAGE. Uploaded checkpoints are not typed paths and
are not checked here.

VITVIZ_MODEL_DIRS (folders separated by os.pathsep) names the allowed folders; unset, they are the
checkpoints folder and the working directory; empty, the page opens no paths at all (uploads still work).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from vitviz.loading import specs

MODEL_DIRS = "VITVIZ_MODEL_DIRS"
OUTSIDE_MESSAGE = (
    "This page opens checkpoints and model folders only inside the folders that the server's owner allows "
    f"({MODEL_DIRS}). Upload the checkpoint instead."
)
PATHS_OFF_MESSAGE = (
    f"The server's owner has turned off opening paths on this page ({MODEL_DIRS} is empty). Upload a checkpoint "
    "instead."
)


class ModelRefused(ValueError):
    """A model the page will not open; its message is the one to show."""


def allowed_model_dirs(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The folders inside which typed paths may be opened, read in every run: VITVIZ_MODEL_DIRS's folders
    (separated by os.pathsep; ``~`` expands, relative ones are relative to the working directory), or,
    when it is unset, the checkpoints folder (the default checkpoint's) and the working directory.
    An empty value gives none: opening paths is off."""
    if MODEL_DIRS not in environ:
        return [specs.DEFAULT_CHECKPOINT.parent, Path.cwd()]
    return [Path(part.strip()).expanduser() for part in environ[MODEL_DIRS].split(os.pathsep) if part.strip()]


def check_model_path(text: str, roots: Sequence[Path]) -> Path:
    """The real path of the typed ``text`` (``~`` expanded, relative to the working directory, ``..`` and
    symlinks resolved) when it lies inside one of ``roots``; else ModelRefused with OUTSIDE_MESSAGE.

    The decision follows the path's symlinks but never looks at what it names, and the message is the same
    for every path outside: a file, a folder, a symlink out of an allowed folder, a missing or unreadable
    path. Give load_model the returned path, so that what it opens is what was checked, and so that a text
    such as ``timm:local-dir:/etc`` is read as a (missing) file in an allowed folder, never as a spec."""
    try:
        path = Path(os.path.realpath(Path(text.strip()).expanduser()))
    except (ValueError, RuntimeError, OSError):  # a NUL byte in the text; no home folder for "~"; no working directory
        raise ModelRefused(OUTSIDE_MESSAGE) from None
    if not any(path.is_relative_to(os.path.realpath(root)) for root in roots):
        raise ModelRefused(OUTSIDE_MESSAGE)
    return path


def check_hub_spec(text: str) -> str:
    """What a spec typed into the page means (vitviz.loading.specs.typed_spec: a bare ``<org>/<name>`` is a Hub
    repository, a bare name a timm model), or "" for nothing typed, when it names no local path; else ModelRefused.
    timm opens a local folder for ``local-dir:<path>`` names (and reads other sources for ``hf-hub:...``), so a timm
    name must be a plain name of timm's registry; a Hugging Face spec must be a repository id, which never names a
    local folder. Each source says which of its names are safe (``ModelSource.names_no_path``)."""
    spec = specs.typed_spec(text)
    if not spec or specs.names_no_path(spec):
        return spec
    raise ModelRefused(
        f"`{spec}` is not a timm model name, an open_clip model or a Hugging Face repository: this field takes "
        f"{specs.typed_usage()}, never a local path (timm's and open_clip's `local-dir:` included). For a checkpoint "
        'of your own, choose "path or upload..." in the model picker.'
    )
