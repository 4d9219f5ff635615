"""``load_model(spec)``: one entry point for every model vitviz can show.

    "default"                          the checkpoint shipped in checkpoints/
    "torchvision:vit_b_16"             torchvision weights (DEFAULT), downloaded once into torch's cache
    "torchvision:vit_b_16:IMAGENET1K_SWAG_E2E_V1"   ... naming the weights
    "timm:vit_base_patch16_224.augreg2_in21k_ft_in1k"   a pretrained timm model, through the Hugging Face Hub cache
    "hf:facebook/dinov2-with-registers-base"           a Hugging Face Hub repository (vit, deit, dinov2, clip, siglip...)
    "facebook/dinov2-with-registers-base"              the same, when no local path has that name
    "open_clip:ViT-B-16/openai"        an open_clip model and pretrained tag, with its text tower
    "open_clip:hf-hub:timm/ViT-B-16-SigLIP"            an open_clip model on the Hugging Face Hub
    "path/to/model.pt"                 a vitviz checkpoint
    "path/to/hf-folder"                a Hugging Face ViT saved with save_pretrained

Every model comes back in eval mode with ``.class_names`` and ``.transform``; CLIP and SigLIP models loaded with
their text half also have ``.text_tower`` (``vitviz.zero_shot`` turns prompts into classes), and image towers
without one say why in ``.text_tower_note``. Downloads happen once;
offline, a model already in its cache loads, and one that is not fails within seconds with a message
that names the cache folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from vitviz import hub
from vitviz.checkpoint import ModelLoadError, describe, load_checkpoint, load_torch_file
from vitviz.hub import REPO_ID
from vitviz.images import Preprocessing
from vitviz.importers import TORCHVISION_ARCHS, from_torchvision, load_huggingface_folder
from vitviz.importers.common import read_json
from vitviz.importers.huggingface import SHARD_INDEX, shard_files, weight_limit
from vitviz.importers.huggingface_text import TEXT_TOWER_TYPES, TOKENIZER_FILES
from vitviz.importers.open_clip import load_open_clip, open_clip_for_timm
from vitviz.importers.timm import load_timm, load_timm_preprocessing
from vitviz.model import ViT
from vitviz.model.config import echo


def _shipped_default() -> Path:
    """checkpoints/default.pt: inside the package when installed from a wheel (pyproject.toml maps the
    checkout's checkpoints/ to vitviz/checkpoints/), else in the checkout (a clone, or `pip install -e .`)."""
    package = Path(__file__).resolve().parent
    installed = package / "checkpoints" / "default.pt"
    return installed if installed.is_file() else package.parent / "checkpoints" / "default.pt"


# VITVIZ_DEFAULT_CHECKPOINT points "default" at another vitviz checkpoint (e.g. your own model)
DEFAULT_CHECKPOINT = Path(os.environ.get("VITVIZ_DEFAULT_CHECKPOINT") or _shipped_default())
DOWNLOAD_TIMEOUT_S = 10.0  # per network operation: connecting, or waiting for the next bytes


def load_model(spec: str | Path = "default") -> ViT:
    """Load a model by spec (see the module docstring); errors are ``ModelLoadError``."""
    spec = str(spec).strip()
    if spec == "default":
        if not DEFAULT_CHECKPOINT.is_file():
            raise ModelLoadError(
                f"no default checkpoint is shipped yet ({DEFAULT_CHECKPOINT} is missing); train one with "
                "`python -m vitviz.train`, or load 'torchvision:vit_b_16' or a checkpoint path instead"
            )
        return load_checkpoint(DEFAULT_CHECKPOINT)
    if spec.startswith("torchvision:"):
        return load_torchvision(spec.removeprefix("torchvision:"))
    if spec.startswith("timm:"):
        return load_timm_with_text(spec.removeprefix("timm:").strip())
    if spec.startswith("hf:"):
        return load_huggingface_hub(spec.removeprefix("hf:").strip())
    if spec.startswith("open_clip:"):
        return load_open_clip(spec.removeprefix("open_clip:").strip())
    path = _local_path(spec)
    if path is not None and path.is_dir():
        return load_huggingface_folder(path)
    if path is not None:
        return load_checkpoint(path)
    if REPO_ID.fullmatch(spec):
        return load_huggingface_hub(spec)
    raise ModelLoadError(
        f"model {echo(spec)} not found: give 'default', 'torchvision:<arch>[:<weights>]' with arch one of "
        f"{', '.join(TORCHVISION_ARCHS)}, 'timm:<name>', 'hf:<org>/<name>', 'open_clip:<model>/<tag>', "
        "'open_clip:hf-hub:<org>/<name>', a vitviz checkpoint file, "
        "or a Hugging Face model folder"
    )


def _local_path(spec: str) -> Path | None:
    """The file or folder ``spec`` names (``~`` and ``~user`` expanded), None when there is none; a ModelLoadError
    for a ``~user`` of no user on this machine, or a name the system refuses (too long, say)."""
    try:
        path = Path(spec).expanduser()
    except RuntimeError:  # ~someone, and no someone
        raise ModelLoadError(
            f"model {echo(spec)} not found: {echo(Path(spec).parts[0], 80)} names the home folder of "
            "a user this machine does not have"
        ) from None
    try:
        return path if path.is_dir() or path.is_file() else None
    except OSError as error:  # e.g. ENAMETOOLONG: Path.is_dir only hides "no such file"
        raise ModelLoadError(f"model {echo(spec)} cannot be opened: {error.strerror or describe(error)}") from None


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


def load_huggingface_hub(repo_id: str) -> ViT:
    """A Hugging Face Hub repository, downloaded once into the Hub cache: config.json, model.safetensors
    (or its shards, or pytorch_model.bin) and preprocessor_config.json when the repository has one."""
    if not REPO_ID.fullmatch(repo_id):
        raise ModelLoadError(
            f"{echo(repo_id)} is not a Hugging Face repository id (org/name, 96 characters each at most)"
        )
    spec = f"hf:{repo_id}"
    fetch = partial(hub.hub_file, repo_id, spec=spec, offline=not hub.hub_reachable())  # the Hub is asked once
    config = fetch(["config.json"])
    weights = fetch(["model.safetensors", SHARD_INDEX, "pytorch_model.bin"])
    if weights.name == SHARD_INDEX:  # a big model in shards: each one the index lists
        for shard in shard_files(weights, weight_limit(read_json(config))):
            fetch([shard])
    fetch(["preprocessor_config.json"], required=False)  # else ViTImageProcessor's defaults
    if read_json(config).get("model_type") in TEXT_TOWER_TYPES:  # CLIP, SigLIP: the tokenizer, for the text tower
        for name in TOKENIZER_FILES:
            fetch([name], required=False)
    return load_huggingface_folder(config.parent)


def load_torchvision(name: str) -> ViT:
    """``"vit_b_16"`` or ``"vit_b_16:IMAGENET1K_V1"`` -> converted model with ImageNet class names.

    Weights come from torch's hub cache when present; otherwise they are downloaded with
    a timeout, so an offline machine gets an error in seconds instead of a hang.
    """
    from torchvision import models

    arch, _, weights_name = name.partition(":")
    if arch not in TORCHVISION_ARCHS:
        raise ModelLoadError(f"unknown torchvision ViT {echo(arch)}; choose one of {', '.join(TORCHVISION_ARCHS)}")
    weights_enum = models.get_model_weights(arch)
    weights_name = weights_name.removeprefix(f"{weights_enum.__name__}.") or "DEFAULT"
    try:
        weights = weights_enum[weights_name]
    except KeyError:
        choices = ", ".join(["DEFAULT", *(w.name for w in weights_enum)])
        raise ModelLoadError(f"{arch} has no weights {echo(weights_name)}; choose one of {choices}") from None

    path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    state_dict = _cached_download(weights.url, path)
    image_size = weights.meta["min_size"][0]
    tv_model = models.get_model(arch, weights=None, image_size=image_size, num_classes=len(weights.meta["categories"]))
    try:
        tv_model.load_state_dict(state_dict)
    except Exception as error:  # another model's weights under this name: a message, never a traceback
        raise ModelLoadError(
            f"cached weights {path} are not {arch}'s ({describe(error)}); delete the file and retry"
        ) from None
    model = from_torchvision(tv_model)
    model.class_names = list(weights.meta["categories"])
    model.transform = preprocessing_from_torchvision(weights.transforms())
    return model


def preprocessing_from_torchvision(transform) -> Preprocessing:
    """The same resize/crop/normalisation as a torchvision ``ImageClassification`` preset."""
    return Preprocessing(
        resize=transform.resize_size[0],
        crop=transform.crop_size[0],
        mean=tuple(transform.mean),
        std=tuple(transform.std),
        interpolation=transform.interpolation.value,
    )


def _cached_download(url: str, path: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> dict[str, torch.Tensor]:
    """State dict from ``path`` in torch's hub cache, downloading it there from ``url`` first if needed."""
    if not path.is_file():
        download(url, path, timeout)
    try:
        return load_torch_file(path)
    except ModelLoadError as error:  # a damaged cache file: say where it is so it can be deleted
        raise ModelLoadError(f"cached weights could not be read: {error}; delete the file and retry") from None


def download(url: str, path: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> None:
    """Download ``url`` to ``path`` atomically, with a progress bar (vitviz.hub.PROGRESS_BAR), checking
    torchvision's hash prefix in the name.

    ``timeout`` bounds each connect and each read, so a dead network fails fast. This is why vitviz does not
    call torch.hub.download_url_to_file, which has no timeout: against a server that accepts the connection
    and never answers, it was still waiting after 60 s, and this function failed after 10 s
    (bench/bench_download_stall.py).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    bar_class = hub.PROGRESS_BAR.get() or partial(tqdm, disable=None)  # tqdm on a terminal only, like the Hub's
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
            size = int(response.headers.get("Content-Length") or 0) or None
            with bar_class(total=size, unit="B", unit_scale=True, desc=path.name) as bar:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        tmp.unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise ModelLoadError(
            f"could not download {url} ({reason}). Is this machine offline? Weights are cached in "
            f"{path.parent} after the first download; copy the file there to use it offline."
        ) from None
    expected = re.search(r"-([a-f0-9]{6,})\.", path.name)  # torchvision names files <arch>-<sha256 prefix>.pth
    if expected and not digest.hexdigest().startswith(expected[1]):
        tmp.unlink(missing_ok=True)
        raise ModelLoadError(f"download of {url} is corrupt (sha256 does not match {expected[1]}); try again")
    tmp.replace(path)
