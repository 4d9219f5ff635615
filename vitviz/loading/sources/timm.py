"""The ``timm:`` source: ``load_model("timm:<name>")`` loads a pretrained timm model through timm and the Hugging Face
Hub cache, and converts it (from_timm.py). timm's CLIP and SigLIP repositories on the Hub also hold open_clip's weights,
so such a name loads through open_clip instead, with its text tower and timm's preprocessing.

timm is imported inside the functions: ``import vitviz`` stays fast."""

from __future__ import annotations

import functools

import torch

from vitviz.loading import download
from vitviz.loading.build import check_model_size
from vitviz.loading.download import hub_file
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.from_timm import from_timm, imagenet_class_names, preprocessing_from_timm, timm_config
from vitviz.loading.sources.open_clip import load_open_clip
from vitviz.loading.sources.source import ModelSource
from vitviz.loading.sources.weights_files import check_weights_file
from vitviz.messages import echo
from vitviz.model import ViT
from vitviz.preprocessing import Preprocessing

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


def load_timm(name: str) -> ViT:
    """A pretrained timm model by name (``"vit_base_patch16_224.augreg2_in21k_ft_in1k"``), converted.

    Weights come through timm and the Hugging Face Hub cache. Class names come from timm's ImageNet
    metadata (1k, 21k...); a model whose head maps to anything else (CLIP's projection) loses its
    head and becomes a backbone. Preprocessing follows timm's pretrained config.
    """
    import timm

    architecture = name.split(".")[0]
    if not timm.is_model(architecture):
        raise ModelLoadError(f"timm has no model {echo(architecture)}; timm.list_models('*vit*') lists the ViTs")
    tags = timm.list_pretrained(f"{architecture}.*")
    if not tags or ("." in name and name not in tags):
        choices = ", ".join(tags[:12]) + (" ..." if len(tags) > 12 else "") if tags else "none"
        raise ModelLoadError(f"timm has no pretrained weights {echo(name)}; pretrained tags: {choices}")
    with torch.device("meta"):  # refuse what cannot be converted, or cannot fit, before downloading anything
        config = timm_config(timm.create_model(name, pretrained=False))
    check_model_size(config, f"timm:{name}")
    cfg = timm.models.get_pretrained_cfg(name)
    weights = None
    if cfg.hf_hub_id:  # through vitviz.loading.download, which fails fast offline, then timm loads the file as its own
        repo_id, _, revision = cfg.hf_hub_id.partition("@")
        weights = hub_file(
            repo_id, ["model.safetensors", cfg.hf_hub_filename or "pytorch_model.bin"], f"timm:{name}", revision or None
        )
    try:  # a few old weights live at plain URLs: timm downloads those itself
        if weights:
            check_weights_file(weights)  # its header: a hostile file in the cache is refused before timm reads it
        original = timm.create_model(
            name, pretrained=True, pretrained_cfg_overlay={"file": str(weights)} if weights else None
        )
    except Exception as error:  # a truncated, foreign or hostile file in the cache: a message, never a traceback
        where = f"the weights in {weights}" if weights else "its weights"
        why = error if isinstance(error, ModelLoadError) else f"{where} could not be loaded ({describe(error)})"
        fix = "; delete the file to download it again" if weights else ""
        raise ModelLoadError(f"timm:{name}: {why}{fix}") from None
    class_names = imagenet_class_names(original)
    if class_names is None and original.num_classes:
        original.reset_classifier(0)
    model = from_timm(original.eval())
    model.class_names = class_names or []
    model.transform = preprocessing_from_timm(original)
    return model


def load_timm_preprocessing(name: str) -> Preprocessing:
    """timm's evaluation transform for a pretrained name, from a model built on the meta device (no weights)."""
    import timm

    with torch.device("meta"):
        return preprocessing_from_timm(timm.create_model(name, pretrained=False))


def names_no_path(name: str) -> bool:
    """A plain name of timm's registry: timm opens a local folder for ``local-dir:<path>`` (and other sources for
    ``hf-hub:...``), so a name typed into a page must hold none of TIMM_SOURCE_CHARS."""
    return bool(name) and not any(c in name for c in TIMM_SOURCE_CHARS)


SOURCE = ModelSource("timm", load_timm_with_text, "'timm:<name>'", names_no_path)
