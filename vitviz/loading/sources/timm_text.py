"""timm names with a text tower: timm's CLIP and SigLIP repositories on the Hugging Face Hub also hold open_clip's
weights, so ``"timm:<name>"`` of such a model loads through open_clip, with its text tower and timm's preprocessing.
Every other timm name loads through timm alone (sources/timm.py). This module is the ``timm:`` source's loader."""

from __future__ import annotations

import functools

from vitviz.loading import download
from vitviz.loading.errors import ModelLoadError
from vitviz.loading.sources.open_clip import load_open_clip
from vitviz.loading.sources.source import ModelSource
from vitviz.loading.sources.timm import load_timm, load_timm_preprocessing
from vitviz.model import ViT

# never in a name of timm's registry; in its local-dir: and hf-hub: names, which can open other sources
TIMM_SOURCE_CHARS = ("/", "\\", ":")


@functools.cache
def _open_clip_repositories() -> dict[str, str]:
    """Hub repository -> open_clip spec ("<model>/<tag>") for every pretrained tag open_clip knows; read once (about
    a second), not at every timm load."""
    import open_clip

    found = {}
    for model_name, tag in open_clip.list_pretrained():
        repo = "/".join((open_clip.get_pretrained_cfg(model_name, tag).get("hf_hub") or "").strip("/").split("/")[:2])
        if repo:
            found.setdefault(repo, f"{model_name}/{tag}")
    return found


def open_clip_for_timm(name: str) -> str | None:
    """The open_clip spec ("<model>/<tag>") whose weights live in the Hub repository of timm's pretrained ``name``,
    if any: timm's CLIP and SigLIP repositories also hold open_clip's weights, text tower included."""
    import timm

    try:  # a name timm does not know is refused later, by load_timm, with its own message
        cfg = timm.models.get_pretrained_cfg(name) if timm.is_model(name.split(".")[0]) else None
    except RuntimeError:
        return None
    if cfg is None or not cfg.hf_hub_id:
        return None
    repo = cfg.hf_hub_id.split("@")[0].strip("/")
    if repo in _open_clip_repositories():  # open_clip's own registry names the repository
        return _open_clip_repositories()[repo]
    # else the repository itself may say so (timm's SigLIP repositories): from the cache only when offline
    try:
        config = download.hub_file(repo, ["open_clip_config.json"], f"timm:{name}", required=False)
    except ModelLoadError:  # the Hub could not tell: load the image tower as before
        return None
    return f"hf-hub:{repo}" if config is not None else None


def load_timm_with_text(name: str) -> ViT:
    """A timm model; CLIP and SigLIP names whose Hub repository also holds open_clip's weights (``open_clip_for_timm``)
    load through open_clip instead, with their text tower and timm's preprocessing. When that fails (offline, with
    only timm's file cached) the image tower loads alone and ``text_tower_note`` says why."""
    with_text = open_clip_for_timm(name)
    note = None
    if with_text:
        try:
            model = load_open_clip(with_text)
        except ModelLoadError as error:
            note = f"its text tower comes with open_clip:{with_text}, which could not be loaded: {error}"
        else:
            model.transform = load_timm_preprocessing(name)
            return model
    model = load_timm(name)
    model.text_tower_note = note
    return model


def names_no_path(name: str) -> bool:
    """A plain name of timm's registry: timm opens a local folder for ``local-dir:<path>`` (and other sources for
    ``hf-hub:...``), so a name typed into a page must hold none of TIMM_SOURCE_CHARS."""
    return bool(name) and not any(c in name for c in TIMM_SOURCE_CHARS)


SOURCE = ModelSource("timm", load_timm_with_text, "'timm:<name>'", names_no_path)
